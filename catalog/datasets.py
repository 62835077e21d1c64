"""Datasets: named, isolated keyspaces, defined in ZooKeeper (/midtown/datasets/<name>).

Each dataset's keys are stored under its *id*, `name#incarnation` (the znode's creation
zxid), so a dataset dropped and created again under the same name starts empty."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from decimal import Decimal

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from catalog import limits, registry, scopes
from catalog.limits import EVENT_IDS_PER_SHARD_DEFAULT, EVENT_WINDOW_MS_DEFAULT
from catalog.routing import shard_in
from catalog.users import check_user
from fleet import connect, machines
from runtime import world

ROOT = registry.DATASETS
DROPPED = "/midtown/dropped"  # dataset id -> when it was dropped
CACHE_TTL_S = 1.0  # how stale a coordinator's view of a dataset may be
NAME = re.compile(r"^[a-z][a-z0-9_-]{0,63}$")


class DatasetError(ValueError):
    pass


@dataclass(frozen=True)
class Dataset:
    name: str
    consistency: str = "strong"
    replication: int = 3
    ttl_ms: int = 0  # default TTL of new values; 0: none
    incarnation: int = 0
    rate_limit: float = 0  # requests per second over all clients; 0: none
    acl: tuple[tuple[str, str], ...] = ()  # (user, "r" | "rw"); empty: open to every client
    quota_bytes: int = 0  # stored bytes beyond which writes are refused; 0: none (coordinator/quotas.py)
    # Event ids (docs/exactly-once.md): how long in log time an id is remembered, how many
    # ids per shard at most (the oldest go first), and the effective window below which
    # operators are warned (0: no warning). 0 for the first two: the defaults.
    dedup_window_ms: int = 0
    dedup_max_ids: int = 0
    dedup_warn_below_ms: int = 0
    # Its scope (catalog/scopes.py) and the shards its keys hash over, first..first+count-1,
    # fixed at its creation; count 0: every shard of the cluster (a dataset made before scopes).
    scope: str = scopes.GLOBAL
    shard_first: int = 0
    shard_count: int = 0

    def shard_of(self, partition_key: bytes, cluster_shards: int) -> int:
        """The shard that carries `partition_key`'s keys (catalog/routing.py)."""
        return shard_in(self.id, partition_key, self.shard_first, self.shard_count or cluster_shards)

    def shards(self, cluster_shards: int) -> range:
        return range(self.shard_first, self.shard_first + (self.shard_count or cluster_shards))

    @property
    def access(self) -> dict[str, str]:
        return dict(self.acl)

    @property
    def id(self) -> str:
        return f"{self.name}#{self.incarnation}"


def validate_dedup(window_ms: int, max_ids: int, warn_below_ms: int) -> None:
    if not 0 <= window_ms <= limits.DEDUP_WINDOW_MS_MAX:
        raise DatasetError(f"dedup_window: must be between 0 (the default, "
                           f"{EVENT_WINDOW_MS_DEFAULT // 86_400_000}d) and "
                           f"{limits.DEDUP_WINDOW_MS_MAX // 86_400_000}d")
    if not 0 <= max_ids <= limits.DEDUP_MAX_IDS_MAX:
        raise DatasetError(f"dedup_max_ids: must be between 0 (the default, {EVENT_IDS_PER_SHARD_DEFAULT}) "
                           f"and {limits.DEDUP_MAX_IDS_MAX} per shard")
    if not 0 <= warn_below_ms <= limits.DEDUP_WINDOW_MS_MAX:
        raise DatasetError("dedup_warn_below: must be between 0 (no warning) and the longest window")


