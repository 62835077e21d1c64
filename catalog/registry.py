"""ZooKeeper layout shared by coordinators, storage nodes and clients (the log's own is in
log/zk.py):

  /midtown/kv                      {"shards": S, "storage_nodes": [ids], "logs": L,
                                   "scopes": [local scopes: catalog/scopes.py]}
  /midtown/replica_sets            {"replicas": R, "sets": [[node ids] per shard]}  (versioned;
                                   absent: every member holds every shard; catalog/replica_sets.py)
  /midtown/replica_sets_history/change-N   each version as written, with when and why
  /midtown/log_map                 {"logs": L, "of": [log per shard], "handoffs": [...]} (versioned;
                                   absent: shard mod L; catalog/log_map.py)
  /midtown/log_map_history/change-N        each version as written, with when and why
  /midtown/moves/<shard>           a shard move under way (catalog/shard_moves.py), versioned;
                                   null once it ended (ENDED: the record stays)
  /midtown/published/<id>          storage node <id> has published positions into the logs
  /midtown/storage_nodes/<id>      {"addr": "host:port"}                   ephemeral
  /midtown/coordinators/<id>       {"addr": "host:port", "log": "host:port"} ephemeral
                                   ("log": the log server in the same process, host layout)
  /midtown/datasets/<name>         dataset definition (catalog/datasets.py)
  /midtown/failover_holds/hold-N   {"logs": [...]}: a fail-over under way holds the replicas
                                   of those logs where they said they stand  ephemeral"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    RolledBackError,
    RuntimeInconsistency,
)

from catalog import failover, log_map, replica_sets, scopes, shard_moves
from catalog.log_map import LogMap
from catalog.replica_sets import ReplicaSets
from catalog.shard_moves import Move
from fleet import machines
from fleet.failure_domains import Domains, PlacementError
from log import zk as zkpaths
from runtime import world
from runtime.membership import Membership, numbered_children

KV = "/midtown/kv"
DATASETS = "/midtown/datasets"  # catalog/datasets.py
STORAGE_NODES = "/midtown/storage_nodes"
COORDINATORS = "/midtown/coordinators"
REPLICA_SETS = "/midtown/replica_sets"
REPLICA_SETS_HISTORY = "/midtown/replica_sets_history"
LOG_MAP = "/midtown/log_map"  # catalog/log_map.py; none written: shard mod logs
LOG_MAP_HISTORY = "/midtown/log_map_history"
MOVES = "/midtown/moves"
# A child per storage node id that has ever published its positions into the logs (made
# before its first publication): one that starts on an empty store while its id has one
# lost its disk, and the logs may be truncated below what it published (storage_node/node.py).
PUBLISHED = "/midtown/published"
# A fail-over under way (drivers/failover.py): the storage nodes apply none of its logs
# past where they told it they stand while its node stands (storage_node/holds.py).
HOLDS = "/midtown/failover_holds"
SHARDS_DEFAULT = 64
SHARDS_MAX = 65536
# Logs the key-value store spreads its shards over (logs 0..L-1 of the cluster's logs).
# Fewer, fuller logs batch better, more logs spread the writers over more hosts and a writer
# failover stalls fewer keys (docs/performance.md). Across hosts (`cluster init`): three,
# one for each log server to write. On one machine (`cluster up`), where every process
# shares the same cores, one: 64 clients put ~1.6x faster through one log than through 3.
KV_LOGS_DEFAULT = 3
KV_LOGS_LOCAL_DEFAULT = 1


@dataclass(frozen=True)
class KvTopology:
    shards: int
    storage_nodes: tuple[int, ...]
    logs: int = KV_LOGS_DEFAULT
    # Copies of each shard (catalog/replica_sets.py); a cluster made before it was recorded
    # has the default.
    replicas: int = replica_sets.REPLICAS_DEFAULT
    # The local scopes laid out (catalog/scopes.py); the other shards are global.
    scopes: scopes.Layout = ()
    # The fail-overs made (catalog/failover.py record), oldest first.
    failovers: tuple[dict, ...] = ()
    # Copies of each shard in every data center (`--copies-per-dc`; 0: R dealt over them).
    per_dc: int = 0


def create_kv(zk: KazooClient, shards: int, storage_nodes: list[int],
              logs: int = KV_LOGS_DEFAULT,
              replicas: int = replica_sets.REPLICAS_DEFAULT, per_dc: int = 0) -> KvTopology:
    """The key-value topology, if there is none yet. With more storage nodes than
    `replicas`, each shard is placed on `replicas` of them (catalog/replica_sets.py);
    with `per_dc`, on that many in each data center the storage nodes name."""
    if not 1 <= shards <= SHARDS_MAX:
        raise ValueError(f"shards: must be between 1 and {SHARDS_MAX}")
    if logs < 1:
        raise ValueError("kv logs: must be at least 1")
    if len(set(storage_nodes)) != len(storage_nodes):
        raise ValueError(f"storage nodes: {storage_nodes}, must be distinct ids")
    replica_sets.check_replicas(replicas, max(replicas, len(storage_nodes)))
    zk.ensure_path(STORAGE_NODES)
    zk.ensure_path(COORDINATORS)
    try:
        first = replica_sets.first_sets(shards, storage_nodes, replicas, 0, *placement_rule(zk),
                                        per_dc=per_dc)
        if first is not None:  # before the topology: a reader never sees one without it
            _write_sets(zk, first, None, "placed at cluster creation")
        # The key-value logs keep a read lease and mark idle time (log/zk.py
        # Topology.leased_below): asked of the log in the same transaction, unless the log's
        # cluster was made so, so the topology is never seen without it.
        lease = zkpaths.leased_update(zk, logs)
        tx = zk.transaction()
        tx.create(KV, json.dumps({"shards": shards, "storage_nodes": storage_nodes,
                                  "logs": logs, "replicas": replicas,
                                  **({"per_dc": per_dc} if per_dc else {})}).encode())
        if lease is not None:
            tx.set_data(zkpaths.TOPOLOGY, lease[0], version=lease[1])
        commit(tx)
    except NodeExistsError:
        pass
    t = read_kv(zk)
    assert t is not None
    return t


def placement_rule(zk: KazooClient) -> tuple[Domains, bool]:
    """What the placement rule needs (fleet/failure_domains.py): the storage nodes'
    machines as recorded, and whether the cluster says it runs on one machine."""
    return machines.domains(zk, machines.STORAGE_NODES), machines.one_machine(zk)


def read_kv(zk: KazooClient) -> KvTopology | None:
    got = read_kv_versioned(zk)
    return None if got is None else got[0]


def read_kv_versioned(zk: KazooClient) -> tuple[KvTopology, int] | None:
    """The key-value topology and ZooKeeper's version of it (None: no cluster yet)."""
    try:
        data, stat = zk.get(KV)
    except NoNodeError:
        return None
    return _kv_of(json.loads(data)), stat.version


