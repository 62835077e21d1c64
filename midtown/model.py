"""What the SDK's operations take and return: keys and values, the operations of a batch
(Op) and of a bulk write (Write), and each operation's result. Plain immutable values, for
Client and AsyncClient alike."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from midtown.checks import I64_MAX, I64_MIN, U64_MAX, Key, to_bytes, to_int, to_value
from midtown_pb import kv_pb2 as pb


@dataclass(frozen=True)
class Value:
    value: bytes
    version: int
    expires_at_ms: int = 0  # 0: never
    # A bounded read's (consistency="bounded"): the bound a replica served it under; 0 when it
    # was served as a strong read (linearizable), or was not a bounded read.
    staleness_bound_ms: int = 0

    @staticmethod
    def of(m: pb.Value, staleness_bound_ms: int = 0) -> Value:
        return Value(m.value, m.version, m.expires_at_ms, staleness_bound_ms)


@dataclass(frozen=True)
class CasResult:
    succeeded: bool
    current: Value | None  # the value found (after a failure) or written (after success)
    version: int  # the new version on success


@dataclass(frozen=True)
class Item:
    local_key: bytes
    value: Value


@dataclass(frozen=True)
class ScanPage:
    items: list[Item]
    next: bytes  # pass as `start` for the next page; b"" when done
    staleness_bound_ms: int = 0  # as Value's


class Op(NamedTuple):
    """One operation of an atomic batch (see Client.batch). Immutable; a NamedTuple, built
    in a third of a frozen dataclass's time (a bulk write builds one per row)."""

    kind: str  # put | delete | cas | incr | get
    partition: bytes
    local: bytes
    value: bytes = b""
    ttl_ms: int = 0
    expected: bytes | None = None
    expect_absent: bool = False
    expected_version: int = 0
    delta: int = 0

    @staticmethod
    def put(partition: Key, local: Key, value: bytes, ttl_ms: int = 0) -> Op:
        return Op("put", to_bytes(partition, "partition"), to_bytes(local, "local"),
                  value=to_value(value, "value"),
                  ttl_ms=to_int(ttl_ms, "ttl_ms", 0, U64_MAX))

    @staticmethod
    def delete(partition: Key, local: Key) -> Op:
        return Op("delete", to_bytes(partition, "partition"), to_bytes(local, "local"))

    @staticmethod
    def cas(partition: Key, local: Key, new_value: bytes, expected: bytes | None = None,
            expect_absent: bool = False, expected_version: int = 0) -> Op:
        return Op("cas", to_bytes(partition, "partition"), to_bytes(local, "local"),
                  value=to_value(new_value, "new_value"),
                  expected=None if expected is None else to_value(expected, "expected"),
                  expect_absent=expect_absent,
                  expected_version=to_int(expected_version, "expected_version", 0, U64_MAX))

    @staticmethod
    def incr(partition: Key, local: Key, delta: int = 1) -> Op:
        return Op("incr", to_bytes(partition, "partition"), to_bytes(local, "local"),
                  delta=to_int(delta, "delta", I64_MIN, I64_MAX))

    @staticmethod
    def get(partition: Key, local: Key) -> Op:
        return Op("get", to_bytes(partition, "partition"), to_bytes(local, "local"))

    def to_pb(self) -> pb.Op:
        if self.kind == "put":
            return pb.Op(put=pb.PutOp(local_key=self.local, value=self.value, ttl_ms=self.ttl_ms))
        if self.kind == "delete":
            return pb.Op(delete=pb.DeleteOp(local_key=self.local))
        if self.kind == "incr":
            return pb.Op(incr=pb.IncrementOp(local_key=self.local, delta=self.delta))
        if self.kind == "get":
            return pb.Op(get=pb.GetOp(local_key=self.local))
        c = pb.CheckAndSetOp(local_key=self.local, new_value=self.value,
                             expected_version=self.expected_version)
        if self.expect_absent:
            c.expect_absent = True
        elif self.expected is not None:
            c.expected_value = self.expected
        return pb.Op(cas=c)


@dataclass(frozen=True)
class OpOutcome:
    ok: bool  # false: this check-and-set's condition failed, or an increment was refused
    found: bool
    value: Value | None


class Write(NamedTuple):
    """One item of a bulk write (Client.write_many): operations on one partitioning key,
    applied atomically, at most once per `event_id` within the dataset's dedup window."""

    ops: list[Op]
    event_id: bytes | str | None = None

    @staticmethod
    def put(partition: Key, local: Key, value: bytes, *, ttl_ms: int = 0,
            event_id: bytes | str | None = None) -> Write:
        return Write([Op.put(partition, local, value, ttl_ms)], event_id)

    @staticmethod
    def incr(partition: Key, local: Key, delta: int = 1, *, event_id: bytes | str | None = None) -> Write:
        return Write([Op.incr(partition, local, delta)], event_id)

    @staticmethod
    def insert(partition: Key, local: Key, value: bytes, *, event_id: bytes | str | None = None) -> Write:
        """Insert if absent (fails, rolled back, if the key exists)."""
        return Write([Op.cas(partition, local, value, expect_absent=True)], event_id)


@dataclass(frozen=True)
class WriteOutcome:
    status: str  # "applied" | "duplicate" (its event id was applied before) | "failed"
    error: str = ""  # why it failed (a condition, a non-integer, ...)
    results: list[OpOutcome] = field(default_factory=list)
    position: int = 0  # the log position that applied it (the first time, for a duplicate)


@dataclass(frozen=True)
class ShardItem:
    partition_key: bytes
    local_key: bytes
    value: Value


@dataclass(frozen=True)
class BatchResult:
    applied: bool  # all operations applied, or (false) none did
    results: list[OpOutcome]


def outcomes(results: Any) -> list[OpOutcome]:
    return [OpOutcome(x.status == pb.DONE, x.found, Value.of(x.value) if x.HasField("value") else None)
            for x in results]


def shard_items(m: pb.ScanShardResponse) -> list[ShardItem]:
    return [ShardItem(i.partition_key, i.local_key, Value.of(i.value)) for i in m.items]


def arrow_batch(data: bytes) -> Any:
    """The pyarrow.RecordBatch of a page's `arrow` bytes (ScanShardResponse.arrow)."""
    import pyarrow as pa

    return pa.ipc.open_stream(data).read_next_batch()


@dataclass(frozen=True)
class ShardPage:
    """One page of a shard scan: the log position its state stands at, its items in key
    order, and where the scan goes on (`Client.scan_shard(token=next)`; b"" on the last)."""
    position: int
    items: list[ShardItem]
    next: bytes
    # With scan_shard(arrow=True), the items as one pyarrow.RecordBatch instead (`items` is
    # then empty): columns partition_key, local_key, value (binary), version, expires_at.
    arrow: Any = None


@dataclass(frozen=True)
class ShardSplit:
    token: bytes  # Client.scan_shard(token=...) reads this split
    bytes: int  # its keys and values, as stored
    keys: int


@dataclass(frozen=True)
class ShardSplits:
    position: int  # every split is read from the state at this log position
    splits: list[ShardSplit]

    @staticmethod
    def of(r: pb.ShardSplitsResponse) -> ShardSplits:
        return ShardSplits(r.position, [ShardSplit(s.token, s.bytes, s.keys) for s in r.splits])
