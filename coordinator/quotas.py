"""Storage quotas: how many bytes a dataset may hold.

Every storage node holds every shard, so each one can tell how many bytes each dataset
takes: every usage interval (storage_node/settings.py) it counts the keys and values it stores per dataset
(storage_node/usage.py) and publishes the counts under /midtown/usage/<node id>. A
coordinator takes, per dataset, the highest count among the current members (the node that
applied furthest), adds what it let in itself since that count (Recent), and refuses writes
that add data to a dataset at or over its quota with RESOURCE_EXHAUSTED. Deletes are always
taken, so a user can get back under.

With several coordinators it is a soft limit, as in most stores that shard their data: a
dataset can pass it by what the other coordinators let in between two counts. Counted:
each stored key and value with its version and expiry (values past their expiry until
they are reclaimed), of strong and eventual datasets alike; not RocksDB's own overhead or
compression (docs/api.md, "Storage quotas")."""

from __future__ import annotations

from typing import Any

from midtown_pb import kv_pb2 as pb
from record.sizes import VALUE_OVERHEAD, value_key_len
from runtime import refusals

INT64_DIGITS = 20
# Writes a coordinator let in are added to the nodes' counts if made no earlier than this
# before the count (a write let in shortly before may not have been applied when counted),
# and forgotten after RECENT_MAX_AGE_MS (a count comes every usage interval).
APPLY_SLACK_MS = 2_000
RECENT_MAX_AGE_MS = 120_000
# Sent with a quota refusal: the SDK does not retry it (a retry cannot succeed).
REFUSED_TRAILER = (refusals.QUOTA_TRAILER,)

def format_size(n: int) -> str:
    for unit, size in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def over(quota_bytes: int, used_bytes: int) -> bool:
    """Is a write that adds data refused? Never without a quota."""
    return quota_bytes > 0 and used_bytes >= quota_bytes


Written = tuple[tuple[bytes, bytes], int]  # ((partitioning key, local key), bytes)


def writes(req: Any, dataset_id: str) -> list[Written]:
    """The keys this request can add data under (none for reads and deletes), each with
    at most how many bytes it will take, counted as the nodes count (record/sizes.py: a
    key as the storage node lays it out, a value with its version and expiry)."""
    def one(pkey: bytes, lkey: bytes, value_len: int) -> Written:
        key_len = value_key_len(dataset_id, pkey, lkey)
        return (pkey, lkey), key_len + VALUE_OVERHEAD + value_len

    if isinstance(req, pb.PutRequest):
        return [one(req.key.partition, req.key.local, len(req.value))]
    if isinstance(req, pb.IncrementRequest):
        return [one(req.key.partition, req.key.local, INT64_DIGITS)]
    if isinstance(req, pb.CheckAndSetRequest):
        return [] if req.delete else [one(req.key.partition, req.key.local, len(req.new_value))]
    def ops(pkey: bytes, ops: Any) -> list[Written]:
        out = []
        for op in ops:
            kind = op.WhichOneof("op")
            if kind == "put":
                out.append(one(pkey, op.put.local_key, len(op.put.value)))
            elif kind == "incr":
                out.append(one(pkey, op.incr.local_key, INT64_DIGITS))
            elif kind == "cas" and not op.cas.delete:
                out.append(one(pkey, op.cas.local_key, len(op.cas.new_value)))
        return out

    if isinstance(req, pb.BatchRequest):
        return ops(req.partition_key, req.ops)
    if isinstance(req, pb.WriteManyRequest):
        c = req.puts  # single puts sent as columns
        return ([w for g in req.groups for w in ops(g.partition_key, g.ops)]
                + [one(p, lk, len(v)) for p, lk, v in zip(c.partition_keys, c.local_keys, c.values)])
    return []


class Recent:
    """What a coordinator let in, per dataset, since the nodes last counted: added to their
    count, it keeps the overshoot of a quota to what other coordinators let in meanwhile.
    A key written again counts once, at its latest size: overwriting one key many times
    between two counts does not fill a quota. Pure: the caller gives the times and holds
    a lock."""

    def __init__(self, max_age_ms: int = RECENT_MAX_AGE_MS) -> None:
        self.max_age_ms = max_age_ms
        # dataset id -> key -> (when last let in, bytes), oldest first
        self._keys: dict[str, dict[tuple[bytes, bytes], tuple[int, int]]] = {}
        self._sums: dict[str, int] = {}

    def add(self, dataset_id: str, t_ms: int, written: list[Written]) -> None:
        """Keys let in at `t_ms` (times never go back)."""
        keys = self._keys.setdefault(dataset_id, {})
        total = self._sums.get(dataset_id, 0)
        for key, n in written:
            old = keys.pop(key, None)
            if old is not None:
                total -= old[1]
            keys[key] = (t_ms, n)
            total += n
        self._sums[dataset_id] = total

    def since(self, dataset_id: str, t_ms: int, now_ms: int) -> int:
        """Bytes of the keys last let in at `t_ms` or later; older ones (or older than the
        longest a count can take to come) are forgotten."""
        keys = self._keys.get(dataset_id)
        if not keys:
            return 0
        cutoff = max(t_ms, now_ms - self.max_age_ms)
        while keys:
            key = next(iter(keys))
            when, n = keys[key]
            if when >= cutoff:
                break
            del keys[key]
            self._sums[dataset_id] -= n
        return self._sums[dataset_id]