def _kv_of(d: dict[str, Any]) -> KvTopology:
    return KvTopology(d["shards"], tuple(d["storage_nodes"]), d.get("logs", KV_LOGS_DEFAULT),
                      int(d.get("replicas", replica_sets.REPLICAS_DEFAULT)),
                      scopes.from_json(d.get("scopes")), tuple(d.get("failovers", ())),
                      int(d.get("per_dc", 0)))


def set_per_dc(zk: KazooClient, per_dc: int, version: int) -> None:
    """Record the cluster's copies-per-dc (checked by the caller: replica_sets.check_per_dc)
    in the key-value topology read at `version`; BadVersionError when it changed since."""
    data, _ = zk.get(KV)
    d = json.loads(data)
    d["per_dc"] = per_dc
    zk.set(KV, json.dumps(d).encode(), version=version)


def add_scope(zk: KazooClient, dc: str, count: int, logs: list[int], homes: dict[int, str],
              used: Callable[[], tuple[list[tuple[str, int, int]], int]]) -> KvTopology:
    """Lay out local scope `dc` (catalog/scopes.py add): `count` shards from the top of
    global's, carried by `logs`. `used()`: (name, first shard, count) of every dataset
    and the version of DATASETS it read them at. Written in one transaction with a check
    that no dataset was created since (a creation bumps DATASETS and checks the
    topology's version: catalog/datasets.py create), retried when either changed.
    ScopeError naming the argument when it cannot be done."""
    def add(kv: KvTopology, tx: Any) -> scopes.Layout:
        ranges, datasets_version = used()
        tx.check(DATASETS, datasets_version)
        return scopes.add(kv.scopes, dc, count, logs, kv.shards, read_log_map(zk, kv).logs, homes, ranges)
    return _new_layout(zk, add)


