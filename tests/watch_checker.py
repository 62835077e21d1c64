"""The changes a strong dataset's shard goes through, derived from its log alone (the
records and their log times), independently of the storage node's code: what a watch must
deliver (docs/api.md "Watch"). A change is (kind, partition key, local key, value, version,
expires_at_ms, position, log time)."""

from __future__ import annotations

from collections.abc import Iterable

from record.model import Cas, Delete, Group, Incr, Put, Record

Change = tuple[str, bytes, bytes, bytes, int, int, int, int]
Key = tuple[bytes, bytes]


def stored_order(k: Key) -> tuple[int, bytes, bytes]:
    """Keys in the order the store keeps them (the partitioning key's length first)."""
    return len(k[0]), k[0], k[1]
Value = tuple[bytes, int, int]  # value, version, expires_at_ms (0: never)


def _run(state: dict[tuple[bytes, bytes], Value], pkey: bytes, ops: Iterable[object], pos: int,
         ts: int, default_ttl: int) -> list[tuple[tuple[bytes, bytes], Value | None]] | None:
    """One all-or-nothing list of operations: the writes (None: delete), or None if one
    failed."""
    mine: dict[tuple[bytes, bytes], Value | None] = {}

    def cur(k: tuple[bytes, bytes]) -> Value | None:
        return mine[k] if k in mine else state.get(k)

    def expiry(ttl: int) -> int:
        ttl = ttl or default_ttl
        return ts + ttl if ttl else 0

    for op in ops:
        if isinstance(op, Put):
            mine[(pkey, op.local_key)] = (op.value, pos + 1, expiry(op.ttl_ms))
        elif isinstance(op, Delete):
            mine[(pkey, op.local_key)] = None
        elif isinstance(op, Cas):
            k = (pkey, op.local_key)
            c = cur(k)
            holds = (c is None) if op.expect_absent else (
                c is not None and (op.expected_value is None or c[0] == op.expected_value))
            if holds and op.expected_version and (c is None or c[1] != op.expected_version):
                holds = False
            if not holds:
                return None
            mine[k] = None if op.delete else (op.new_value, pos + 1, expiry(op.ttl_ms))
        elif isinstance(op, Incr):
            k = (pkey, op.local_key)
            c = cur(k)
            try:
                base = int(c[0].decode("ascii")) if c is not None else 0
            except (UnicodeDecodeError, ValueError):
                return None
            n = base + op.delta
            if not -(2**63) <= n < 2**63:
                return None
            exp = c[2] if c is not None and not op.ttl_ms else expiry(op.ttl_ms)
            mine[k] = (str(n).encode(), pos + 1, exp)
    return list(mine.items())


def changes(entries: Iterable[tuple[int, int, Record | None]], first_ts: int = 0) -> list[Change]:
    """The changes of the records of one dataset in one shard, given as (position, log
    time, record or None) for every entry of the shard's log from the first (None: an entry
    that is not the shard's, or a time mark: only time moves)."""
    state: dict[tuple[bytes, bytes], Value] = {}
    out: list[Change] = []
    seen: set[bytes] = set()
    prev = first_ts
    for pos, ts, rec in entries:
        if ts > prev:
            due = [k for k, (_, _, exp) in state.items() if exp and prev < exp <= ts]
            for k in sorted(due, key=stored_order):
                _, ver, exp = state.pop(k)
                out.append(("EXPIRE", *k, b"", ver, exp, pos, ts))
            prev = ts
        if rec is None or (rec.request_id and rec.request_id in seen):
            continue
        if rec.request_id:
            seen.add(rec.request_id)
        parts: list[tuple[bytes, tuple]] = []
        if rec.puts:
            parts = [(pk, (Put(lk, v, ttl),)) for pk, lk, v, ttl, _ in rec.puts]
        elif rec.groups:
            parts = [(g.partition_key, g.ops) for g in rec.groups if isinstance(g, Group)]
        else:
            parts = [(rec.partition_key, rec.ops)]
        writes: dict[tuple[bytes, bytes], Value | None] = {}
        if rec.puts or rec.groups:  # independent groups, each seeing the ones before
            view = dict(state)
            for pk, ops in parts:
                got = _run(view, pk, ops, pos, ts, rec.default_ttl_ms)
                for k, v in got or []:
                    writes[k] = v
                    if v is None:
                        view.pop(k, None)
                    else:
                        view[k] = v
        else:  # all or nothing
            writes = dict(_run(state, rec.partition_key, rec.ops, pos, ts, rec.default_ttl_ms) or [])
        for k in sorted(writes, key=stored_order):
            v = writes[k]
            if v is None:
                if k in state:
                    del state[k]
                    out.append(("DELETE", *k, b"", pos + 1, 0, pos, ts))
            else:
                state[k] = v
                out.append(("PUT", *k, *v, pos, ts))
    return out
