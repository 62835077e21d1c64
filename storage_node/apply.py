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
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from catalog.limits import EVENT_IDS_PER_SHARD_DEFAULT, EVENT_WINDOW_MS_DEFAULT
from record.model import (
    Cas,
    Delete,
    Drop,
    Get,
    Group,
    GroupResult,
    Incr,
    Op,
    OpResult,
    OpStatus,
    Position,
    Put,
    PutRow,
    Record,
    RecordResult,
    Scan,
    Stored,
)
from storage_node import keys

# How long (in log time) a request id is remembered. Client retries come within seconds;
# ten minutes covers a coordinator or node restart and leaves the table bounded.
DEDUP_WINDOW_MS = 10 * 60 * 1000
# Ids older than the window that one record ages out at most (beyond the size cap, which
# is kept exactly): bounded work per record; an id past the window is ignored anyway.
EVENT_AGE_OUT_PER_RECORD = 64
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class State(Protocol):
    def get(self, key: bytes) -> Stored | None: ...

    def scan(self, prefix: bytes, start: bytes, end: bytes, limit: int) -> list[tuple[bytes, Stored]]:
        """Up to `limit` (local key, value) under `prefix`, local key in [start, end)."""

    def dedup(self, shard: int, request_id: bytes) -> tuple[int, RecordResult] | None:
        """(log timestamp, first result) of a request id seen before."""

    def digest(self, shard: int) -> int: ...

    def held_events(self, shard: int, dataset: str, event_ids: list[bytes]) -> dict[bytes, Event]:
        """The entries held of these event ids (one look-up for all of them)."""

    def event_count(self, shard: int, dataset: str) -> int:
        """Event ids of `dataset` held in `shard`."""

    def oldest_events(self, shard: int, dataset: str, n: int,
                      older_than: int | None = None) -> Iterable[tuple[int, int, bytes, int]]:
        """Up to `n` (position, seq, event id, log time) of `dataset` in `shard`, oldest first.
        `older_than`: the caller stops at the first entry not older than this log time, so
        a state that knows none is older may return nothing."""


class Event(NamedTuple):
    """An event id seen: when (log time), where (position, and the group's index in its
    record) and the first outcome, which a repeat gets back. (A NamedTuple: one is built
    per event at every replica.)"""
    ts_ms: int
    position: int
    seq: int
    first: GroupResult


@dataclass
class Applied:
    writes: dict[bytes, Stored | None] = field(default_factory=dict)  # None: delete
    result: RecordResult | None = None
    digest: int = 0
    dedup: bool = False  # the result must be remembered under the request id
    positions: dict[int, int] = field(default_factory=dict)  # node id -> published position
    dropped: tuple[bytes, ...] = ()  # key prefixes of a dropped dataset: deleted
    drop_marker: bytes = b""  # remembers that this log applied the drop
    # Event ids: recorded (with the effects, in the same batch) and aged out.
    events: dict[bytes, Event] = field(default_factory=dict)
    events_gone: list[tuple[bytes, int, int]] = field(default_factory=list)  # (id, position, seq)
    event_count: int = -1  # the dataset's ids held in the shard after this record (-1: unchanged)
    dataset: str = ""  # whose event ids those are


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
    """`position`: the record's in its shard's order, its version - 1 (its position in
    `log_id`, plus the shard's version base there for a shard handed over from another
    log: storage_node/handoff.py)."""
    if rec.publishes_positions() or rec.hand_off() is not None or rec.opens():
        # A node's published position, or a shard's hand-off to another log or its opening
        # there (the apply loop moves the shard: storage_node/handoff.py): bookkeeping, no
        # key-value effects.
        pos = {o.node_id: o.position for o in rec.ops if isinstance(o, Position)}
        return Applied(digest=state.digest(rec.shard), positions=pos,
                       result=RecordResult(b"", log_id, position, rec.shard,
                                           state.digest(rec.shard), node_id, True))
    if rec.drops():
        # A dropped dataset's keys in this log's shards: deleted by the batch (a range).
        shards = sorted({s for o in rec.ops if isinstance(o, Drop) for s in o.shards})
        prefixes = [keys.dataset_shard_prefix(s, rec.dataset) for s in shards]
        ids = [p for s in shards for p in (keys.event_key(s, rec.dataset, b""),
                                             keys.event_order_prefix(s, rec.dataset),
                                             keys.event_count_key(s, rec.dataset),
                                             keys.change_prefix(s, rec.dataset))]
        return Applied(digest=state.digest(rec.shard),
                       dropped=tuple(prefixes + [keys.eventual(p) for p in prefixes] + ids),
                       drop_marker=keys.drop_key(log_id, rec.dataset),
                       result=RecordResult(b"", log_id, position, rec.shard,
                                           state.digest(rec.shard), node_id, True))
    if rec.request_id:
        seen = state.dedup(rec.shard, rec.request_id)
        if seen is not None and ts_ms - seen[0] <= DEDUP_WINDOW_MS:
            first = seen[1]
            dup = RecordResult(first.request_id, first.log_id, first.position, first.shard,
                               first.digest, node_id, first.applied, True, first.results,
                               first.groups)
            return Applied(result=dup, digest=state.digest(rec.shard))
    if rec.groups or rec.puts:
        return _apply_groups(state, rec, log_id, position, ts_ms, node_id)
    overlay: dict[bytes, Stored | None] = {}
    version = position + 1  # versions start at 1: 0 means "no version" in check-and-set

    def read(lkey: bytes) -> Stored | None:
        k = keys.value_key(rec.shard, rec.dataset, rec.partition_key, lkey)
        v = overlay[k] if k in overlay else state.get(k)
        return v if v is not None and v.live_at(ts_ms) else None

    def write(lkey: bytes, v: Stored | None) -> None:
        overlay[keys.value_key(rec.shard, rec.dataset, rec.partition_key, lkey)] = v

    ok, results = _run_ops(state, rec, rec.partition_key, rec.ops, read, write, version, ts_ms)
    writes = overlay if ok else {}
    digest = next_digest(state.digest(rec.shard), position, writes)
    result = RecordResult(rec.request_id, log_id, position, rec.shard, digest, node_id, ok,
                          False, tuple(results))
    return Applied(writes=writes, result=result, digest=digest, dedup=bool(rec.request_id))