def grow_scope(zk: KazooClient, dc: str, logs: list[int], homes: dict[int, str]) -> KvTopology:
    """Scope `dc` carried by `logs` too (catalog/scopes.py more_logs). ScopeError naming
    the argument when it cannot be done."""
    return _new_layout(zk, lambda kv, _: scopes.more_logs(kv.scopes, dc, logs, read_log_map(zk, kv).logs,
                                                          homes))


def remove_scope(zk: KazooClient, dc: str, used: Callable[[], tuple[list[tuple[str, int, int]], int]]
                 ) -> tuple[KvTopology, scopes.Scope]:
    """Give local scope `dc`'s shards and logs back to global (catalog/scopes.py remove),
    its logs' homes and preferences cleared (they carry global's shards from now on, which
    survive a data center's loss), in one transaction with a check that no dataset was
    created since `used()` read them. ScopeError naming the argument when it cannot be
    done. The topology after it, and the scope as it was."""
    gone: list[scopes.Scope] = []

    def remove(kv: KvTopology, tx: Any) -> scopes.Layout:
        ranges, datasets_version = used()
        tx.check(DATASETS, datasets_version)
        layout = scopes.remove(kv.scopes, dc, kv.shards, ranges)
        s = scopes.find(kv.scopes, dc)
        assert s is not None  # (remove found it)
        gone[:] = [s]
        path, body, version = zkpaths.homes_moved(zk, s.logs, "")
        tx.set_data(path, body, version=version)
        return layout
    return _new_layout(zk, remove), gone[0]


def _new_layout(zk: KazooClient, change: Callable[[KvTopology, Any], scopes.Layout]) -> KvTopology:
    """The scopes' layout `change(topology, transaction)` makes, written in one transaction
    with what it adds to it, made again from fresh reads when anything changed meanwhile."""
    while True:
        try:
            data, stat = zk.get(KV)
        except NoNodeError:
            raise scopes.ScopeError("no key-value topology in this cluster (midtown cluster init)") from None
        d = json.loads(data)
        kv = _kv_of(d)
        tx = zk.transaction()
        layout = change(kv, tx)
        d["scopes"] = scopes.to_json(layout)
        tx.set_data(KV, json.dumps(d).encode(), version=stat.version)
        try:
            commit(tx)
        except BadVersionError:
            continue
        return replace(kv, scopes=layout)


def fail_over(zk: KazooClient, version: int, plan: failover.Plan, at_ms: int,
              log_writes: Sequence[zkpaths.Write], hold: str) -> None:
    """Write a fail-over (catalog/failover.py) in one transaction: the key-value topology
    (read at `version`) with the scope kept in its new home and the plan recorded, the log
    service's writes (its logs cut, their home moved: log/zk.py cut_writes, homes_moved),
    and its hold taken away (`hold`: hold_replicas). BadVersionError when anything changed
    since it was read; NoNodeError when the hold is gone (its session expired: a replica
    may have moved on since it said where it stands)."""
    data, stat = zk.get(KV)
    if stat.version != version:
        raise BadVersionError()
    d = json.loads(data)
    kv = _kv_of(d)
    d["scopes"] = scopes.to_json(scopes.moved(kv.scopes, plan.scope, plan.to))
    d["failovers"] = [*kv.failovers, failover.record(plan, at_ms, hold)]
    tx = zk.transaction()
    tx.delete(hold)
    tx.set_data(KV, json.dumps(d).encode(), version=version)
    for path, body, v in log_writes:
        tx.set_data(path, body, version=v)
    commit(tx)