def validate(name: str, consistency: str, replication: int, ttl_ms: int,
             rate_limit: float = 0, quota_bytes: int = 0) -> None:
    if not 0 <= quota_bytes <= limits.QUOTA_BYTES_MAX:
        raise DatasetError(f"quota: must be between 0 (none) and {limits.QUOTA_BYTES_MAX} bytes")
    if not 0 <= rate_limit <= limits.RATE_LIMIT_MAX:
        raise DatasetError(f"rate_limit: must be between 0 and {limits.RATE_LIMIT_MAX} requests/s")
    if not NAME.match(name):
        raise DatasetError(
            f"name: {name!r} must be 1-{limits.DATASET_NAME_MAX} characters of a-z, 0-9, _ and -, "
            "starting with a letter"
        )
    if consistency not in ("strong", "eventual"):
        raise DatasetError(f"consistency: {consistency!r}; choose 'strong' or 'eventual'")
    if replication != 3:
        raise DatasetError("replication: only 3 is supported (every storage node holds every shard)")
    if not 0 <= ttl_ms <= limits.TTL_MS_MAX:
        raise DatasetError(f"ttl: must be between 0 and {limits.TTL_MS_MAX} ms")


def _exists(zk: KazooClient, name: str, scope: str) -> str:
    """What a creation of an existing dataset is told; a scope other than its own is a
    scope change, which is not made: the way to one is said."""
    d = get(zk, name)
    if d is None or d.scope == scope:
        return f"name: dataset {name!r} already exists"
    return (f"scope: dataset {name!r} already exists, in scope {d.scope!r}; a dataset's scope is fixed "
            f"when it is created: create another with --scope {scope} and copy the data over (the Spark "
            "connector reads one dataset and writes another: docs/spark.md)")


SURVIVE_DC = "dc"  # the loss of a whole data center (CockroachDB's SURVIVE REGION FAILURE)
SURVIVE_ZONE = "zone"  # the loss of a zone or a machine in each, not of a data center
SURVIVALS = (SURVIVE_DC, SURVIVE_ZONE)


def create(zk: KazooClient, name: str, consistency: str = "strong", replication: int = 3,
           ttl_ms: int = 0, rate_limit: float = 0, acl: dict[str, str] | None = None,
           quota_bytes: int = 0, dedup_window_ms: int = 0, dedup_max_ids: int = 0,
           dedup_warn_below_ms: int = 0, scope: str = scopes.GLOBAL, survive: str = SURVIVE_DC) -> Dataset:
    """Create dataset `name` in `scope` (catalog/scopes.py): its keys hash over that
    scope's shards as laid out now. Created in one transaction with a check that the
    layout has not changed since it was read and a bump of ROOT's version (which a scope
    being laid out checks), so a scope never takes shards a dataset hashes over. A strong
    global dataset survives the loss of a data center (`survive` "dc", the default) only on
    log servers in three or more: on two it is refused unless `survive` is "zone"
    (_check_survival)."""
    validate(name, consistency, replication, ttl_ms, rate_limit, quota_bytes)
    if survive not in SURVIVALS:
        raise DatasetError(f"survive: {survive!r}, must be one of {', '.join(SURVIVALS)}")
    validate_dedup(dedup_window_ms, dedup_max_ids, dedup_warn_below_ms)
    if scope != scopes.GLOBAL and consistency != "strong":
        raise DatasetError(f"scope: {scope!r}; an eventual dataset is written where its caller is, "
                           "so it has no scope (docs/operations.md, 'Data centers')")
    _wait_out_a_recent_drop(zk, name)
    zk.ensure_path(ROOT)
    body = {"consistency": consistency, "replication": replication, "ttl_ms": ttl_ms,
            "rate_limit": rate_limit, "created_ms": world.wall_ms(), "acl": acl or {},
            "quota_bytes": quota_bytes, "dedup_window_ms": dedup_window_ms,
            "dedup_max_ids": dedup_max_ids, "dedup_warn_below_ms": dedup_warn_below_ms}
    while True:
        got = registry.read_kv_versioned(zk)
        if got is None and scope != scopes.GLOBAL:
            raise DatasetError("scope: this cluster has no key-value topology yet, so no scopes "
                               "(midtown cluster init)")
        tx = zk.transaction()
        if got is not None:
            kv, kv_version = got
            try:
                first, count = scopes.range_of(kv.scopes, scope, kv.shards)
            except scopes.ScopeError as e:
                raise DatasetError(str(e)) from None
            _check_placed(zk, kv, scope)
            body.update(scope=scope, shards=[first, count])
        if scope == scopes.GLOBAL and consistency == "strong" and survive == SURVIVE_DC:
            _check_survival(zk)
        tx.create(f"{ROOT}/{name}", json.dumps(body).encode())
        tx.set_data(ROOT, b"", version=-1)  # after the create: its id (czxid) is the create's
        if got is not None:
            tx.check(registry.KV, kv_version)
        try:
            registry.commit(tx)
        except NodeExistsError:
            raise DatasetError(_exists(zk, name, scope)) from None
        except BadVersionError:
            continue  # the layout (or the membership) changed since it was read: again
        d = get(zk, name)
        assert d is not None
        return d


