"""Records and operations as plain, validated values, and their results (protobuf is
converted at the edge, in record/codec.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import NamedTuple

import grpc

from runtime.refusals import BEHIND_TRAILER, Refusal


class OpStatus(Enum):
    DONE = 0
    CONDITION_FAILED = 1
    NOT_AN_INTEGER = 2
    OVERFLOW = 3


class Stored(NamedTuple):
    """A stored value. A NamedTuple: immutable like the other model values, and built in a
    third of a frozen dataclass's time (one per write, at every replica)."""
    value: bytes
    version: int
    expires_at_ms: int = 0  # 0: never

    def live_at(self, ts_ms: int) -> bool:
        """Expiry is judged by the log's time, never a node's clock."""
        return self.expires_at_ms == 0 or self.expires_at_ms > ts_ms


@dataclass(frozen=True, slots=True)
class Put:
    local_key: bytes
    value: bytes
    ttl_ms: int = 0


@dataclass(frozen=True, slots=True)
class Delete:
    local_key: bytes


@dataclass(frozen=True, slots=True)
class Cas:
    local_key: bytes
    expected_value: bytes | None = None  # None with expect_absent False: any value
    expect_absent: bool = False
    expected_version: int = 0  # 0: any
    new_value: bytes = b""
    delete: bool = False
    ttl_ms: int = 0


@dataclass(frozen=True, slots=True)
class Incr:
    local_key: bytes
    delta: int
    ttl_ms: int = 0


@dataclass(frozen=True, slots=True)
class Get:
    local_key: bytes


@dataclass(frozen=True, slots=True)
class Scan:
    start: bytes = b""
    end: bytes = b""  # exclusive; empty: no end
    limit: int = 100


@dataclass(frozen=True, slots=True)
class Position:
    node_id: int
    position: int  # everything below is applied and durable on that node


@dataclass(frozen=True, slots=True)
class Drop:
    shards: tuple[int, ...]  # the dropped dataset's keys in these shards go


@dataclass(frozen=True, slots=True)
class HandOff:
    """The record's shard goes to log `to`, its records there at or after `from_position`
    (docs/log.md, "Adding logs and handing shards over"; storage_node/handoff.py), ending
    its stint of `generation` here (None: not said, in records written before it was)."""
    to: int
    from_position: int
    generation: int | None = None


@dataclass(frozen=True, slots=True)
class Open:
    """The record's shard is opened in this log, the one it was handed to, at `generation`
    (its hand-offs so far: log/seals.py)."""
    generation: int = 0


Op = Put | Delete | Cas | Incr | Get | Scan | Position | Drop | HandOff | Open
MUTATIONS = (Put, Delete, Cas, Incr)


@dataclass(frozen=True, slots=True)
class Group:
    """Operations on one partitioning key, applied atomically, at most once per event id
    (b"": no event id)."""
    partition_key: bytes
    ops: tuple[Op, ...]
    event_id: bytes = b""


# A single put as a record of puts carries it (PutColumns): (partition key, local key, value,
# ttl_ms, event id). Plain tuples, zipped from the columns: no object per row to build.
PutRow = tuple[bytes, bytes, bytes, int, bytes]


def put_group(row: PutRow) -> Group:
    """The group a put row stands for: applied exactly as that group would be."""
    pkey, lkey, value, ttl_ms, event_id = row
    return Group(pkey, (Put(lkey, value, ttl_ms),), event_id)


@dataclass(frozen=True, slots=True)
class Record:
    request_id: bytes
    callback: str
    dataset: str
    shard: int
    partition_key: bytes
    ops: tuple[Op, ...]
    default_ttl_ms: int = 0
    # A record of independent groups (a bulk write's share of one shard) instead of ops.
    groups: tuple[Group, ...] = ()
    dedup_window_ms: int = 0  # the dataset's event-id window in log time (0: the default)
    dedup_max_ids: int = 0  # event ids kept per shard at most (0: the default)
    # A record of single puts (a bulk write's puts in one shard) instead of groups.
    puts: tuple[PutRow, ...] = ()
    # A storage node in the coordinator's process answers it (kv.proto Record.answered_beside).
    answered_beside: bool = False
    # Echoed in the answers sent over the network (kv.proto Record.answer_secret).
    answer_secret: int = 0

    def publishes_positions(self) -> bool:
        """A node's published position: bookkeeping, no key-value effects. (A bulk write's
        record has groups or put rows and no ops: it is not one, though all() of no ops
        is true; a move's copy brought forward once skipped bulk writes so.)"""
        return bool(self.ops) and all(isinstance(o, Position) for o in self.ops)

    def drops(self) -> bool:
        """A dropped dataset's deletion in the shards it names."""
        return bool(self.ops) and all(isinstance(o, Drop) for o in self.ops)

    def hand_off(self) -> HandOff | None:
        """The hand-off of the record's shard to another log, if it is one."""
        return self.ops[0] if len(self.ops) == 1 and isinstance(self.ops[0], HandOff) else None

    def opens(self) -> bool:
        """Whether it opens the record's shard in its log."""
        return len(self.ops) == 1 and isinstance(self.ops[0], Open)


@dataclass(frozen=True, slots=True)
class OpResult:
    status: OpStatus = OpStatus.DONE
    found: bool = False
    value: Stored | None = None
    items: tuple[tuple[bytes, Stored], ...] = ()
    next: bytes = b""


@dataclass(frozen=True, slots=True)
class GroupResult:
    applied: bool
    duplicate: bool = False  # its event id was applied before: these are that first outcome
    results: tuple[OpResult, ...] = ()
    position: int = 0  # the log position that applied it


@dataclass(frozen=True, slots=True)
class RecordResult:
    request_id: bytes
    log_id: int
    position: int
    shard: int
    digest: int
    node_id: int
    applied: bool
    duplicate: bool = False
    results: tuple[OpResult, ...] = field(default_factory=tuple)
    groups: tuple[GroupResult, ...] = ()  # a record of groups: one per group, in order


class Behind(Refusal):
    """A replica cannot answer this read, and another may: it has not applied far enough
    yet, or it does not hold the shard (a coordinator's view of the replica sets is a
    little behind a move). FAILED_PRECONDITION with the BEHIND trailer, so a coordinator
    asks another replica instead."""

    def __init__(self, message: str) -> None:
        super().__init__(grpc.StatusCode.FAILED_PRECONDITION, message, (BEHIND_TRAILER,))
