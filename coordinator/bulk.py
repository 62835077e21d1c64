"""A bulk write (KV.WriteMany): many independent groups, each on its own partitioning key
with its own event id, grouped by shard into one record per shard (Manhattan's
coordinators do the same), and each group's outcome read back from its record's result.
Pure functions: the server appends the records and waits for the answers."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from coordinator.routing import log_of, shard_of
from storage_node import codec
from storage_node.model import Group, GroupResult, OpStatus, Record

_SHARD = struct.Struct(">I")


@dataclass(frozen=True)
class Planned:
    log_id: int
    record: Record
    indexes: tuple[int, ...]  # which of the request's groups, in the record's order


def record_request_id(request_id: bytes, shard: int, part: int) -> bytes:
    """The request id of one record of a bulk write: derived from the call's, so a retry of
    the call (same request id) sends records with the same ids, each answered with its
    first outcome."""
    return request_id + b"/" + _SHARD.pack(shard) + _SHARD.pack(part)


def plan(dataset_id: str, default_ttl_ms: int, window_ms: int, max_ids: int, groups: list[Group],
         shards: int, kv_logs: int, request_id: bytes, callback: str, bytes_max: int) -> list[Planned]:
    """One record per shard (more if a shard's share is larger than `bytes_max` encoded),
    groups in the order they came within each."""
    by_shard: dict[int, list[int]] = {}
    for i, g in enumerate(groups):
        by_shard.setdefault(shard_of(dataset_id, g.partition_key, shards), []).append(i)
    out: list[Planned] = []
    for shard in sorted(by_shard):
        part: list[int] = []
        size = 0
        n = 0

        def flush() -> None:
            nonlocal part, size, n
            if not part:
                return
            rec = Record(record_request_id(request_id, shard, n), callback, dataset_id, shard, b"", (),
                         default_ttl_ms, tuple(groups[i] for i in part), window_ms, max_ids)
            out.append(Planned(log_of(shard, kv_logs), rec, tuple(part)))
            part, size, n = [], 0, n + 1

        for i in by_shard[shard]:
            g = groups[i]
            est = len(g.partition_key) + len(g.event_id) + sum(_op_size(o) for o in g.ops) + 16
            if part and size + est > bytes_max:
                flush()
            part.append(i)
            size += est
        flush()
    return out


def _op_size(op: object) -> int:
    return len(codec.op_to_pb(op).SerializeToString())  # type: ignore[arg-type]


def failure(g: GroupResult) -> str:
    """Why a group was rolled back, naming the operation."""
    for i, r in enumerate(g.results):
        if r.status is OpStatus.CONDITION_FAILED:
            return f"ops[{i}]: condition failed"
        if r.status is OpStatus.NOT_AN_INTEGER:
            return f"ops[{i}]: the stored value is not a decimal integer"
        if r.status is OpStatus.OVERFLOW:
            return f"ops[{i}]: the result does not fit in 64 bits"
    return "rolled back"
