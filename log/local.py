"""The log server of this process as the log client's link reaches it (the host layout,
coordinator/host.py): an Append to it is handed straight to its writer (the Append call's
own core, log/append.py, its outcome as a value), a Tail answered by its replica, and a
follow read straight from its store while it writes the log, all in the caller's thread; a
call to another server goes through the link this one wraps (gRPC)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from concurrent import futures

import grpc

from log import append, reading
from log import read_index as ri
from log.catch_up import Unavailable
from log.client_link import Answered, Entries, LogLink, LogState, PendingAppend
from log.node import Node
from log.ports import FollowedEntry
from log.seals import UNTAGGED, Tags
from runtime import inprocess, world
from runtime.refusals import Refusal

log = logging.getLogger("midtown.log.follow")

# How long a follow in this process waits for the next commit before it looks again whether
# the writer here still writes the log.
LOCAL_WAIT_S = 0.5


class ProcessLog:
    def __init__(self, node: Node, others: LogLink) -> None:
        self.node = node
        self.others = others

    def append(self, addr: str, log_id: int, payloads: list[bytes], timeout_s: float,
               tags: Tags = UNTAGGED) -> PendingAppend:
        if addr != self.node.addr:
            return self.others.append(addr, log_id, payloads, timeout_s, tags)
        inprocess.used("append")
        r = append.answer(self.node, log_id, payloads, timeout_s, hurry=tags.hurry, tags=tags)
        return Answered(r if isinstance(r, Refusal) else
                        (r.first_position, r.count, r.timestamp_ms, r.epoch))

    def tail(self, addr: str, log_id: int) -> futures.Future[ri.TailReply]:
        if addr != self.node.addr:
            return self.others.tail(addr, log_id)
        inprocess.used("read_index")
        f: futures.Future[ri.TailReply] = world.future()
        f.set_result(self.node.tail_hurrying(log_id))
        return f

    def read(self, addr: str, log_id: int, position: Callable[[], int], linger_ms: int) -> Entries:
        if addr != self.node.addr:
            return self.others.read(addr, log_id, position, linger_ms)
        return _OwnEntries(self.node, log_id, position)

    # A log read, a truncation and a status are rare (tools and bookkeeping): by gRPC to
    # this process's server too.
    def read_range(self, addr: str, log_id: int, start: int, max_entries: int, timeout_s: float | None,
                   wait: bool, follow: bool = False) -> Iterator[FollowedEntry]:
        return self.others.read_range(addr, log_id, start, max_entries, timeout_s, wait, follow)

    def truncate(self, addr: str, log_id: int, before: int) -> int:
        return self.others.truncate(addr, log_id, before)

    def status(self, addr: str) -> list[LogState]:
        return self.others.status(addr)

    def statuses(self, addrs: Sequence[str]) -> list[list[LogState] | Refusal]:
        return self.others.statuses(addrs)


class _OwnEntries:
    """The log read from the writer of this process, no stream, from `position()` at each
    batch, until it stops writing it (the stream ends: the follow looks the writer up
    again) or is cancelled."""
    in_process = True

    def __init__(self, node: Node, log_id: int, position: Callable[[], int]) -> None:
        self.node, self.log_id, self.position = node, log_id, position
        self.cancelled = False

    def __iter__(self) -> Iterator[Sequence[FollowedEntry]]:
        while not self.cancelled and self.node.writes(self.log_id):
            try:
                yield self.node.read_from(self.log_id, self.position(), LOCAL_WAIT_S)
            except reading.Truncated as e:
                raise Refusal(grpc.StatusCode.OUT_OF_RANGE, str(e)) from None
            except Unavailable as e:
                log.warning("log %d: %s", self.log_id, e)
                return

    def cancel(self) -> None:
        self.cancelled = True