def _check_survival(zk: KazooClient) -> None:
    """A strong global dataset is to keep its writes through the loss of any one data
    center: its logs' segments have three copies, one in each of three data centers. On
    log servers named in exactly two, one holds two of every segment's copies and its loss
    stops every write: refused, with what to do instead. (None named, or one: the cluster
    is one data center, and global is all of it.)"""
    dcs = sorted({d.dc for d in machines.recorded(zk, machines.LOG_SERVERS).values() if d.dc})
    if len(dcs) == 2:
        raise DatasetError(
            f"scope: a global dataset is to survive the loss of a data center, which takes log servers in "
            f"three; this cluster's stand in two ({', '.join(dcs)}), one of which holds two of each "
            f"segment's three copies, so its loss stops every global write. Give the cluster a third data "
            f"center, create the dataset local to one (--scope {dcs[0]}), or create it to survive a zone's "
            "loss only (--survive zone)")


def _check_placed(zk: KazooClient, kv: registry.KvTopology, scope: str) -> None:
    """A local scope's datasets are created once all its shards are on its logs (a scope
    just laid out has them handed over first: its datasets never write through another's)."""
    if scope == scopes.GLOBAL:
        return
    m = registry.read_log_map(zk, kv)
    s = scopes.find(kv.scopes, scope)
    assert s is not None
    away = [sh for sh in s.shards() if m.of[sh] not in s.logs or m.handing_of(sh) is not None]
    if away:
        raise DatasetError(f"scope: {len(away)} of the shards of scope {scope!r} are not on its logs yet "
                           f"(shard {away[0]} among them); midtown cluster rebalance hands them over")


def used_shards(zk: KazooClient) -> tuple[list[tuple[str, int, int]], int]:
    """(name, first shard, count: 0 for all) of every dataset, and ROOT's version read before
    them (catalog/registry.py add_scope checks it: a dataset created since bumped it)."""
    zk.ensure_path(ROOT)
    _, stat = zk.get(ROOT)
    out = []
    for name in names(zk):
        d = get(zk, name)
        if d is not None:
            out.append((name, d.shard_first, d.shard_count))
    return out, stat.version


def _wait_out_a_recent_drop(zk: KazooClient, name: str) -> None:
    """A dataset dropped under this name less than two cache lifetimes ago may still be
    in a coordinator's cache: a write sent to the new one could land in the old one and
    be deleted with it. Wait until no coordinator can still hold it."""
    now_ms = world.wall_ms()
    for dataset_id, at in dropped(zk):
        if dataset_id.rsplit("#", 1)[0] == name:
            wait_s = (at + 2 * CACHE_TTL_S * 1000 - now_ms) / 1000
            if wait_s > 0:
                world.sleep(min(wait_s, 2 * CACHE_TTL_S))


def get(zk: KazooClient, name: str) -> Dataset | None:
    try:
        data, stat = zk.get(f"{ROOT}/{name}")
    except NoNodeError:
        return None
    b = json.loads(data)
    return Dataset(name, b["consistency"], b["replication"], b["ttl_ms"], stat.czxid,
                   b.get("rate_limit", 0), tuple(sorted(b.get("acl", {}).items())),
                   b.get("quota_bytes", 0), b.get("dedup_window_ms", 0), b.get("dedup_max_ids", 0),
                   b.get("dedup_warn_below_ms", 0), b.get("scope", scopes.GLOBAL), *b.get("shards", (0, 0)))


