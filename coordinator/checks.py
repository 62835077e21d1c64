"""Checks of a client's request, each naming the field at fault: pure functions that
raise a BadRequest (runtime/refusals.py: INVALID_ARGUMENT) saying "field: what is wrong"."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc

from coordinator import limits
from midtown_pb import kv_pb2 as pb
from record import codec
from record.model import Op
from runtime.refusals import BadRequest

Code = grpc.StatusCode


def check_partition(pkey: bytes, field: str) -> None:
    if not pkey:
        raise BadRequest(f"{field}: the partitioning key must not be empty")
    if len(pkey) > limits.PARTITION_KEY_BYTES_MAX:
        raise BadRequest(f"{field}: {len(pkey)} bytes, the limit is {limits.PARTITION_KEY_BYTES_MAX}")


def check_local(lkey: bytes, field: str) -> None:
    if len(lkey) > limits.LOCAL_KEY_BYTES_MAX:
        raise BadRequest(f"{field}: {len(lkey)} bytes, the limit is {limits.LOCAL_KEY_BYTES_MAX}")


def check_value(v: bytes, field: str) -> None:
    if len(v) > limits.VALUE_BYTES_MAX:
        raise BadRequest(f"{len(v)} bytes, the limit is {limits.VALUE_BYTES_MAX}", field=field)


def check_ttl(ttl: int, field: str) -> None:
    if ttl > limits.TTL_MS_MAX:
        raise BadRequest(f"{field}: {ttl} ms, the limit is {limits.TTL_MS_MAX}")


def check_op(op: pb.Op, i: int, prefix: str = "") -> Op:
    """A client's operation, checked (errors name the field) and as the model's."""
    validate_op(op, i, prefix)
    return codec.op_from_pb(op)


def validate_op(op: pb.Op, i: int, prefix: str = "") -> None:
    """Check a client's operation; Refusal names the field."""
    kind = op.WhichOneof("op")
    f = f"{prefix}ops[{i}]"
    if kind is None:
        raise BadRequest(f"{f}: empty; set one of put, delete, cas, incr, get")
    if kind == "scan":
        raise BadRequest(f"{f}: scan is not allowed in a batch; use Scan")
    if kind in ("position", "drop", "hand_off", "open"):
        raise BadRequest(f"{f}: {kind} records are the cluster's own")
    inner = getattr(op, kind)
    check_local(inner.local_key, f"{f}.{kind}.local_key")
    if kind == "put":
        check_value(op.put.value, f"{f}.put.value")
        check_ttl(op.put.ttl_ms, f"{f}.put.ttl_ms")
    if kind == "cas":
        check_cas(op.cas.WhichOneof("expect"), op.cas.expected_version, f"{f}.cas")
        check_value(op.cas.new_value, f"{f}.cas.new_value")
        check_ttl(op.cas.ttl_ms, f"{f}.cas.ttl_ms")
    if kind == "incr":
        check_ttl(op.incr.ttl_ms, f"{f}.incr.ttl_ms")


def op_bytes(op: pb.Op) -> int:
    """What an operation counts against its batch's BATCH_BYTES_MAX: its local key and its
    values (a check-and-set's expected value too)."""
    kind = op.WhichOneof("op")
    if kind == "put":
        return len(op.put.local_key) + len(op.put.value)
    if kind == "cas":
        return len(op.cas.local_key) + len(op.cas.new_value) + len(op.cas.expected_value)
    return len(getattr(op, kind).local_key) if kind in ("delete", "incr", "get") else 0


def check_batch(ops: Any, field: str, validate: Callable[[pb.Op, int], Any]) -> list[Any]:
    """An atomic batch's operations (pb.Op): their number, each one (`validate(op, i)`,
    whose results are returned), then their bytes together (op_bytes); Refusal names the
    field at fault under `field`."""
    if not ops:
        raise BadRequest(f"{field}: a batch needs at least one operation")
    if len(ops) > limits.BATCH_OPS_MAX:
        raise BadRequest(f"{field}: {len(ops)} operations, the limit is {limits.BATCH_OPS_MAX}")
    out = [validate(o, i) for i, o in enumerate(ops)]
    total = sum(map(op_bytes, ops))
    if total > limits.BATCH_BYTES_MAX:
        raise BadRequest(f"{field}: the local keys and values add up to {total} "
                    f"bytes, the limit is {limits.BATCH_BYTES_MAX}")
    return out