def hold_replicas(zk: KazooClient, logs: Sequence[int]) -> str:
    """A fail-over's hold on the replicas of `logs` (ephemeral, this session's): the path a
    Status request names, after which a node applies none of them past where it said it
    stands until the node is gone (storage_node/holds.py). Its transaction deletes it; a
    driver that stops, or whose session ends, lets them go on."""
    zk.ensure_path(HOLDS)
    return str(zk.create(f"{HOLDS}/hold-", json.dumps({"logs": sorted(logs)}).encode(),
                         ephemeral=True, sequence=True))


def release_hold(zk: KazooClient, hold: str) -> None:
    """A fail-over given up: its replicas go on."""
    try:
        zk.delete(hold)
    except NoNodeError:
        pass


def holds(zk: KazooClient) -> dict[str, list[int]]:
    """The fail-overs' holds standing now: path -> the logs held."""
    try:
        names = zk.get_children(HOLDS)
    except NoNodeError:
        return {}
    out = {}
    for c in names:
        try:
            data, _ = zk.get(f"{HOLDS}/{c}")
        except NoNodeError:
            continue
        out[f"{HOLDS}/{c}"] = [int(lg) for lg in json.loads(data)["logs"]]
    return out


def is_hold(path: str) -> bool:
    """Whether `path` names a fail-over's hold (hold_replicas)."""
    name = path.removeprefix(HOLDS + "/")
    return name != path and name.startswith("hold-") and name[5:].isdigit()


def hold_stands(zk: KazooClient, hold: str) -> bool:
    return zk.exists(hold) is not None


def pardon(zk: KazooClient, node_id: int) -> None:
    """Take storage node `node_id` off the fail-overs' condemned lists: it took its copy
    from a source (storage_node/node.py). A versioned write, retried when another won."""
    while True:
        data, stat = zk.get(KV)
        d = json.loads(data)
        kv = _kv_of(d)
        if node_id not in failover.condemned(kv.failovers):
            return
        d["failovers"] = failover.pardoned(kv.failovers, node_id)
        try:
            zk.set(KV, json.dumps(d).encode(), version=stat.version)
            return
        except BadVersionError:
            continue


def read_replica_sets(zk: KazooClient, kv: KvTopology) -> ReplicaSets:
    """Each shard's replica set as ZooKeeper holds it; every member holds every shard when
    none is written (`kv`'s members)."""
    try:
        data, stat = zk.get(REPLICA_SETS)
    except NoNodeError:
        return replica_sets.everyone(kv.shards, kv.storage_nodes)
    return replica_sets.from_json(json.loads(data), stat.version)


def watch_replica_sets(zk: KazooClient, seen: Callable[[ReplicaSets], None]) -> None:
    """Call `seen` with the replica sets each time ZooKeeper's change (and after a session
    is re-established: kazoo's DataWatch reads again); nothing while none are written. The
    znode is never deleted, so its version only grows: a reader keeps the newest it saw."""

    def changed(data: bytes | None, stat: Any) -> None:
        if data is not None and stat is not None:
            seen(replica_sets.from_json(json.loads(data), stat.version))

    zk.DataWatch(REPLICA_SETS, changed)


def watch_kv(zk: KazooClient, seen: Callable[[KvTopology], None]) -> None:
    """Call `seen` with the key-value topology each time ZooKeeper's changes (and after a
    session is re-established)."""

    def changed(data: bytes | None, stat: Any) -> None:
        if data is not None:
            seen(_kv_of(json.loads(data)))

    zk.DataWatch(KV, changed)


def read_log_map(zk: KazooClient, kv: KvTopology, log_count: int | None = None) -> LogMap:
    """Which log carries each shard (catalog/log_map.py), as ZooKeeper holds it; when none
    is written, shard mod the key-value logs (`kv.logs`, at most the log service's
    `log_count`)."""
    try:
        data, stat = zk.get(LOG_MAP)
    except NoNodeError:
        return log_map.first(kv.shards, min(kv.logs, log_count or kv.logs))
    m = log_map.from_json(json.loads(data), stat.version)
    if len(m.of) != kv.shards:
        raise ValueError(f"log map: of: names the logs of {len(m.of)} shards, the cluster has {kv.shards}")
    return m


