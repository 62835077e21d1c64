"""A bulk write (KV.WriteMany): many independent groups, each on its own partitioning key
with its own event id, grouped by shard into one record per shard (Manhattan's
coordinators do the same), and each group's outcome read back from its record's result.

The groups stay protobuf from the request to the record and from the storage node's answer
to the response: a bulk call carries thousands of them, and building model objects for
each, to encode them again, cost more than the rest of the coordinator's work (measured:
docs/performance.md@71edb5a, "Bulk ingestion"). Pure functions: the server appends the records and
waits for the answers."""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from catalog.log_map import LogMap
from catalog.routing import shard_in
from midtown_pb import kv_pb2 as pb

_SHARD = struct.Struct(">I")
_STATUS_ERRORS = {pb.CONDITION_FAILED: "condition failed",
                  pb.NOT_AN_INTEGER: "the stored value is not a decimal integer",
                  pb.OVERFLOW: "the result does not fit in 64 bits"}


@dataclass(frozen=True)
class Planned:
    log_id: int
    shard: int
    request_id: bytes
    payload: bytes  # the encoded pb.Record
    indexes: tuple[int, ...]  # which of the request's groups, in the record's order


def record_request_id(request_id: bytes, shard: int, part: int) -> bytes:
    """The request id of one record of a bulk write: derived from the call's, so a retry of
    the call (same request id) sends records with the same ids, each answered with its
    first outcome."""
    return request_id + b"/" + _SHARD.pack(shard) + _SHARD.pack(part)


def _by_shard(dataset_id: str, pkeys: list[bytes], shards: int | range) -> dict[int, list[int]]:
    """Indexes of `pkeys` by shard, in order; each distinct key hashed once (a call's
    writes usually share a few keys: tenants, users). `shards`: the dataset's (its scope's,
    catalog/scopes.py), or a count from 0."""
    span = shards if isinstance(shards, range) else range(shards)
    shard_of_key: dict[bytes, int] = {}
    by_shard: dict[int, list[int]] = {}
    for i, p in enumerate(pkeys):
        s = shard_of_key.get(p)
        if s is None:
            s = shard_of_key[p] = shard_in(dataset_id, p, span.start, len(span))
        by_shard.setdefault(s, []).append(i)
    return by_shard


def plan(dataset_id: str, default_ttl_ms: int, window_ms: int, max_ids: int,
         groups: list[pb.WriteGroup], puts: pb.PutColumns, shards: int | range, log_map: LogMap,
         request_id: bytes, callback: str, bytes_max: int,
         beside: Callable[[int, int], bool] = lambda log_id, shard: False,
         secret: Callable[[bytes], int] = lambda request_id: 0) -> list[Planned]:
    """One record per shard (more if a shard's share is larger than `bytes_max`), the
    groups in the order they came within each; then, the same way, one record of puts per
    shard. A Planned's indexes count the groups first, then the put rows. `beside(log, shard)`:
    whether a storage node beside the coordinator answers that shard's records alone
    (Record.answered_beside); `secret(request id)`: a record's answer secret
    (Record.answer_secret)."""
    out: list[Planned] = []
    _plan_groups(dataset_id, default_ttl_ms, window_ms, max_ids, groups, shards, log_map,
                 request_id, callback, bytes_max, beside, secret, out)
    if puts.partition_keys:
        _plan_puts(dataset_id, default_ttl_ms, window_ms, max_ids, puts, len(groups), shards, log_map,
                   request_id, callback, bytes_max, beside, secret, out)
    return out


def _chunks(idx: list[int], size_of: Callable[[int], int], bytes_max: int) -> Iterator[list[int]]:
    """`idx` cut in order into runs of at most `bytes_max` (a run holds one item at least)."""
    part: list[int] = []
    size = 0
    for i in idx:
        est = size_of(i)
        if part and size + est > bytes_max:
            yield part
            part, size = [], 0
        part.append(i)
        size += est
    if part:
        yield part


def _plan_puts(dataset_id: str, default_ttl_ms: int, window_ms: int, max_ids: int,
               puts: pb.PutColumns, first: int, shards: int | range, log_map: LogMap, request_id: bytes,
               callback: str, bytes_max: int, beside: Callable[[int, int], bool],
               secret: Callable[[bytes], int], out: list[Planned]) -> None:
    pkeys, lkeys, values = list(puts.partition_keys), list(puts.local_keys), list(puts.values)
    eids, ttls = list(puts.event_ids), list(puts.ttl_ms)

    def size_of(i: int) -> int:
        return len(pkeys[i]) + len(lkeys[i]) + len(values[i]) + (len(eids[i]) if eids else 0) + 24

    for shard, idx in sorted(_by_shard(dataset_id, pkeys, shards).items()):
        log_id = log_map.log_of(shard)
        answered_beside = beside(log_id, shard)
        for part in _chunks(idx, size_of, bytes_max):
            rid = record_request_id(request_id, shard, len(out))
            cols = pb.PutColumns(partition_keys=[pkeys[i] for i in part], local_keys=[lkeys[i] for i in part],
                                 values=[values[i] for i in part],
                                 event_ids=[eids[i] for i in part] if eids else [],
                                 ttl_ms=[ttls[i] for i in part] if ttls else [])
            rec = pb.Record(request_id=rid, callback=callback, dataset=dataset_id, shard=shard,
                            default_ttl_ms=default_ttl_ms, dedup_window_ms=window_ms,
                            dedup_max_ids=max_ids, puts=cols, answered_beside=answered_beside,
                            answer_secret=secret(rid))
            out.append(Planned(log_id, shard, rid, rec.SerializeToString(),
                               tuple(first + i for i in part)))


def _plan_groups(dataset_id: str, default_ttl_ms: int, window_ms: int, max_ids: int,
                 groups: list[pb.WriteGroup], shards: int | range, log_map: LogMap, request_id: bytes,
                 callback: str, bytes_max: int, beside: Callable[[int, int], bool],
                 secret: Callable[[bytes], int], out: list[Planned]) -> None:
    by_shard = _by_shard(dataset_id, [g.partition_key for g in groups], shards)
    for shard, idx in sorted(by_shard.items()):
        log_id = log_map.log_of(shard)
        answered_beside = beside(log_id, shard)
        for part in _chunks(idx, lambda i: groups[i].ByteSize() + 8, bytes_max):
            rid = record_request_id(request_id, shard, len(out))
            rec = pb.Record(request_id=rid, callback=callback, dataset=dataset_id, shard=shard,
                            default_ttl_ms=default_ttl_ms, dedup_window_ms=window_ms, dedup_max_ids=max_ids,
                            groups=[pb.Group(partition_key=groups[i].partition_key, ops=groups[i].ops,
                                             event_id=groups[i].event_id) for i in part],
                            answered_beside=answered_beside, answer_secret=secret(rid))
            out.append(Planned(log_id, shard, rid, rec.SerializeToString(), tuple(part)))


def outcome(g: pb.GroupResult) -> pb.WriteOutcome:
    """A group's result as the client sees it."""
    if g.duplicate:
        return pb.WriteOutcome(status=pb.DUPLICATE, position=g.position, results=g.results)
    if g.applied:
        return pb.WriteOutcome(status=pb.APPLIED, position=g.position, results=g.results)
    return pb.WriteOutcome(status=pb.FAILED, position=g.position, results=g.results, error=failure(g))


def failure(g: pb.GroupResult) -> str:
    """Why a group was rolled back, naming the operation."""
    for i, r in enumerate(g.results):
        if r.status in _STATUS_ERRORS:
            return f"ops[{i}]: {_STATUS_ERRORS[r.status]}"
    return "rolled back"