def grant(zk: KazooClient, name: str, user: str, perm: str) -> Dataset:
    """Set one user's access to a dataset ("r", "rw", or "none" to take it away), by a
    versioned write. Granting to nobody leaves the dataset open again."""
    if perm not in ("r", "rw", "none"):
        raise DatasetError(f"PERM: {perm!r}; choose r, rw or none")
    try:
        check_user(user)
    except ValueError as e:
        raise DatasetError(str(e)) from None

    def change(b: dict) -> None:
        access = dict(b.get("acl", {}))
        if perm == "none":
            access.pop(user, None)
        else:
            access[user] = perm
        b["acl"] = access
    return _update(zk, name, change)


def set_quota(zk: KazooClient, name: str, quota_bytes: int) -> Dataset:
    """Set a dataset's storage quota (0: none), by a versioned write."""
    if not 0 <= quota_bytes <= limits.QUOTA_BYTES_MAX:
        raise DatasetError(f"SIZE: must be between 0 (none) and {limits.QUOTA_BYTES_MAX} bytes")
    return _update(zk, name, lambda b: b.update(quota_bytes=quota_bytes))


def set_dedup(zk: KazooClient, name: str, window_ms: int | None = None, max_ids: int | None = None,
              warn_below_ms: int | None = None) -> Dataset:
    """Change a dataset's event-id settings (None: unchanged), by a versioned write. The
    new ones travel with the next records (each record carries its dataset's settings),
    so every replica switches at the same log position."""
    def change(b: dict) -> None:
        if window_ms is not None:
            b["dedup_window_ms"] = window_ms
        if max_ids is not None:
            b["dedup_max_ids"] = max_ids
        if warn_below_ms is not None:
            b["dedup_warn_below_ms"] = warn_below_ms
        validate_dedup(b.get("dedup_window_ms", 0), b.get("dedup_max_ids", 0),
                       b.get("dedup_warn_below_ms", 0))
    return _update(zk, name, change)


def _update(zk: KazooClient, name: str, change: Callable[[dict], object]) -> Dataset:
    """Change a dataset's definition in place, retried if it changed meanwhile."""
    while True:
        try:
            data, stat = zk.get(f"{ROOT}/{name}")
        except NoNodeError:
            raise DatasetError(f"NAME: no dataset {name!r}") from None
        b = json.loads(data)
        change(b)
        try:
            zk.set(f"{ROOT}/{name}", json.dumps(b).encode(), version=stat.version)
        except BadVersionError:
            continue
        d = get(zk, name)
        assert d is not None
        return d


def names(zk: KazooClient) -> list[str]:
    try:
        return sorted(zk.get_children(ROOT))
    except NoNodeError:
        return []


def drop(zk: KazooClient, name: str) -> None:
    """Unreachable at once; its space is reclaimed by the storage nodes after
    DROP_DELAY_S (docs/storage.md)."""
    d = get(zk, name)
    if d is None:
        raise DatasetError(f"name: no dataset {name!r}")
    tx = zk.transaction()
    tx.delete(f"{ROOT}/{name}")
    tx.create(f"{DROPPED}/{d.id}", json.dumps({"dropped_ms": world.wall_ms()}).encode())
    zk.ensure_path(DROPPED)
    if any(isinstance(r, Exception) for r in tx.commit()):
        raise DatasetError(f"name: dataset {name!r} changed meanwhile; try again")


def forget_drop(zk: KazooClient, dataset_id: str) -> None:
    try:
        zk.delete(f"{DROPPED}/{dataset_id}")
    except NoNodeError:
        pass


def dropped(zk: KazooClient) -> list[tuple[str, int]]:
    """Dropped datasets' ids, with when they were dropped (ms since the epoch)."""
    try:
        ids = zk.get_children(DROPPED)
    except NoNodeError:
        return []
    out = []
    for i in sorted(ids):
        try:
            data, _ = zk.get(f"{DROPPED}/{i}")
        except NoNodeError:
            continue
        out.append((i, int(json.loads(data)["dropped_ms"])))
    return out


def effective_dedup_window(d: Dataset, shards: list[tuple[int, int, int]]) -> int:
    """A dataset's effective event-id window, in log time: how far back a repeat is still
    recognised in every shard. `shards`: (ids held, oldest id's log time, the shard's log
    time now) for each shard holding some, on each replica. A shard holding fewer ids than
    the cap has aged none out for size: its window is the dataset's; a full one, the age of
    its oldest id."""
    window = d.dedup_window_ms or EVENT_WINDOW_MS_DEFAULT
    cap = d.dedup_max_ids or EVENT_IDS_PER_SHARD_DEFAULT
    out = window
    for ids, oldest_ms, now_ms in shards:
        if ids >= cap:
            out = min(out, max(0, now_ms - oldest_ms))
    return out


