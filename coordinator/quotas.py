"""Storage quotas: how many bytes a dataset may hold.

Every storage node holds every shard, so each one can tell how many bytes each dataset
takes: every USAGE_INTERVAL_S it counts the keys and values it stores per dataset
(storage_node/usage.py) and publishes the counts under /midtown/usage/<node id>. A
coordinator takes, per dataset, the highest count among the current members (the node that
applied furthest) and refuses writes that add data to a dataset at or over its quota with
RESOURCE_EXHAUSTED. Deletes are always taken, so a user can get back under.

A quota is a soft limit, as in most stores that shard their data: a dataset can pass it by
what it writes between two counts and the coordinators' next look (about USAGE_INTERVAL_S
+ CACHE_TTL_S). Counted: each stored key and value with its version and expiry (values
past their expiry until they are reclaimed), of strong and eventual datasets alike; not
RocksDB's own overhead or compression."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from kazoo.client import KazooClient

from coordinator import limits
from midtown import registry
from midtown_pb import kv_pb2 as pb

USAGE = "/midtown/usage"  # /midtown/usage/<node id>: {"at_ms": ..., "bytes": {dataset id: n}}
CACHE_TTL_S = 1.0  # how stale a coordinator's view of the counts may be
# Sent with a quota refusal: the SDK does not retry it (a retry cannot succeed).
REFUSED_TRAILER = (("midtown-refused", "quota"),)

_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3,
          "gb": 1000**3, "t": 1000**4, "tb": 1000**4, "kib": 1024, "mib": 1024**2,
          "gib": 1024**3, "tib": 1024**4}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str) -> int:
    """"10GiB", "500MB", "4096", "none" or "0" (no quota) -> bytes. ValueError, saying
    what is accepted, for anything else."""
    if text.strip().lower() == "none":
        return 0
    m = _SIZE.match(text)
    unit = m.group(2).lower() if m else ""
    if m is None or unit not in _UNITS:
        raise ValueError(f"{text!r} is not a size: give bytes, or a number with B, KB, MB, GB, "
                         "TB, KiB, MiB, GiB or TiB, or none")
    n = int(Decimal(m.group(1)) * _UNITS[unit])  # exact, however large
    if n > limits.QUOTA_BYTES_MAX:
        raise ValueError(f"{text!r} is over the largest quota, {limits.QUOTA_BYTES_MAX} bytes")
    return n


def format_size(n: int) -> str:
    for unit, size in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def used(reports: dict[int, dict[str, int]], members: Sequence[int], dataset_id: str) -> int:
    """A dataset's bytes: the highest count among the member nodes' latest reports (each
    holds every shard; the one that applied furthest has counted the most recent writes)."""
    return max((reports.get(m, {}).get(dataset_id, 0) for m in members), default=0)


def over(quota_bytes: int, used_bytes: int) -> bool:
    """Is a write that adds data refused? Never without a quota."""
    return quota_bytes > 0 and used_bytes >= quota_bytes


def adds_data(req: Any) -> bool:
    """Can this request make its dataset hold more? Reads and deletes never do."""
    if isinstance(req, (pb.PutRequest, pb.IncrementRequest)):
        return True
    if isinstance(req, pb.CheckAndSetRequest):
        return not req.delete
    if isinstance(req, pb.BatchRequest):
        return any(op.WhichOneof("op") in ("put", "incr") or
                   (op.WhichOneof("op") == "cas" and not op.cas.delete) for op in req.ops)
    return False


def publish(zk: KazooClient, node_id: int, counts: dict[str, int]) -> None:
    data = json.dumps({"at_ms": int(time.time() * 1000), "bytes": counts}).encode()
    path = f"{USAGE}/{node_id}"
    if zk.exists(path) is None:
        zk.create(path, data, makepath=True)
    else:
        zk.set(path, data)


def read_reports(zk: KazooClient) -> dict[int, dict[str, int]]:
    """Every node's latest counts: node id -> dataset id -> bytes."""
    out: dict[int, dict[str, int]] = {}
    for node, b in registry.children_json(zk, USAGE).items():
        try:
            out[node] = {str(k): int(v) for k, v in b["bytes"].items()}
        except (KeyError, TypeError, ValueError, AttributeError):
            continue  # not ours
    return out


class UsageCache:
    """A coordinator's view of the usage reports, read again at most every `ttl_s`."""

    def __init__(self, zk: KazooClient, ttl_s: float = CACHE_TTL_S) -> None:
        self.zk = zk
        self.ttl_s = ttl_s
        self._at = -float("inf")
        self._reports: dict[int, dict[str, int]] = {}
        self._lock = threading.Lock()

    def reports(self) -> dict[int, dict[str, int]]:
        now = time.monotonic()
        if now - self._at >= self.ttl_s:
            with self._lock:
                if now - self._at >= self.ttl_s:
                    self._reports = read_reports(self.zk)
                    self._at = now
        return self._reports