def write_log_map(zk: KazooClient, m: LogMap, why: str) -> None:
    """Write `m` over the version it was read at (-1: none written yet) and its history
    entry, in one transaction: BadVersionError/NodeExistsError when another change came
    first, and nothing is written."""
    _write_versioned(zk, LOG_MAP, LOG_MAP_HISTORY, log_map.to_json(m),
                     None if m.version < 0 else m.version, why)


def add_kv_logs(zk: KazooClient, n: int, service_logs: int) -> LogMap:
    """Give the key-value store `n` more of the log service's `service_logs` logs (no shard
    on them until one is handed over): the map written over the version read, with the
    topology's count, in one transaction (BadVersionError when another change came
    first; ValueError naming N when there are not so many). Returns the map written."""
    kv = read_kv(zk)
    if kv is None:
        raise ValueError("no key-value topology in this cluster: run `midtown cluster init`")
    m = read_log_map(zk, kv, service_logs)
    grown = log_map.with_more_logs(m, n, service_logs)
    data, stat = zk.get(KV)
    kv_json = {**json.loads(data), "logs": grown.logs}

    lease = zkpaths.leased_update(zk, grown.logs)

    def topology(tx: Any) -> None:  # with the log's lease for the logs added (log/zk.py Topology)
        tx.set_data(KV, json.dumps(kv_json).encode(), version=stat.version)
        if lease is not None:
            tx.set_data(zkpaths.TOPOLOGY, lease[0], version=lease[1])
    _write_versioned(zk, LOG_MAP, LOG_MAP_HISTORY, log_map.to_json(grown),
                     None if m.version < 0 else m.version,
                     f"{n} key-value log(s) added: {m.logs} -> {grown.logs}", topology)
    return read_log_map(zk, kv, service_logs)


class Conflict(Exception):
    """A change of the shard -> log map that cannot be made as asked (its text says why)."""


def begin_handoff(zk: KazooClient, m: LogMap, h: log_map.Handing) -> LogMap:
    """Record a hand-off's beginning (docs/log.md step 7) over the map `m` was read at:
    the map with `h` under way; the same if it is there already. Conflict while a move of
    the shard is under way (the write bumps the shard's move record too, so a move that
    starts meanwhile, or began since, fails one of the two writes); BadVersionError when
    the map changed meanwhile."""
    kv = read_kv(zk)
    assert kv is not None
    path = f"{MOVES}/{h.shard}"
    zk.ensure_path(MOVES)
    try:
        data, stat = zk.get(path)
    except NoNodeError:
        data, stat = ENDED, None
    if data != ENDED:
        raise Conflict(f"SHARD: shard {h.shard} is being moved to another storage node; hand it over "
                       "once the move ends")
    now = read_log_map(zk, kv)
    if now.handing_of(h.shard) == h:
        return now
    if now.version != m.version or now.handing_of(h.shard) is not None or now.of[h.shard] != h.old:
        raise BadVersionError("the shard -> log map changed")

    def touch_move(tx: Any) -> None:
        if stat is None:
            tx.create(path, ENDED)
        else:
            tx.set_data(path, ENDED, version=stat.version)
    begun = log_map.LogMap(m.logs, m.of, m.version, m.handoffs, m.origins, (*m.handing, h))
    _write_versioned(zk, LOG_MAP, LOG_MAP_HISTORY, log_map.to_json(begun),
                     None if m.version < 0 else m.version,
                     f"shard {h.shard}: hand-off from log {h.old} to log {h.new} begun", touch_move)
    return read_log_map(zk, kv)


def note_handoff_record(zk: KazooClient, kv: KvTopology, h: log_map.Handing) -> LogMap:
    """Record where the hand-off's record is (h.at, h.ts, h.start) in the hand-off under
    way, so a driver that takes it up needs not read the old log again."""
    m = read_log_map(zk, kv)
    cur = m.handing_of(h.shard)
    if cur is None or cur.at >= 0:
        return m
    if (cur.old, cur.new) != (h.old, h.new):
        raise Conflict(f"SHARD: shard {h.shard} is being handed to log {cur.new}, not {h.new}")
    noted = log_map.LogMap(m.logs, m.of, m.version, m.handoffs, m.origins,
                           tuple(h if x.shard == h.shard else x for x in m.handing))
    _write_versioned(zk, LOG_MAP, LOG_MAP_HISTORY, log_map.to_json(noted), m.version,
                     f"shard {h.shard}: its hand-off record is at {h.at} of log {h.old}")
    return read_log_map(zk, kv)


