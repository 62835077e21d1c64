"""A single-key request and its dataset become one record (pure): the shard from the
dataset and the partitioning key, the dataset's default TTL and event-id settings, and,
with an event id, a record of one group (applied at most once per id). A bad key or id is
a Refusal naming the field. The coordinator looks the dataset up once and appends what
this returns (coordinator/node.py); bulk writes have their own planner (coordinator/bulk.py)."""

from __future__ import annotations

from catalog.datasets import Dataset
from coordinator.checks import check_event_id, check_partition
from record.model import Group, Op, Record


def record_for(d: Dataset, request_id: bytes, callback: str, pkey: bytes, ops: tuple[Op, ...],
               event_id: bytes, shards: int) -> Record:
    """`callback`: the address the storage nodes answer to ("" when nobody waits)."""
    check_partition(pkey, "key.partition")
    check_event_id(event_id, "header.event_id")
    shard = d.shard_of(pkey, shards)
    if event_id:
        return Record(request_id, callback, d.id, shard, b"", (), d.ttl_ms,
                      (Group(pkey, ops, event_id),), d.dedup_window_ms, d.dedup_max_ids)
    return Record(request_id, callback, d.id, shard, pkey, ops, d.ttl_ms)
