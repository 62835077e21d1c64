"""Applying one record: a pure function from (state, record, position, log time) to
(writes, result). Every replica that applies the same records in the same order reaches
the same state and the same digest.

- A record's operations all apply, or none does (a failed check-and-set or a bad
  increment rolls the record back; reads still report what they saw).
- A request id seen within DEDUP_WINDOW_MS of log time returns the first outcome and
  applies nothing (client retries are safe).
- Expiry is judged by the record's log timestamp."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Protocol

from storage_node import keys
from storage_node.model import (
    Cas,
    Delete,
    Drop,
    Get,
    Incr,
    OpResult,
    OpStatus,
    Position,
    Put,
    Record,
    RecordResult,
    Scan,
    Stored,
)

# How long (in log time) a request id is remembered. Client retries come within seconds;
# ten minutes covers a coordinator or node restart and leaves the table bounded.
DEDUP_WINDOW_MS = 10 * 60 * 1000
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class State(Protocol):
    def get(self, key: bytes) -> Stored | None: ...

    def scan(self, prefix: bytes, start: bytes, end: bytes, limit: int) -> list[tuple[bytes, Stored]]:
        """Up to `limit` (local key, value) under `prefix`, local key in [start, end)."""

    def dedup(self, shard: int, request_id: bytes) -> tuple[int, RecordResult] | None:
        """(log timestamp, first result) of a request id seen before."""

    def digest(self, shard: int) -> int: ...


@dataclass
class Applied:
    writes: dict[bytes, Stored | None] = field(default_factory=dict)  # None: delete
    result: RecordResult | None = None
    digest: int = 0
    dedup: bool = False  # the result must be remembered under the request id
    positions: dict[int, int] = field(default_factory=dict)  # node id -> published position
    dropped: tuple[bytes, ...] = ()  # key prefixes of a dropped dataset: deleted
    drop_marker: bytes = b""  # remembers that this log applied the drop


def _ttl_expiry(ts_ms: int, ttl_ms: int, default_ttl_ms: int) -> int:
    ttl = ttl_ms or default_ttl_ms
    return ts_ms + ttl if ttl else 0


def next_digest(prev: int, position: int, writes: dict[bytes, Stored | None]) -> int:
    h = hashlib.blake2b(digest_size=8)
    h.update(prev.to_bytes(8, "big"))
    h.update(position.to_bytes(8, "big"))
    for k in sorted(writes):
        v = writes[k]
        h.update(len(k).to_bytes(4, "big") + k)
        h.update(b"\x00" if v is None else b"\x01" + keys.encode_stored(v))
    return int.from_bytes(h.digest(), "big")


def apply(state: State, rec: Record, log_id: int, position: int, ts_ms: int, node_id: int) -> Applied:
    if rec.ops and all(isinstance(o, Position) for o in rec.ops):
        # A node's published position: replicated bookkeeping, no key-value effects.
        pos = {o.node_id: o.position for o in rec.ops if isinstance(o, Position)}
        return Applied(digest=state.digest(rec.shard), positions=pos,
                       result=RecordResult(b"", log_id, position, rec.shard,
                                           state.digest(rec.shard), node_id, True))
    if rec.ops and all(isinstance(o, Drop) for o in rec.ops):
        # A dropped dataset's keys in this log's shards: deleted by the batch (a range).
        shards = sorted({s for o in rec.ops if isinstance(o, Drop) for s in o.shards})
        prefixes = [keys.dataset_shard_prefix(s, rec.dataset) for s in shards]
        return Applied(digest=state.digest(rec.shard),
                       dropped=tuple(prefixes + [keys.eventual(p) for p in prefixes]),
                       drop_marker=keys.drop_key(log_id, rec.dataset),
                       result=RecordResult(b"", log_id, position, rec.shard,
                                           state.digest(rec.shard), node_id, True))
    if rec.request_id:
        seen = state.dedup(rec.shard, rec.request_id)
        if seen is not None and ts_ms - seen[0] <= DEDUP_WINDOW_MS:
            first = seen[1]
            dup = RecordResult(first.request_id, first.log_id, first.position, first.shard,
                               first.digest, node_id, first.applied, True, first.results)
            return Applied(result=dup, digest=state.digest(rec.shard))
    overlay: dict[bytes, Stored | None] = {}
    version = position + 1  # versions start at 1: 0 means "no version" in check-and-set

    def read(lkey: bytes) -> Stored | None:
        k = keys.value_key(rec.shard, rec.dataset, rec.partition_key, lkey)
        v = overlay[k] if k in overlay else state.get(k)
        return v if v is not None and v.live_at(ts_ms) else None

    def write(lkey: bytes, v: Stored | None) -> None:
        overlay[keys.value_key(rec.shard, rec.dataset, rec.partition_key, lkey)] = v

    results: list[OpResult] = []
    ok = True
    for op in rec.ops:
        if isinstance(op, Put):
            v = Stored(op.value, version, _ttl_expiry(ts_ms, op.ttl_ms, rec.default_ttl_ms))
            write(op.local_key, v)
            results.append(OpResult(value=v, found=True))
        elif isinstance(op, Delete):
            cur = read(op.local_key)
            write(op.local_key, None)
            results.append(OpResult(found=cur is not None))
        elif isinstance(op, Get):
            cur = read(op.local_key)
            results.append(OpResult(found=cur is not None, value=cur))
        elif isinstance(op, Cas):
            cur = read(op.local_key)
            holds = (
                (cur is None) if op.expect_absent
                else cur is not None and (op.expected_value is None or cur.value == op.expected_value)
            )
            if holds and op.expected_version and (cur is None or cur.version != op.expected_version):
                holds = False
            if not holds:
                ok = False
                results.append(OpResult(OpStatus.CONDITION_FAILED, cur is not None, cur))
                continue
            if op.delete:
                write(op.local_key, None)
                results.append(OpResult(found=cur is not None))
            else:
                v = Stored(op.new_value, version, _ttl_expiry(ts_ms, op.ttl_ms, rec.default_ttl_ms))
                write(op.local_key, v)
                results.append(OpResult(found=True, value=v))
        elif isinstance(op, Incr):
            cur = read(op.local_key)
            try:
                base = int(cur.value.decode("ascii")) if cur is not None else 0
            except (UnicodeDecodeError, ValueError):
                ok = False
                results.append(OpResult(OpStatus.NOT_AN_INTEGER, True, cur))
                continue
            n = base + op.delta
            if not INT64_MIN <= n <= INT64_MAX:
                ok = False
                results.append(OpResult(OpStatus.OVERFLOW, cur is not None, cur))
                continue
            exp = cur.expires_at_ms if cur is not None and not op.ttl_ms else \
                _ttl_expiry(ts_ms, op.ttl_ms, rec.default_ttl_ms)
            v = Stored(str(n).encode(), version, exp)
            write(op.local_key, v)
            results.append(OpResult(found=True, value=v))
        elif isinstance(op, Scan):
            prefix = keys.partition_prefix(rec.shard, rec.dataset, rec.partition_key)
            rows = state.scan(prefix, op.start, op.end, op.limit + 64)
            live = [(k, v) for k, v in rows if v.live_at(ts_ms)]
            page = live[: op.limit]
            nxt = live[op.limit][0] if len(live) > op.limit else b""
            if not nxt and len(rows) >= op.limit + 64 and rows:
                nxt = rows[-1][0] + b"\x00"  # many expired rows: continue after them
            results.append(OpResult(found=bool(page), items=tuple(page), next=nxt))
    writes = overlay if ok else {}
    digest = next_digest(state.digest(rec.shard), position, writes)
    result = RecordResult(rec.request_id, log_id, position, rec.shard, digest, node_id, ok,
                          False, tuple(results))
    return Applied(writes=writes, result=result, digest=digest, dedup=bool(rec.request_id))