def finish_handoff(zk: KazooClient, kv: KvTopology, done: log_map.Handoff) -> LogMap:
    """Record a hand-off done: the shard in its new log, with `done` (the map as it is if
    another driver recorded it first)."""
    m = read_log_map(zk, kv)
    if m.handing_of(done.shard) is None:
        if m.of[done.shard] == done.new:
            return m
        raise Conflict(f"SHARD: shard {done.shard} has no hand-off under way to log {done.new}")
    of = tuple(done.new if s == done.shard else x for s, x in enumerate(m.of))
    handoffs = (*(x for x in m.handoffs if x.shard != done.shard), done)
    finished = log_map.LogMap(m.logs, of, m.version, handoffs, m.origins or m.of,
                              tuple(x for x in m.handing if x.shard != done.shard))
    _write_versioned(zk, LOG_MAP, LOG_MAP_HISTORY, log_map.to_json(finished), m.version,
                     f"shard {done.shard}: handed from log {done.old} (at {done.at}) to log {done.new} "
                     f"(from {done.start})")
    return read_log_map(zk, kv)


def log_map_history(zk: KazooClient) -> list[dict[str, Any]]:
    """Every version of the shard -> log map written, oldest first, with when and why."""
    return _history(zk, LOG_MAP_HISTORY)


def place(zk: KazooClient, kv: KvTopology, why: str, joining: int = 0) -> ReplicaSets:
    """The replica sets, written first if none are and the members are more than
    `kv.replicas`, with `joining` about to join (replica_sets.first_sets: the shards spread
    over the members, R copies each). A cluster of R members or fewer, where every member
    holds every shard, writes none until it grows past R: `add_storage_node` places its
    shards on the members it had first, so the new one starts with none, and `midtown
    cluster rebalance` moves some onto it. A cluster made before replica sets with more
    members than R is placed the same way: each node keeps R/N of the shards it held and
    drops the rest."""
    sets = read_replica_sets(zk, kv)
    if sets.version >= 0:
        return sets
    try:
        first = replica_sets.first_sets(kv.shards, kv.storage_nodes, kv.replicas, joining,
                                        *placement_rule(zk), per_dc=kv.per_dc)
    except PlacementError:
        # The members so far cannot hold R copies on distinct machines (machines still
        # joining): every member keeps every shard until they can (cluster rebalance).
        return sets
    if first is None:
        return sets
    try:
        _write_sets(zk, first, None, why)
    except NodeExistsError:
        pass  # placed by another change first
    return read_replica_sets(zk, kv)


def replica_sets_history(zk: KazooClient) -> list[dict[str, Any]]:
    """Every version of the replica sets written, oldest first, with when and why."""
    return _history(zk, REPLICA_SETS_HISTORY)


def _history(zk: KazooClient, path: str) -> list[dict[str, Any]]:
    try:
        names = sorted(zk.get_children(path))
    except NoNodeError:
        return []
    out = []
    for n in names:
        try:
            data, _ = zk.get(f"{path}/{n}")
        except NoNodeError:
            continue
        out.append(json.loads(data))
    return out


def _write_sets(zk: KazooClient, sets: ReplicaSets, version: int | None, why: str,
                move: tuple[Move, int | None] | None = None) -> None:
    """Write `sets` (a versioned write over `version`; None: create) and its history entry
    in one ZooKeeper transaction, with a move's new state (its record's version; the
    record marked ENDED when the move is done): BadVersionError/NodeExistsError when
    another change came first, and nothing is written."""
    def more(tx: Any) -> None:
        if move is not None:
            m, move_version = move
            tx.set_data(f"{MOVES}/{m.shard}", ENDED if m.phase == shard_moves.DONE else _move_json(m),
                        version=move_version if move_version is not None else -1)
    _write_versioned(zk, REPLICA_SETS, REPLICA_SETS_HISTORY, replica_sets.to_json(sets), version, why, more)


