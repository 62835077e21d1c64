"""The log client's network port: the way from a LogClient to one log server, for the
calls its protocol makes (an Append to the writer, a Tail to each replica of a ReadIndex
round, a Read stream following a log from its writer), with their outcomes (a placement,
a TailReply, batches of entries; a refused call, or a stream's end, as a Refusal).

Backends: `GrpcLog`, any server by gRPC (a stub per address, the codec at this edge);
`log/local.py` ProcessLog, the log server of this process answered in the caller's thread,
the others through the backend it wraps (the host layout); the simulator's
(tests/sim/writers.py), a network that delays, drops and cuts off. LogClient decides what
to call and what an outcome means; a backend only carries the call."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import grpc

from log import codec, limits
from log import read_index as ri
from log.ports import FollowedEntry
from log.seals import UNTAGGED, Tags
from midtown_pb import log_pb2 as pb
from midtown_pb import log_pb2_grpc
from runtime import tracing, world
from runtime.refusals import Refusal
from runtime.stubs import Stubs

Placement = tuple[int, int, int, int]  # first position, count, timestamp_ms, epoch


@dataclass(frozen=True)
class LogState:
    """One log as one server sees it (its answer to a Status call)."""
    log_id: int
    writer_id: int  # the writer it knows of (-1: none)
    epoch: int
    first: int  # the first position it still holds
    last: int  # the last committed position it knows of
    filled: int  # how far its replica holds every entry


class PendingAppend(Protocol):
    """An Append sent and not answered yet."""

    def result(self, wait_s: float) -> Placement:
        """Where the log placed it, waiting `wait_s` at most (TimeoutError if the answer has
        not come: the caller looks meanwhile whether the log's writer changed); the
        Refusal its server (or the way to it) answered, raised. A call past its own
        timeout ends DEADLINE_EXCEEDED."""

    def cancel(self) -> None: ...


class Entries(Protocol):
    """A follow's stream of a log's committed entries from one server: batches in order
    (perhaps empty, a stream's heartbeat), ending when the server ends it (the writer of
    this process stopped writing the log), or raising Refusal (OUT_OF_RANGE: the position
    was truncated; CANCELLED after cancel(); another code: the server or the way to it
    failed)."""
    in_process: bool  # read straight from the writer of this process

    def __iter__(self) -> Iterator[Sequence[FollowedEntry]]: ...

    def cancel(self) -> None: ...


class LogLink(Protocol):
    def append(self, addr: str, log_id: int, payloads: list[bytes], timeout_s: float,
               tags: Tags = UNTAGGED) -> PendingAppend:
        """Send an Append of `payloads` (with their `tags`, log/seals.py) to the server at
        `addr`, answered within `timeout_s`."""

    def tail(self, addr: str, log_id: int) -> futures.Future[ri.TailReply]:
        """Ask the server at `addr` for its Tail of `log_id` (a ReadIndex round's question):
        a future failing if no answer comes within limits.TAIL_CALL_TIMEOUT_S."""

    def read(self, addr: str, log_id: int, position: Callable[[], int], linger_ms: int) -> Entries:
        """Follow `log_id` at the server at `addr` from `position()` (read again by a
        backend that can go on from where its user is at each batch); `linger_ms`: how long
        the server may hold entries back to send them together (log/linger.py)."""

    def read_range(self, addr: str, log_id: int, start: int, max_entries: int, timeout_s: float | None,
                   wait: bool, follow: bool = False) -> Iterator[FollowedEntry]:
        """The committed entries of `log_id` from `start` that the server at `addr` holds
        (`max_entries` at most, 0: to its committed end), within `timeout_s`; `wait`: wait for
        the server to be up (it may be restarting); `follow`: on as the log grows (until
        `max_entries`, if any). Refusal when it fails."""

    def truncate(self, addr: str, log_id: int, before: int) -> int:
        """Ask the log's writer at `addr` to truncate `log_id` below `before`: the log's first
        position after (Refusal when refused)."""

    def status(self, addr: str) -> list[LogState]:
        """Each log as the server at `addr` sees it (Refusal when it does not answer)."""

    def statuses(self, addrs: Sequence[str]) -> list[list[LogState] | Refusal]:
        """`status` of each of `addrs`, in their order, a Refusal for each that does not
        answer; asked at once where the backend can (a server that does not answer then
        costs its timeout once, not once per such server)."""


def one_by_one(link: LogLink, addrs: Sequence[str]) -> list[list[LogState] | Refusal]:
    """`statuses` asked one server after another (a backend that cannot ask at once)."""
    out: list[list[LogState] | Refusal] = []
    for addr in addrs:
        try:
            out.append(link.status(addr))
        except Refusal as e:
            out.append(e)
    return out


@contextmanager
def _log_errors() -> Iterator[None]:
    """A gRPC call's failure as the Refusal its caller handles."""
    try:
        yield
    except grpc.RpcError as e:
        raise Refusal.of_call(e) from None


class Answered:
    """A PendingAppend whose outcome is here already (an in-process answer)."""

    def __init__(self, outcome: Placement | Refusal) -> None:
        self.outcome = outcome

    def result(self, wait_s: float) -> Placement:
        if isinstance(self.outcome, Refusal):
            raise self.outcome
        return self.outcome

    def cancel(self) -> None:
        pass


class _GrpcAppend:
    def __init__(self, fut: grpc.Future) -> None:
        self.fut = fut

    def result(self, wait_s: float) -> Placement:
        try:
            r = self.fut.result(timeout=wait_s)
        except grpc.FutureTimeoutError:
            raise TimeoutError from None
        except grpc.RpcError as e:
            raise Refusal.of_call(e) from None
        return placement(r)

    def cancel(self) -> None:
        self.fut.cancel()


class _GrpcEntries:
    in_process = False

    def __init__(self, call: Any) -> None:
        self.call = call

    def __iter__(self) -> Iterator[Sequence[FollowedEntry]]:
        with _log_errors():
            for resp in self.call:
                yield list(resp.entries)

    def cancel(self) -> None:
        self.call.cancel()


class GrpcLog(Stubs):
    """Every log server by gRPC."""

    def __init__(self) -> None:
        super().__init__(log_pb2_grpc.LogStub)

    def append(self, addr: str, log_id: int, payloads: list[bytes], timeout_s: float,
               tags: Tags = UNTAGGED) -> PendingAppend:
        req = codec.tags_to_pb(pb.AppendRequest(log_id=log_id, payloads=payloads), tags)
        return _GrpcAppend(self.stub(addr).Append.future(req, timeout=timeout_s,
                                                         metadata=tracing.headers(None)))

    def tail(self, addr: str, log_id: int) -> futures.Future[ri.TailReply]:
        # Blocking calls on a small pool: gRPC's own futures cost far more CPU here.
        def call() -> ri.TailReply:
            t = self.stub(addr).Tail(pb.TailRequest(log_id=log_id), timeout=limits.TAIL_CALL_TIMEOUT_S)
            return ri.TailReply(int(t.last), int(t.epoch), int(t.clock_ms))
        return _TAIL_POOL.submit(call)

    def read(self, addr: str, log_id: int, position: Callable[[], int], linger_ms: int) -> Entries:
        req = pb.ReadRequest(log_id=log_id, from_position=position(), follow=True, linger_ms=linger_ms)
        return _GrpcEntries(self.stub(addr).Read(req))

    def read_range(self, addr: str, log_id: int, start: int, max_entries: int, timeout_s: float | None,
                   wait: bool, follow: bool = False) -> Iterator[FollowedEntry]:
        req = pb.ReadRequest(log_id=log_id, from_position=start, max_entries=max_entries, follow=follow)
        with _log_errors():
            for resp in self.stub(addr).Read(req, timeout=timeout_s, wait_for_ready=wait):
                yield from resp.entries

    def truncate(self, addr: str, log_id: int, before: int) -> int:
        req = pb.TruncateRequest(log_id=log_id, before_position=before)
        with _log_errors():
            return int(self.stub(addr).Truncate(req, timeout=10).first_position)

    def status(self, addr: str) -> list[LogState]:
        with _log_errors():
            return states(self.stub(addr).Status(pb.StatusRequest(), timeout=5))

    def statuses(self, addrs: Sequence[str]) -> list[list[LogState] | Refusal]:
        calls = [self.stub(addr).Status.future(pb.StatusRequest(), timeout=5) for addr in addrs]
        out: list[list[LogState] | Refusal] = []
        for call in calls:
            try:
                out.append(states(call.result()))
            except grpc.RpcError as e:
                out.append(Refusal.of_call(e))
        return out


def placement(r: pb.AppendResponse) -> Placement:
    """Where an Append's answer says the log placed it."""
    return r.first_position, r.count, r.timestamp_ms, r.epoch


def states(st: pb.StatusResponse) -> list[LogState]:
    """Each log as a Status answer says its server sees it: the server reports its own
    replica's position (log/server.py status)."""
    return [LogState(ls.log_id, ls.writer_id, ls.epoch, ls.first_position, ls.last_position,
                     next((r.position for r in ls.replicas if r.server_id == st.server_id), -1))
            for ls in st.logs]


# ReadIndex's Tail calls, for every LogClient of the process.
_TAIL_POOL = world.Pool("tail", limits.TAIL_THREADS)
