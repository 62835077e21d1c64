"""Messages between a writer and the replicas of a log, as plain values.

The gRPC shell converts them to and from protobuf (log/codec.py); the core and the
simulation only ever see these."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

from log import lease, limits
from log.entry import Entry
from runtime.refusals import BadRequest

NONE = -1  # "no position": no LAC known, no entry stored
LEASE_MS_MAX = int(lease.LEASE_S_MAX * 1000)
# The longest wait a replica's fence reply can ask for: the promise of the longest lease.
LEASE_WAIT_MS_MAX = math.ceil(lease.guard(lease.LEASE_S_MAX) * 1000)


class Result(Enum):
    OK = 0
    FENCED = 1
    UNKNOWN_LOG = 2


def _check_epochs(epoch: int, segment_epoch: int) -> None:
    if not 0 <= epoch <= limits.EPOCH_MAX:
        raise BadRequest(f"epoch: {epoch} is out of range (0..{limits.EPOCH_MAX})")
    if not 0 <= segment_epoch <= limits.EPOCH_MAX:
        raise BadRequest(f"segment_epoch: {segment_epoch} is out of range (0..{limits.EPOCH_MAX})")


@dataclass(frozen=True, slots=True)
class Fence:
    log_id: int
    epoch: int
    segment_epoch: int

    def __post_init__(self) -> None:
        _check_epochs(self.epoch, self.segment_epoch)


@dataclass(frozen=True, slots=True)
class FenceReply:
    result: Result
    fenced_epoch: int
    lac: int = NONE
    last: int = NONE
    first: int = 0  # the replica's truncation point: everything below was committed
    first_ts: int = 0  # the highest timestamp truncated away
    # What is left of the replica's lease promise (log/lease.py): the fencing writer makes
    # nothing visible until this long after it has the reply.
    lease_wait_ms: int = 0


TRACE_MAX = 128


@dataclass(frozen=True, slots=True)
class AddEntries:
    log_id: int
    epoch: int
    segment_epoch: int
    entries: tuple[Entry, ...]
    lac: int = NONE
    # The read lease the writer may hold once this is acknowledged (log/lease.py; 0: none).
    lease_ms: int = 0
    # The writer's clock when it sent this: kept by the writer for the acknowledgement,
    # never on the wire.
    sent_at: float = 0.0
    # The context of a traced operation with an entry here (runtime/tracing.py; "": none)
    trace: str = ""

    def __post_init__(self) -> None:
        _check_epochs(self.epoch, self.segment_epoch)
        if not 0 <= self.lease_ms <= LEASE_MS_MAX:
            raise BadRequest(f"lease_ms: {self.lease_ms} is out of range (0..{LEASE_MS_MAX})")
        if not NONE <= self.lac <= limits.POSITION_MAX:
            raise BadRequest(f"lac: {self.lac} is out of range ({NONE}..{limits.POSITION_MAX})")
        if len(self.entries) > limits.INFLIGHT_ENTRIES_MAX:
            raise BadRequest(f"entries: {len(self.entries)}, the limit is {limits.INFLIGHT_ENTRIES_MAX}")
        if len(self.trace) > TRACE_MAX:
            raise BadRequest(f"trace: {len(self.trace)} characters, the limit is {TRACE_MAX} "
                             "(a W3C traceparent)")
        for e in self.entries:
            if e.epoch != self.segment_epoch:
                raise BadRequest("entries[].epoch must equal segment_epoch")


@dataclass(frozen=True, slots=True)
class AddReply:
    result: Result
    fenced_epoch: int


@dataclass(frozen=True, slots=True)
class ReadRange:
    log_id: int
    epoch: int  # 0: a plain read (no fencing check)
    segment_epoch: int
    first: int
    last: int  # inclusive

    def __post_init__(self) -> None:
        _check_epochs(self.epoch, self.segment_epoch)
        if self.first < 0 or self.last < self.first - 1 or self.last > limits.POSITION_MAX:
            raise BadRequest(f"bad range [{self.first}, {self.last}] (positions go up to "
                             f"{limits.POSITION_MAX})")


@dataclass(frozen=True, slots=True)
class ReadRangeReply:
    result: Result
    fenced_epoch: int
    entries: tuple[Entry, ...] = ()
    # The replica answered for [first, answered_last]: positions there that are not in
    # `entries` are absent from it. It may answer a shorter range than asked (paging).
    answered_last: int = NONE
    # Its truncation point now: positions below it are committed (and may be gone).
    trunc_first: int = 0
    trunc_ts: int = 0


Request = Fence | AddEntries | ReadRange
Reply = FenceReply | AddReply | ReadRangeReply