def _run_ops(state: State, rec: Record, pkey: bytes, ops: tuple, read: Callable[[bytes], Stored | None],
             write: Callable[[bytes, Stored | None], None], version: int,
             ts_ms: int) -> tuple[bool, list[OpResult]]:
    """Run one all-or-nothing list of operations on one partitioning key: whether all held
    (if not, the caller drops what `write` received), and each one's result."""
    results: list[OpResult] = []
    ok = True
    for op in ops:
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
            prefix = keys.partition_prefix(rec.shard, rec.dataset, pkey)
            rows = state.scan(prefix, op.start, op.end, op.limit + 64)
            live = [(k, v) for k, v in rows if v.live_at(ts_ms)]
            page = live[: op.limit]
            nxt = live[op.limit][0] if len(live) > op.limit else b""
            if not nxt and len(rows) >= op.limit + 64 and rows:
                nxt = rows[-1][0] + b"\x00"  # many expired rows: continue after them
            results.append(OpResult(found=bool(page), items=tuple(page), next=nxt))
    return ok, results


def _apply_groups(state: State, rec: Record, log_id: int, position: int, ts_ms: int,
                  node_id: int) -> Applied:
    """A record of independent groups: each all or nothing on its own, in order (a later
    group sees an earlier one's writes), and each at most once per event id within the
    dataset's window, judged on log time. The ids applied are recorded with the effects;
    past the dataset's cap per shard the oldest go, by log position, so every replica holds
    the same ids after the same records."""
    window = rec.dedup_window_ms or EVENT_WINDOW_MS_DEFAULT
    cap = rec.dedup_max_ids or EVENT_IDS_PER_SHARD_DEFAULT
    version = position + 1
    overlay: dict[bytes, Stored | None] = {}
    new: dict[bytes, Event] = {}  # event ids recorded by this record
    replaced: list[tuple[bytes, int, int]] = []  # entries past the window written over
    groups: list[GroupResult] = []
    rows: tuple[Group | PutRow, ...] = rec.puts or rec.groups
    held = state.held_events(rec.shard, rec.dataset,
                             [r[4] for r in rec.puts if r[4]] if rec.puts else
                             [g.event_id for g in rec.groups if g.event_id])
    applied_here = GroupResult(True, False, (), position)  # shared: the common outcome
    value_prefix = keys.dataset_shard_prefix(rec.shard, rec.dataset)
    of_rows = bool(rec.puts)
    for seq, g in enumerate(rows):
        row: PutRow | None
        if of_rows:  # a put row: the group of one put it stands for (model.put_group)
            row = g  # type: ignore[assignment]
            event_id = g[4]  # type: ignore[index]
        else:
            assert isinstance(g, Group)
            event_id = g.event_id
            put = g.ops[0] if len(g.ops) == 1 and isinstance(g.ops[0], Put) else None
            row = (g.partition_key, put.local_key, put.value, put.ttl_ms, event_id) if put else None
        past = None
        if event_id:
            past = held.get(event_id)
            seen = new.get(event_id) or past
            if seen is not None and ts_ms - seen.ts_ms <= window:
                f = seen.first
                groups.append(GroupResult(f.applied, True, f.results, f.position))
                continue
        if row is not None:  # a single put, the common case: nothing to read
            pkey, lkey, value, ttl_ms, _ = row
            ttl_ms = ttl_ms or rec.default_ttl_ms
            overlay[keys.value_key_under(value_prefix, pkey, lkey)] = Stored(
                value, version, ts_ms + ttl_ms if ttl_ms else 0)  # as _ttl_expiry
            groups.append(applied_here)
            if event_id:
                if past is not None and event_id not in new:
                    replaced.append((event_id, past.position, past.seq))
                new[event_id] = Event(ts_ms, position, seq, applied_here)
            continue
        assert isinstance(g, Group)
        mine: dict[bytes, Stored | None] = {}

        def read(lkey: bytes, pkey: bytes = g.partition_key,
                 mine: dict[bytes, Stored | None] = mine) -> Stored | None:
            k = keys.value_key(rec.shard, rec.dataset, pkey, lkey)
            v = mine[k] if k in mine else overlay[k] if k in overlay else state.get(k)
            return v if v is not None and v.live_at(ts_ms) else None

        def write(lkey: bytes, v: Stored | None, pkey: bytes = g.partition_key,
                  mine: dict[bytes, Stored | None] = mine) -> None:
            mine[keys.value_key(rec.shard, rec.dataset, pkey, lkey)] = v

        ok, results = _run_ops(state, rec, g.partition_key, g.ops, read, write, version, ts_ms)
        if ok:
            overlay.update(mine)
        gr = GroupResult(ok, False, _compact(g.ops, results), position)
        groups.append(gr)
        if ok and event_id:  # a group rolled back may be sent again: not recorded
            if past is not None and event_id not in new:  # held, older than the window: written over
                replaced.append((event_id, past.position, past.seq))
            new[event_id] = Event(ts_ms, position, seq, gr)
    gone, count = _age_out(state, rec, new, replaced, cap, ts_ms - window)
    digest = next_digest(state.digest(rec.shard), position, overlay)
    result = RecordResult(rec.request_id, log_id, position, rec.shard, digest, node_id, True,
                          False, (), tuple(groups))
    return Applied(writes=overlay, result=result, digest=digest, dedup=bool(rec.request_id),
                   events=new, events_gone=replaced + gone,
                   event_count=count if (new or gone) else -1, dataset=rec.dataset)


