"""Following a log: its committed entries, in order, from a position its user keeps, as
they commit, read from the log's writer through the log client's link (log/client_link.py:
a Read stream, or straight from the writer's store when the writer is the log server of
this process, log/local.py). When ZooKeeper names another writer
(LogClient.on_writer_change), a stream from the old one is cancelled and the follow moves to
the new one at once; every WRITER_RECHECK_S the streams are also checked against the writer
nodes, a net under the watches. A server that stopped writing would otherwise keep its
stream: paused past its session, it holds it silent until it resumes, and then serves it as
a follower, its commit point behind the new writer's.

The storage node's tail threads (storage_node/apply_loop.py) follow the logs carrying its
shards with LogClient.follow; what they do with the entries is theirs."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Protocol

import grpc

from log import limits
from log.client_link import Entries, LogLink
from log.ports import FollowedEntry
from runtime import world
from runtime.loops import Backoff
from runtime.refusals import Refusal

log = logging.getLogger("midtown.log.follow")

# Polling alone, every second, was measured: a host that took a log over began applying it
# 0.7 s after its takeover (`bench failover`); the watch is the path, this the net.
WRITER_RECHECK_S = 10.0
BACKOFF_FIRST_S = 0.1
BACKOFF_MAX_S = 1.0


class Writers(Protocol):
    """What a follow asks of the log client (log/client.py LogClient)."""
    link: LogLink

    def writer_addr(self, log_id: int, refresh: bool = False) -> str | None: ...
    def on_writer_change(self, log_id: int, fn: Callable[[str | None], None]) -> None: ...


class Follow:
    def __init__(self, client: Writers, log_id: int, position: Callable[[], int],
                 deliver: Callable[[Sequence[FollowedEntry]], None], behind: Callable[[str], None],
                 stop: threading.Event, linger_ms: int) -> None:
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
        self.in_process = False  # reading straight from this process's writer now
        self._stream: tuple[str, Entries] | None = None  # (server, stream) being read
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
            self._delivered = False
            try:
                self._read_stream(addr)
            except Refusal as e:
                if self._delivered:  # the stream worked a while: a new failure starts low
                    backoff.succeeded()
                if self._moved:
                    self._moved = False
                    continue  # the writer moved (writer_is): follow it at once
                log.debug("log %d: reading from %s failed: %s", self.log_id, addr, e.code.name)
                if e.code == grpc.StatusCode.OUT_OF_RANGE:
                    self.behind(e.message or "truncated")
                else:
                    world.sleep(backoff.failed())
                continue
            if self._delivered or self._moved:
                self._moved = False
                backoff.succeeded()
            else:  # ended with nothing read: ZooKeeper still names it, but it stopped writing
                world.sleep(backoff.failed())

    def _read_stream(self, addr: str) -> None:
        stream = self.client.link.read(addr, self.log_id, self.position, self.linger_ms)
        self._stream = (addr, stream)
        self.in_process = stream.in_process
        self.writer_is(self.client.writer_addr(self.log_id))  # moved meanwhile?
        log.debug("log %d: reading from %s at position %d", self.log_id, addr, self.position())
        first = True
        try:
            for entries in stream:
                if self.stop.is_set():
                    stream.cancel()
                    return
                if entries:
                    if first:  # a failover's last step, traced (MIDTOWN_DEBUG)
                        log.debug("log %d: first entries from %s, at position %d", self.log_id, addr,
                                  entries[0].position)
                        first = False
                    self.deliver(entries)
                    self._delivered = True
        finally:
            self._stream = None
            self.in_process = False

    def writer_is(self, now: str | None) -> None:
        """The log's writer is at `now` (None: none named): a stream from another server is
        cancelled, and the follow moves to the writer at once."""
        current = self._stream
        if now is not None and current is not None and now != current[0]:
            log.info("log %d: the writer moved from %s to %s; following it", self.log_id, current[0], now)
            self.restart()

    def restart(self) -> None:
        """Read again from `position()` at once (its user moved it under the stream)."""
        current = self._stream
        if current is not None:
            self._moved = True
            current[1].cancel()

    def recheck(self) -> None:
        """The net under the watch: read the writer node, and act on it as on a change."""
        if self._stream is not None:
            self.writer_is(self.client.writer_addr(self.log_id, refresh=True))
