"""What each storage node stores per dataset, as it publishes it in ZooKeeper for the
coordinators' quota checks (coordinator/quotas.py says how they are used):
/midtown/usage/<node id> -> {"at_ms": ..., "bytes": {dataset id: n}, "shards": {shard: n}}
(the shards' bytes are what `midtown cluster rebalance` evens out: shard_sizes)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from catalog import registry
from catalog.replica_sets import ReplicaSets
from runtime import membership, world

USAGE = "/midtown/usage"
CACHE_TTL_S = 1.0  # how stale a coordinator's view of the counts may be


@dataclass(frozen=True)
class Report:
    """One node's latest counts: when it counted (ms since the epoch), dataset id -> bytes
    and shard -> bytes (empty from a node of an older version)."""
    at_ms: int
    bytes: dict[str, int]
    shards: dict[int, int] = field(default_factory=dict)


def publish(zk: KazooClient, node_id: int, counts: dict[str, int], at_ms: int,
            shard_bytes: dict[int, int] | None = None) -> None:
    """A node's counts, as of `at_ms`: when the count began (a write after it may or may not
    be in it, so the coordinators add what they let in since)."""
    data = json.dumps({"at_ms": at_ms, "bytes": counts,
                       "shards": {str(s): n for s, n in (shard_bytes or {}).items()}}).encode()
    path = f"{USAGE}/{node_id}"
    if zk.exists(path) is None:
        zk.create(path, data, makepath=True)
    else:
        zk.set(path, data)


def read_reports(zk: KazooClient) -> dict[int, Report]:
    """Every node's latest counts."""
    out: dict[int, Report] = {}
    for node, b in membership.children_json(zk, USAGE).items():
        try:
            out[node] = Report(int(b["at_ms"]), {str(k): int(v) for k, v in b["bytes"].items()},
                               {int(k): int(v) for k, v in b.get("shards", {}).items()})
        except (KeyError, TypeError, ValueError, AttributeError):
            continue  # not ours
    return out


def shard_sizes(reports: dict[int, Report], sets: ReplicaSets) -> dict[int, int]:
    """Each shard's bytes: the most any of its replicas counted (a replica catching up or
    counting from before a write holds less, never more). Shards no replica counted are
    left out."""
    out: dict[int, int] = {}
    for shard, nodes in enumerate(sets.sets):
        counted = [reports[n].shards.get(shard, 0) for n in nodes if n in reports and reports[n].shards]
        if counted:
            out[shard] = max(counted)
    return out


View = tuple[dict[int, Report], tuple[int, ...], int]


def view(zk: KazooClient) -> View:
    """(node id -> its latest report, the member nodes, copies of each shard when replica
    sets place them, else 0): what coordinator/quotas.py `used` takes."""
    kv = registry.read_kv(zk)
    if kv is None:
        return read_reports(zk), (), 0
    sets = registry.read_replica_sets(zk, kv)
    return read_reports(zk), kv.storage_nodes, sets.replicas if sets.version >= 0 else 0


def used(view: View, dataset_id: str) -> tuple[int, int]:
    """A dataset's bytes and when they were counted. When every member holds every shard
    (`copies` 0): the highest count among the member nodes' latest reports (the one that
    applied furthest has counted the most recent writes). With replica sets (each shard on
    `copies` nodes, catalog/replica_sets.py): the members' counts added up and divided by
    `copies`, as of the oldest count. (0, 0) when no member has counted yet. `view`: the
    reports, the member nodes and `copies` (catalog/usage.py view)."""
    reports, members, copies = view
    if copies:
        got = [reports[m] for m in members if m in reports]
        if not got:
            return 0, 0
        return (sum(r.bytes.get(dataset_id, 0) for r in got) // copies,
                min(r.at_ms for r in got))
    best = (0, 0)
    for m in members:
        r = reports.get(m)
        if r is not None:
            best = max(best, (r.bytes.get(dataset_id, 0), r.at_ms))
    return best



class UsageCache:
    """A coordinator's view of the usage reports and of the member nodes (which change with
    `midtown node remove|add`), read again at most every `ttl_s`."""

    def __init__(self, zk: KazooClient, ttl_s: float = CACHE_TTL_S) -> None:
        self.zk = zk
        self.ttl_s = ttl_s
        self._at = -float("inf")
        self._view: View = ({}, (), 0)
        self._lock = world.lock()

    def reports(self) -> View:
        """view(), at most `ttl_s` old."""
        now = world.monotonic()
        if now - self._at >= self.ttl_s:
            with self._lock:
                if now - self._at >= self.ttl_s:
                    self._view = view(self.zk)
                    self._at = now
        return self._view


def forget(zk: KazooClient, node_id: int) -> None:
    """A node taken out of the membership: its counts no longer count."""
    try:
        zk.delete(f"{USAGE}/{node_id}")
    except NoNodeError:
        pass
