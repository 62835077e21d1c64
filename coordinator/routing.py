"""Key routing: shard = H(dataset, partitioning key) mod S, and shard -> log. Pure."""

from __future__ import annotations

import hashlib


def shard_of(dataset_id: str, partition_key: bytes, shards: int) -> int:
    assert shards >= 1
    h = hashlib.blake2b(digest_size=8)
    d = dataset_id.encode()
    h.update(len(d).to_bytes(2, "big") + d)
    h.update(partition_key)
    return int.from_bytes(h.digest(), "big") % shards


def log_of(shard: int, logs: int) -> int:
    assert logs >= 1
    return shard % logs