def check_put_columns(c: pb.PutColumns) -> int:
    """How many rows well-formed columns hold; Refusal names the first bad column or row."""
    n = len(c.partition_keys)
    for name, col in (("local_keys", c.local_keys), ("values", c.values)):
        if len(col) != n:
            raise BadRequest(f"puts.{name}: {len(col)} rows, puts.partition_keys has {n}")
    for name, col in (("event_ids", c.event_ids), ("ttl_ms", c.ttl_ms)):
        if col and len(col) != n:
            raise BadRequest(f"puts.{name}: {len(col)} rows, puts.partition_keys has {n} (or leave it empty)")
    if not n:
        return 0
    # One pass per column over the lengths; a bad row is looked for only when there is one.
    checks: list[tuple[str, Any, Callable[[Any, str], None], Callable[[Any], bool]]] = [
        ("partition_keys", c.partition_keys, check_partition,
         lambda col: 0 < min(map(len, col)) and max(map(len, col)) <= limits.PARTITION_KEY_BYTES_MAX),
        ("local_keys", c.local_keys, check_local,
         lambda col: max(map(len, col)) <= limits.LOCAL_KEY_BYTES_MAX),
        ("values", c.values, check_value, lambda col: max(map(len, col)) <= limits.VALUE_BYTES_MAX),
        ("event_ids", c.event_ids, check_event_id,
         lambda col: not col or max(map(len, col)) <= limits.EVENT_ID_BYTES_MAX),
        ("ttl_ms", c.ttl_ms, check_ttl, lambda col: not col or max(col) <= limits.TTL_MS_MAX),
    ]
    for name, col, check, fine in checks:
        if not fine(col):
            for i, x in enumerate(col):
                check(x, f"puts.{name}[{i}]")
    return n


def check_event_id(event_id: bytes, field: str) -> None:
    if len(event_id) > limits.EVENT_ID_BYTES_MAX:
        raise BadRequest(f"{field}: {len(event_id)} bytes, the limit is {limits.EVENT_ID_BYTES_MAX}")


def check_cas(which: str | None, expected_version: int, field: str) -> None:
    if which is None and not expected_version:
        raise BadRequest(f"{field}: set expected_value, expect_absent or expected_version")


def check_key(key: pb.Key) -> tuple[bytes, bytes]:
    check_partition(key.partition, "key.partition")
    check_local(key.local, "key.local")
    return key.partition, key.local


def check_shard(shard: int, shards: int) -> None:
    if shard >= shards:
        raise BadRequest(f"shard: {shard}, this cluster has shards 0..{shards - 1}")


def check_shard_scan(req: pb.ScanShardRequest) -> None:
    """A ScanShard's page and byte limits."""
    if req.page > limits.SHARD_SCAN_PAGE_MAX:
        raise BadRequest(f"{req.page}, the limit is {limits.SHARD_SCAN_PAGE_MAX}", field="page")
    if req.max_bytes > limits.SHARD_SCAN_BYTES_MAX:
        raise BadRequest(f"max_bytes: {req.max_bytes}, the limit is {limits.SHARD_SCAN_BYTES_MAX}")


def scan_cursor(token: bytes, dataset_id: str, dataset_name: str, shard: int) -> pb.ScanCursor:
    """The cursor a shard scan's token names, which must be of this dataset and shard."""
    cursor = pb.ScanCursor()
    try:
        cursor.ParseFromString(token)
    except Exception:
        raise BadRequest("token: not a scan token") from None
    if cursor.dataset != dataset_id or cursor.shard != shard or not cursor.view:
        raise BadRequest(f"token: not a token of a scan of {dataset_name!r} shard {shard}")
    return cursor


def check_watch(req: pb.WatchRequest, starts: dict[int, int], shards: int, only: int | None) -> None:
    """A Watch's start: positions given (`starts`, by shard) or from_now, not both; each
    shard in the cluster and, with a partitioning key, its shard alone; its duration."""
    if req.from_now == bool(starts):
        raise BadRequest("from: give the positions to start at, or from_now, not both"
                         if starts else "from: no positions to start at (or set from_now)")
    for shard in starts:
        if shard >= shards:
            raise BadRequest(f"from: shard {shard}, this cluster has shards 0..{shards - 1}")
        if only is not None and shard != only:
            raise BadRequest(f"from: shard {shard}; the partitioning key is in shard {only} alone")
    if req.duration_ms > limits.WATCH_DURATION_MS_MAX:
        raise BadRequest(f"duration_ms: {req.duration_ms}, the limit is {limits.WATCH_DURATION_MS_MAX}")