def _write_versioned(zk: KazooClient, path: str, history: str, body: dict[str, Any], version: int | None,
                     why: str, more: Callable[[Any], None] | None = None) -> None:
    """Write `body` at `path` over `version` (None: create it) and its entry in `history`,
    with `more`'s operations, in one transaction (_commit)."""
    data = json.dumps(body).encode()
    zk.ensure_path(history)
    tx = zk.transaction()
    if version is None:
        tx.create(path, data)
    else:
        tx.set_data(path, data, version=version)
    entry = {"version": 0 if version is None else version + 1, "at_ms": world.wall_ms(), "why": why, **body}
    tx.create(f"{history}/change-", json.dumps(entry).encode(), sequence=True)
    if more is not None:
        more(tx)
    commit(tx)


def commit(tx: Any) -> None:
    """Commit a transaction; raise why it failed. ZooKeeper answers a failed multi with an
    error for every op: RolledBackError for those before the one that failed,
    RuntimeInconsistency after it, and the cause (BadVersionError, NodeExistsError,
    NoNodeError) at it: the cause is raised, which callers catch (a move's record changed
    by another mover fails a change of the sets at its third op, and once came out of
    `midtown shard move` as a RolledBackError)."""
    results = tx.commit()
    errors = [r for r in results if isinstance(r, Exception)]
    if errors:
        causes = [e for e in errors if not isinstance(e, RolledBackError | RuntimeInconsistency)]
        raise (causes or errors)[0]


def mark_published(zk: KazooClient, node_id: int) -> None:
    """Record, once and for good, that storage node `node_id` publishes positions."""
    zk.ensure_path(f"{PUBLISHED}/{node_id}")


def has_published(zk: KazooClient, node_id: int) -> bool:
    return zk.exists(f"{PUBLISHED}/{node_id}") is not None


# ---------------------------------------------------------------- shard moves
# A shard's move record once its move ended (done or given up). The record stays, so its
# version only grows from one move of the shard to the next: a mover paused past its session
# that wakes with the version it read of a move since ended cannot write over the shard's
# next move (a deleted and recreated record starts again at version 0, and its stale write
# of "copied" had a finished move's destination join the next move and its leaving replica
# go: the shard was left with two replicas; the whole-cluster simulation's seed 1014).
ENDED = b"null"


def _move_json(m: Move) -> bytes:
    return json.dumps({"shard": m.shard, "dest": m.dest, "leaving": m.leaving, "phase": m.phase,
                       "copied_at": m.copied_at}).encode()


def read_moves(zk: KazooClient) -> dict[int, tuple[Move, int]]:
    """Every shard move under way: shard -> (the move, its record's version)."""
    out: dict[int, tuple[Move, int]] = {}
    for shard, (d, version) in numbered_children(zk, MOVES).items():
        if d is None:
            continue  # ENDED
        try:
            leaving, copied_at = d["leaving"], d["copied_at"]
            out[shard] = (Move(int(d["shard"]), int(d["dest"]), None if leaving is None else int(leaving),
                               str(d["phase"]), None if copied_at is None else int(copied_at)), version)
        except (ValueError, KeyError, TypeError):
            continue  # not ours
    return out


def start_move(zk: KazooClient, m: Move, sets_version: int) -> None:
    """Record a new move, planned on the replica sets of `sets_version` (NodeExistsError:
    the shard has one under way already; BadVersionError: the sets changed since, and the
    move may make no sense now: another mover may have just put its destination in, or
    a move of the shard began and ended since the caller looked, or the shard -> log map
    changed; Conflict: the shard is being handed over to another log)."""
    zk.ensure_path(MOVES)
    path = f"{MOVES}/{m.shard}"
    tx = zk.transaction()
    tx.check(REPLICA_SETS, sets_version)
    try:
        data, stat = zk.get(path)
    except NoNodeError:  # the shard's first move
        tx.create(path, _move_json(m))
    else:
        if data != ENDED:
            raise NodeExistsError(f"{path}: a move is under way")
        tx.set_data(path, _move_json(m), version=stat.version)
    # Read after the move's record: a hand-off begun since bumped that record (begin_handoff)
    try:
        raw, mstat = zk.get(LOG_MAP)
    except NoNodeError:
        pass
    else:
        if any(h.get("shard") == m.shard for h in json.loads(raw).get("handing", [])):
            raise Conflict(f"SHARD: shard {m.shard} is being handed over to another log; move it once "
                           "the hand-off ends")
        tx.check(LOG_MAP, mstat.version)
    commit(tx)


