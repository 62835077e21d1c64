"""Key routing: shard = H(dataset, partitioning key) mod S, shard -> log, and which
storage replicas answer for a shard. Pure."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from runtime.refusals import BadRequest


def shard_of(dataset_id: str, partition_key: bytes, shards: int) -> int:
    return shard_in(dataset_id, partition_key, 0, shards)


def shard_in(dataset_id: str, partition_key: bytes, first: int, count: int) -> int:
    """The shard of `partition_key` among shards first..first+count-1 (a dataset's scope's,
    catalog/scopes.py)."""
    assert count >= 1
    h = hashlib.blake2b(digest_size=8)
    d = dataset_id.encode()
    h.update(len(d).to_bytes(2, "big") + d)
    h.update(partition_key)
    return first + int.from_bytes(h.digest(), "big") % count


def log_of(shard: int, logs: int) -> int:
    """The first shard -> log map's rule (catalog/log_map.py first), which a cluster keeps
    until a shard is handed over to another log."""
    assert logs >= 1
    return shard % logs


def answers_for(node_id: int, shard: int, members: Iterable[int], replicas: int) -> bool:
    """Whether `node_id` is one of the `replicas` storage nodes that answer coordinators
    for `shard` (the others apply it and stay quiet). With `replicas` or fewer members,
    every member answers."""
    nodes = sorted(members)
    if node_id not in nodes:
        return False
    if len(nodes) <= replicas:
        return True
    first = shard % len(nodes)
    return (nodes.index(node_id) - first) % len(nodes) < replicas


def check_shard(shard: int, shards: int, field: str = "") -> None:
    """A shard a request names must exist: BadRequest naming `field` + "shard" if not."""
    if shard >= shards:
        raise BadRequest(f"{field}shard: {shard}, this cluster has shards 0..{shards - 1}")
