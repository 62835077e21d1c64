"""Following a log: its committed entries, in order, from a position its user keeps, as
they commit, read from the log's writer: over a Read stream, or straight from the writer's
store when the writer is the log server of this process (the host layout). When ZooKeeper
names another writer (LogClient.on_writer_change), a stream from the old one is cancelled
and the follow moves to the new one at once; every WRITER_RECHECK_S the streams are also
checked against the writer nodes, a net under the watches. A server that stopped writing
would otherwise keep its stream: paused past its session, it holds it silent until it
resumes, and then serves it as a follower, its commit point behind the new writer's.

The storage node's tail threads (storage_node/apply_loop.py) follow the logs carrying its
shards with LogClient.follow; what they do with the entries is theirs."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import grpc

from log import limits, reading
from log.catch_up import Unavailable
from log.ports import FollowedEntry, LocalLog
from midtown_pb import log_pb2 as pb
from midtown_pb import log_pb2_grpc
from runtime import world
from runtime.loops import Backoff

if TYPE_CHECKING:
    from runtime import inprocess

log = logging.getLogger("midtown.log.follow")

# Polling alone, every second, was measured: a host that took a log over began applying it
# 0.7 s after its takeover (`bench failover`); the watch is the path, this the net.
WRITER_RECHECK_S = 10.0
BACKOFF_FIRST_S = 0.1
BACKOFF_MAX_S = 1.0
# How long an in-process follow waits for the next commit before it looks again whether
# the writer here still writes the log.
LOCAL_WAIT_S = 0.5


class Writers(Protocol):
    """What a follow asks of the log client (log/client.py LogClient)."""
    def writer_addr(self, log_id: int, refresh: bool = False) -> str | None: ...
    def stub(self, addr: str) -> log_pb2_grpc.LogStub: ...
    def on_writer_change(self, log_id: int, fn: Callable[[str | None], None]) -> None: ...


class Follow:
    def __init__(self, client: Writers, log_id: int, position: Callable[[], int],
                 deliver: Callable[[Sequence[FollowedEntry]], None], behind: Callable[[str], None],
                 stop: threading.Event, linger_ms: int, local: inprocess.Local[LocalLog] | None) -> None:
        """`position()`: the next position the user wants (it moves as `deliver` takes
        entries, and `behind` may move it past a truncation); `deliver(entries)`: entries
        in order from `position()`, returning once they are taken; `behind(why)`: the
        position is below what the log still holds (truncated); `linger_ms`: how long a
        Read stream may hold entries back to send them together (log/linger.py)."""
        self.client = client
        self.log_id = log_id
        self.position = position
        self.deliver = deliver
        self.behind = behind
        self.stop = stop
        self.linger_ms = min(limits.LINGER_MS_MAX, max(0, linger_ms))
        self.local = local
        self.in_process = False  # reading straight from this process's writer now
        self._stream: tuple[str, Any] | None = None  # (server, Read stream) being read
        self._moved = False  # the stream was cancelled for a new writer
        self._delivered = False  # the stream being read has delivered entries
        client.on_writer_change(log_id, self.writer_is)

    def run(self) -> None:
        """Follow the log until `stop` is set (the caller's thread)."""
        backoff = Backoff(BACKOFF_FIRST_S, BACKOFF_MAX_S)
        while not self.stop.is_set():
            addr = self.client.writer_addr(self.log_id, refresh=True)
            if addr is None:
                world.sleep(backoff.next_s)
                continue
            node = self.local.at(addr) if self.local is not None else None
            if node is not None:
                self.in_process = True
                try:
                    read = self._read_in_process(node)
                finally:
                    self.in_process = False
                if read:
                    backoff.succeeded()
                else:  # ZooKeeper still names it, but it stopped writing
                    world.sleep(backoff.failed())
                continue
            self._delivered = False
            try:
                self._read_stream(addr)
                backoff.succeeded()
            except grpc.RpcError as e:
                if self._delivered:  # the stream worked a while: a new failure starts low
                    backoff.succeeded()
                if self._moved:
                    self._moved = False
                    continue  # the writer moved (writer_is): follow it at once
                if e.code() == grpc.StatusCode.OUT_OF_RANGE:
                    self.behind(e.details() or "truncated")
                else:
                    world.sleep(backoff.failed())

    def _read_stream(self, addr: str) -> None:
        stream = self.client.stub(addr).Read(
            pb.ReadRequest(log_id=self.log_id, from_position=self.position(), follow=True,
                           linger_ms=self.linger_ms))
        self._stream = (addr, stream)
        self.writer_is(self.client.writer_addr(self.log_id))  # moved meanwhile?
        try:
            for resp in stream:
                if self.stop.is_set():
                    stream.cancel()
                    return
                if resp.entries:
                    self.deliver(list(resp.entries))
                    self._delivered = True
        finally:
            self._stream = None

    def _read_in_process(self, node: LocalLog) -> bool:
        """Read the log from the writer of this process, no stream, until it stops writing
        it: whether anything was read."""
        read = False
        while not self.stop.is_set():
            if not node.writes(self.log_id):
                return read  # the writer moved: look it up again
            try:
                entries = node.read_from(self.log_id, self.position(), LOCAL_WAIT_S)
            except reading.Truncated as e:
                self.behind(str(e))
                continue
            except Unavailable as e:
                log.warning("log %d: %s", self.log_id, e)
                return read
            if entries:
                self.deliver(entries)
                read = True
        return read

    def writer_is(self, now: str | None) -> None:
        """The log's writer is at `now` (None: none named): a stream from another server is
        cancelled, and the follow moves to the writer at once."""
        current = self._stream
        if now is not None and current is not None and now != current[0]:
            log.info("log %d: the writer moved from %s to %s; following it", self.log_id, current[0], now)
            self.restart()

    def restart(self) -> None:
        """Read again from `position()` at once (its user moved it under the stream; a
        follow in this process reads from `position()` each time already)."""
        current = self._stream
        if current is not None:
            self._moved = True
            current[1].cancel()

    def recheck(self) -> None:
        """The net under the watch: read the writer node, and act on it as on a change."""
        if self._stream is not None:
            self.writer_is(self.client.writer_addr(self.log_id, refresh=True))