def _compact(ops: tuple[Op, ...], results: list[OpResult]) -> tuple[OpResult, ...]:
    """A group's results as answered and remembered with its event id: what the writer
    cannot know already. A group that held with no increment has none (a put's version is
    the group's position + 1); otherwise each operation's, an increment with its new value,
    a failed condition with the value found, the others saying only whether the key was
    found."""
    if all(r.status is OpStatus.DONE for r in results) and not any(isinstance(op, Incr) for op in ops):
        return ()
    return tuple(r if isinstance(op, Incr) or r.status is not OpStatus.DONE else OpResult(found=r.found)
                 for op, r in zip(ops, results))


def _age_out(state: State, rec: Record, new: dict[bytes, Event],
             replaced: list[tuple[bytes, int, int]], cap: int,
             before_ts_ms: int) -> tuple[list[tuple[bytes, int, int]], int]:
    """Which held event ids go after this record: the oldest first (by log position),
    until at most `cap` remain, then up to EVENT_AGE_OUT_PER_RECORD more that are older
    than the window. Returns them (id, position, seq) and the count that remains."""
    held = state.event_count(rec.shard, rec.dataset)
    count = held + len(new) - len(replaced)
    excess = max(0, count - cap)
    skip = {(p, s) for _, p, s in replaced}
    gone: list[tuple[bytes, int, int]] = []
    if excess or new:
        want = excess + EVENT_AGE_OUT_PER_RECORD + len(skip)
        # Without ids beyond the cap, only ids past the window are wanted (see the loop).
        for pos, seq, eid, ts in state.oldest_events(rec.shard, rec.dataset, want,
                                                     None if excess else before_ts_ms):
            if (pos, seq) in skip or eid in new:
                continue
            if len(gone) < excess:
                gone.append((eid, pos, seq))
                continue
            if ts >= before_ts_ms or len(gone) >= excess + EVENT_AGE_OUT_PER_RECORD:
                break
            gone.append((eid, pos, seq))
    count -= len(gone)
    # This record alone may bring more than the cap: its own oldest go too (`new` is in
    # the order of the record's groups, so its first are its oldest).
    if count > cap:
        drop = list(new)[:count - cap]
        for eid in drop:
            del new[eid]
        count -= len(drop)
    return gone, count