def update_move(zk: KazooClient, m: Move, version: int) -> None:
    """A move's new phase, over `version` (BadVersionError: another mover changed it)."""
    zk.set(f"{MOVES}/{m.shard}", _move_json(m), version=version)


def drop_move(zk: KazooClient, shard: int, version: int) -> None:
    """Give a move up (only before it joined: the replica sets never changed)."""
    zk.set(f"{MOVES}/{shard}", ENDED, version=version)


def change_sets(zk: KazooClient, sets: ReplicaSets, why: str, move: tuple[Move, int]) -> None:
    """Replace the replica sets (a versioned write over `sets.version`, which must be one
    read from ZooKeeper) and advance a move, together."""
    if sets.version < 0:
        raise ValueError("replica sets: this cluster has none written (every member holds every shard)")
    _write_sets(zk, sets, sets.version, why, move)


def remove_storage_node(zk: KazooClient, node_id: int) -> KvTopology:
    """Take a storage node out of the membership (versioned write): logs are no longer held
    back for it. Started again, it bootstraps from a peer (its data is behind)."""
    def change(members: list[int]) -> list[int]:
        if node_id not in members:
            raise ValueError(f"ID: storage node {node_id} is not a member")
        if len(members) <= 1:
            raise ValueError("ID: the last storage node cannot be removed")
        held = _held_by(zk, node_id)
        if held:
            raise ValueError(f"ID: storage node {node_id} still holds {held} shards (replica sets); "
                             "it can leave once they are on other nodes")
        return [n for n in members if n != node_id]
    return _change_members(zk, change)


def _held_by(zk: KazooClient, node_id: int) -> int:
    """Shards in `node_id`'s replica sets, when replica sets are written (0 otherwise)."""
    try:
        data, stat = zk.get(REPLICA_SETS)
    except NoNodeError:
        return 0
    return len(replica_sets.from_json(json.loads(data), stat.version).shards_of(node_id))


def add_storage_node(zk: KazooClient, node_id: int) -> KvTopology:
    """Make a storage node a member (versioned write): it answers for its shards, and the
    logs are held back for it from now on, until it reports its positions. With R members
    or fewer and no replica sets, it holds every shard (it bootstraps a copy from a peer);
    past R, it holds none until shards move onto it (place)."""
    def change(members: list[int]) -> list[int]:
        if node_id in members:
            raise ValueError(f"ID: storage node {node_id} is a member already")
        return sorted([*members, node_id])
    kv = read_kv(zk)
    if kv is not None and node_id not in kv.storage_nodes:
        # Growing past R: the shards stay on the members that hold them now (placed on R of
        # them, if not yet), and the new one holds none until shards are moved onto it.
        place(zk, kv, f"placed before storage node {node_id} joined", joining=1)
    return _change_members(zk, change)


def _change_members(zk: KazooClient, change: Callable[[list[int]], list[int]]) -> KvTopology:
    while True:
        try:
            data, stat = zk.get(KV)
        except NoNodeError:
            raise ValueError("no key-value topology in this cluster (midtown cluster init)") from None
        d = json.loads(data)
        d["storage_nodes"] = change(list(d["storage_nodes"]))
        try:
            zk.set(KV, json.dumps(d).encode(), version=stat.version)
        except BadVersionError:
            continue
        t = read_kv(zk)
        assert t is not None
        return t


def register(zk: KazooClient, parent: str, member_id: int, addr: str, **more: str) -> Membership:
    """Register a member under `parent` for as long as the process lives: registered again
    whenever a lost ZooKeeper session took the ephemeral node away (runtime/membership.py).
    `more`: other fields of its entry (a coordinator's "log")."""
    m = Membership(zk, f"{parent}/{member_id}", lambda: {"addr": addr, **more})
    m.start()
    return m