def describe(d: Dataset) -> dict:
    out = asdict(d)
    out["id"] = d.id
    out["acl"] = ",".join(f"{u}={p}" for u, p in d.acl) or "open"
    out["shards"] = f"{d.shard_first}..{d.shard_first + d.shard_count - 1}" if d.shard_count else "all"
    del out["shard_first"], out["shard_count"]
    return out


class DatasetCache:
    """A coordinator's view of the datasets, refreshed at most every `ttl_s`; an unknown
    name is looked up again at once (it may have just been created). A dataset created or
    dropped empties it (a ZooKeeper watch on the list): a dropped dataset is refused as
    soon as ZooKeeper tells the coordinator, not up to `ttl_s` later.

    A coordinator's reads of ZooKeeper end within fleet/connect.py's READ_WAIT_S. An
    entry older than `ttl_s` is looked up again (waiting STALE_READ_WAIT_S at most), and
    it is still taken when the look-up fails, until it is `2 * ttl_s` old:
    the bound `_wait_out_a_recent_drop` waits out.
    Past that a write whose look-up fails is refused UNAVAILABLE (the dataset may have been
    dropped meanwhile, and a write into a dropped one would be lost); a read takes the entry
    however old (at worst it reads a dataset that was dropped since)."""

    def __init__(self, zk: KazooClient, ttl_s: float = CACHE_TTL_S) -> None:
        self.zk = zk
        self.ttl_s = ttl_s
        self._cache: dict[str, tuple[float, Dataset | None]] = {}
        self._lock = world.lock()
        self._emptied = 0  # times the watch emptied it: a lookup begun before is not kept
        self._names: frozenset[str] | None = None  # the datasets' names the watch last saw
        self._quick = connect.bounded(zk, connect.STALE_READ_WAIT_S)

    def watch(self) -> None:
        """Empty the cache whenever a dataset is created or dropped (from now on)."""
        self.zk.ensure_path(ROOT)
        self.zk.ChildrenWatch(ROOT, self._on_children)

    def _on_children(self, children: list[str]) -> None:
        # kazoo calls this again, with the same list, when a session is re-established: a
        # list unchanged since the last call empties nothing (entries the coordinator goes
        # on with while ZooKeeper is away again). A dataset dropped and made again meanwhile
        # keeps its name: the create waited out two lifetimes of an entry, past which a
        # write reads it again (a read may see the old one, as while ZooKeeper is away).
        names = frozenset(children)
        with self._lock:
            if names == self._names:
                return
            self._names = names
            self._cache.clear()
            self._emptied += 1

    def get(self, name: str, write: bool = True) -> Dataset | None:
        """The dataset `name` (None: there is none); `write`: for a request that writes.
        Raises ZooKeeper's error if it could not be looked up and no entry may be used."""
        if not NAME.match(name):
            return None
        now = world.monotonic()
        with self._lock:
            hit, emptied = self._cache.get(name), self._emptied
            usable = hit[1] if hit is not None and (not write or now - hit[0] < 2 * self.ttl_s) else None
            if hit is not None and usable is not None and now - hit[0] < self.ttl_s:
                return usable
        try:  # a short bound on ZooKeeper's answer where there is an entry to go on with
            d = get(self.zk if usable is None else self._quick, name)
        except Exception:
            if usable is not None:  # ZooKeeper away for now: the entry holds a while longer
                return usable
            raise
        with self._lock:
            if self._emptied == emptied:
                self._cache[name] = (now, d)
        return d


_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3,
          "gb": 1000**3, "t": 1000**4, "tb": 1000**4, "kib": 1024, "mib": 1024**2,
          "gib": 1024**3, "tib": 1024**4}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str) -> int:
    """A quota as given: "10GiB", "500MB", "4096", "none" or "0" (no quota) -> bytes. ValueError, saying
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
