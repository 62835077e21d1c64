"""The log's ZooKeeper layout and the few operations on it (a thin shell over kazoo).

  /midtown/topology                 {"logs": N, "log_servers": [ids],          persistent
                                     "leased_below": K, "homes": {"<log>": "<dc>"}}: logs
                                    0..K-1 keep a read lease and mark idle time (log/lease.py,
                                    Writer.time_marks); a log named in homes is kept in that
                                    data center (log/homes.py)
  /midtown/log_servers/<id>         {"addr": "host:port", "pid": n}          ephemeral
  /midtown/logs/<log>               LogMetadata JSON (epoch, segments)       versioned writes only
  /midtown/logs/<log>/writer        {"server": id, "addr": ..., "epoch": e}  ephemeral
  /midtown/logs/<log>/truncate      {"before": p}                            versioned writes only
  /midtown/logs/<log>/seals         {"<shard>": {"generation": g, "to": log   versioned writes only
                                    or -1 (open)}, ...} (log/seals.py; absent: none ever handed over)
  /midtown/log_servers_leaving/<id> (empty)                                  persistent
  /midtown/log_stores/<id>          the identity of server <id>'s replica store persistent

The topology's `log_servers` is the pool that ensembles are chosen from (`midtown
log-server add` grows it, with a versioned write); a server under `log_servers_leaving` is
being decommissioned: no new segment is opened on it, it writes no log, and its segments
are copied off (log/rereplicator.py) before it leaves the pool.

ZooKeeper holds only this small metadata; entries never pass through it."""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from fleet import machines
from fleet.connect import (  # noqa: F401 (the log's servers connect so)
    CONNECT_TIMEOUT_S,
    SERVER_PATIENCE_S,
    STALE_READ_WAIT_S,
    bounded,
    connect,
)
from log import homes, limits
from log.metadata import LogMetadata
from log.seals import Stint
from runtime import membership

ROOT = "/midtown"
TOPOLOGY = f"{ROOT}/topology"
SERVERS = f"{ROOT}/log_servers"
LOGS = f"{ROOT}/logs"
LEAVING = f"{ROOT}/log_servers_leaving"
STORES = f"{ROOT}/log_stores"  # log/store_identity.py


def log_path(log_id: int) -> str:
    return f"{LOGS}/{log_id}"


def writer_path(log_id: int) -> str:
    return f"{LOGS}/{log_id}/writer"


def truncate_path(log_id: int) -> str:
    return f"{LOGS}/{log_id}/truncate"


@dataclass(frozen=True)
class Topology:
    logs: int
    log_servers: tuple[int, ...]
    # Logs below this keep a read lease and mark idle time: the log's own setting, which
    # its users ask for (the key-value store, for its logs: catalog/registry.py).
    leased_below: int = 0
    # Each log's home data center (log/homes.py), as (log, dc) pairs; a log missing has none.
    homes: tuple[tuple[int, str], ...] = ()
    # Each log's preferred data center for its writer (log/homes.py rank), as (log, dc).
    prefers: tuple[tuple[int, str], ...] = ()

    @property
    def home_map(self) -> dict[int, str]:
        return dict(self.homes)

    @property
    def prefer_map(self) -> dict[int, str]:
        return dict(self.prefers)

    def preferred_rank(self, log_id: int, server_id: int) -> int:
        """0 for the server that should write `log_id` (spreading writers), then 1, 2..."""
        n = len(self.log_servers)
        i = self.log_servers.index(server_id)
        return (i - log_id) % n


def create_cluster(zk: KazooClient, logs: int, log_servers: list[int], leased_below: int = 0) -> Topology:
    """Create the topology and every log's metadata, or return what exists already; logs
    below `leased_below` keep a read lease and mark idle time."""
    if not 1 <= logs <= limits.LOGS_MAX:
        raise ValueError(f"logs: must be between 1 and {limits.LOGS_MAX}")
    if 0 < len(log_servers) < limits.ENSEMBLE_SIZE:  # none: they join by `machine up`
        raise ValueError(f"log_servers: need at least {limits.ENSEMBLE_SIZE}")
    zk.ensure_path(SERVERS)
    zk.ensure_path(LEAVING)
    zk.ensure_path(LOGS)
    try:
        zk.create(TOPOLOGY, json.dumps({"logs": logs, "log_servers": log_servers,
                                        "leased_below": leased_below}).encode())
    except NodeExistsError:
        pass
    topo = read_topology(zk)
    assert topo is not None
    for log_id in range(topo.logs):
        try:
            zk.create(log_path(log_id), LogMetadata(log_id, epoch=0).to_json())
        except NodeExistsError:
            pass
        try:
            zk.create(truncate_path(log_id), b'{"before": 0}')
        except NodeExistsError:
            pass
    return topo


def read_topology(zk: KazooClient) -> Topology | None:
    try:
        data, _ = zk.get(TOPOLOGY)
    except NoNodeError:
        return None
    return _topology(json.loads(data))


def _topology(d: dict[str, Any]) -> Topology:
    return Topology(d["logs"], tuple(d["log_servers"]), int(d.get("leased_below", 0)),
                    tuple(sorted((int(k), str(v)) for k, v in d.get("homes", {}).items())),
                    tuple(sorted((int(k), str(v)) for k, v in d.get("prefers", {}).items())))


def leased_update(zk: KazooClient, below: int) -> tuple[bytes, int] | None:
    """For a user of the log that needs logs below `below` leased (the key-value catalog):
    the topology's data with them leased and the version it was read at, to write in the
    user's own transaction; None when they are already (or there is no topology yet)."""
    try:
        data, stat = zk.get(TOPOLOGY)
    except NoNodeError:
        return None
    d = json.loads(data)
    if int(d.get("leased_below", 0)) >= below:
        return None
    return json.dumps({**d, "leased_below": below}).encode(), stat.version


def change_pool(zk: KazooClient, add: int | None = None, remove: int | None = None) -> Topology:
    """Add a server id to the pool or remove one, by a versioned write of the topology
    (retried when another change won); the topology in force after it."""
    while True:
        data, stat = zk.get(TOPOLOGY)
        d = json.loads(data)
        pool = [s for s in d["log_servers"] if s != remove]
        if add is not None and add not in pool:
            pool.append(add)
        if pool == d["log_servers"]:
            return _topology(d)
        try:
            zk.set(TOPOLOGY, json.dumps({**d, "log_servers": pool}).encode(), version=stat.version)
            return _topology({**d, "log_servers": pool})
        except BadVersionError:
            continue


def set_home(zk: KazooClient, log_id: int, dc: str) -> dict[int, str]:
    """Give log `log_id` the home `dc` ("": none), by a versioned write of the topology
    (retried when another change won), once log/homes.py check_home allows it (ValueError
    naming the argument if not). The homes in force after it. The servers read the
    topology every few seconds (log/node.py topology_round) and when they claim a log."""
    topo = read_topology(zk)
    if topo is None:
        raise ValueError("no log topology in this cluster: run `midtown cluster init`")
    pool = [s for s in topo.log_servers if s not in leaving(zk)]
    wrong = homes.check_home(log_id, dc, topo.logs, pool, machines.domains(zk, machines.LOG_SERVERS),
                             machines.one_machine(zk))
    if wrong:
        raise ValueError(wrong)
    return _set_dc(zk, "homes", log_id, dc)


def set_prefer(zk: KazooClient, log_id: int, dc: str) -> dict[int, str]:
    """Prefer data center `dc` ("": none) for log `log_id`'s writer (log/homes.py rank: its
    servers claim the log first, and a writer elsewhere gives it up while one of them is
    up), by a versioned write of the topology, once log/homes.py check_prefer allows it
    (ValueError naming the argument if not). The preferences in force after it."""
    topo = read_topology(zk)
    if topo is None:
        raise ValueError("no log topology in this cluster: run `midtown cluster init`")
    pool = [s for s in topo.log_servers if s not in leaving(zk)]
    wrong = homes.check_prefer(log_id, dc, topo.logs, pool, machines.domains(zk, machines.LOG_SERVERS),
                               topo.home_map)
    if wrong:
        raise ValueError(wrong)
    return _set_dc(zk, "prefers", log_id, dc)


def _with_dc(d: dict[str, Any], key: str, logs: Collection[int], dc: str) -> dict[int, str]:
    """The topology's map `key` (log -> data center) with `logs` set to `dc` (removed when
    ""), written into `d`; the map."""
    now = {int(k): str(v) for k, v in d.get(key, {}).items() if int(k) not in logs}
    now.update({lg: dc for lg in logs if dc})
    d[key] = {str(k): v for k, v in sorted(now.items())}
    return now


def _set_dc(zk: KazooClient, key: str, log_id: int, dc: str) -> dict[int, str]:
    """The topology's map `key` (log -> data center) with `log_id`'s set to `dc` (removed
    when ""), by a versioned write retried when another change won; the map after it."""
    while True:
        data, stat = zk.get(TOPOLOGY)
        d = json.loads(data)
        now = _with_dc(d, key, (log_id,), dc)
        try:
            zk.set(TOPOLOGY, json.dumps(d).encode(), version=stat.version)
            return now
        except BadVersionError:
            continue


# A write a caller makes in a transaction of its own: (path, new bytes, version read).
Write = tuple[str, bytes, int]


def homes_moved(zk: KazooClient, logs: Collection[int], dc: str) -> Write:
    """The topology with `logs` kept in `dc` and their preferences cleared (a fail-over:
    catalog/failover.py), as a write for a transaction."""
    data, stat = zk.get(TOPOLOGY)
    d = json.loads(data)
    _with_dc(d, "homes", logs, dc)
    _with_dc(d, "prefers", logs, "")
    return TOPOLOGY, json.dumps(d).encode(), stat.version


def cut_writes(zk: KazooClient, meta: LogMetadata, version: int, end: int, last_ts: int) -> list[Write]:
    """A log cut at `end` (log/metadata.py cut; the segments wholly below it go too: nobody
    reads them from servers that are gone) and its truncation point raised past it, as
    writes for a transaction; `meta` as read at `version`."""
    new = meta.cut(end, last_ts).without_segments_below(end + 1)
    body, tv = _truncation(zk, meta.log_id)
    body["before"] = max(int(body["before"]), end + 1)
    if not body["holds"]:
        del body["holds"]
    return [(log_path(meta.log_id), new.to_json(), version),
            (truncate_path(meta.log_id), json.dumps(body).encode(), tv)]


def leaving(zk: KazooClient) -> set[int]:
    """The log servers being decommissioned."""
    try:
        return {int(c) for c in zk.get_children(LEAVING)}
    except NoNodeError:
        return set()


def set_leaving(zk: KazooClient, server_id: int, on: bool) -> None:
    path = f"{LEAVING}/{server_id}"
    if on:
        zk.ensure_path(path)
    else:
        try:
            zk.delete(path)
        except NoNodeError:
            pass


def read_metadata(zk: KazooClient, log_id: int) -> tuple[LogMetadata, int]:
    data, stat = zk.get(log_path(log_id))
    return LogMetadata.from_json(data), stat.version


def cas_metadata(zk: KazooClient, meta: LogMetadata, version: int) -> int | None:
    """Versioned write: the new version, or None when someone else wrote first."""
    try:
        stat = zk.set(log_path(meta.log_id), meta.to_json(), version=version)
    except (BadVersionError, NoNodeError):
        return None
    return int(stat.version)


def read_writer(zk: KazooClient, log_id: int) -> dict | None:
    try:
        data, _ = zk.get(writer_path(log_id))
    except NoNodeError:
        return None
    return json.loads(data)  # type: ignore[no-any-return]


def writer_is_live(zk: KazooClient, log_id: int) -> bool:
    """The log has a writer that finished recovery and whose node belongs to the live
    session of a registered server (not a leftover of a server that died)."""
    try:
        data, stat = zk.get(writer_path(log_id))
        w = json.loads(data)
        if w.get("state") != "writing":
            return False
        _, reg = zk.get(f"{SERVERS}/{w['server']}")
    except NoNodeError:
        return False
    return bool(stat.ephemeralOwner == reg.ephemeralOwner)


def read_truncation(zk: KazooClient, log_id: int) -> tuple[int, int]:
    data, stat = zk.get(truncate_path(log_id))
    return int(json.loads(data)["before"]), stat.version


def _truncation(zk: KazooClient, log_id: int) -> tuple[dict[str, Any], int]:
    data, stat = zk.get(truncate_path(log_id))
    body = json.loads(data)
    body.setdefault("holds", {})
    return body, stat.version


def raise_truncation(zk: KazooClient, log_id: int, before: int) -> int:
    """Move the truncation point up to `before` (never down), but not past a hold
    (hold_truncation); returns the point in force."""
    while True:
        body, version = _truncation(zk, log_id)
        cur = int(body["before"])
        before = min(before, *body["holds"].values()) if body["holds"] else before
        if before <= cur:
            return cur
        body["before"] = before
        if not body["holds"]:
            del body["holds"]
        try:
            zk.set(truncate_path(log_id), json.dumps(body).encode(), version=version)
            return before
        except BadVersionError:
            continue


def hold_truncation(zk: KazooClient, log_id: int, name: str, at: int | None) -> int:
    """Keep the log's truncation point at or below `at` (None: release `name`'s hold)
    until released, by a versioned write on the point itself, so that no truncation that
    raced with it passes it: the hold is in force for every truncation ordered after it.
    Returns the truncation point in force when it was written (positions from
    max(point, at) on stay readable while it holds)."""
    while True:
        body, version = _truncation(zk, log_id)
        holds = body["holds"]
        if holds.get(name) == at or (at is None and name not in holds):
            return int(body["before"])
        if at is None:
            del holds[name]
        else:
            holds[name] = at
        if not holds:
            del body["holds"]
        try:
            zk.set(truncate_path(log_id), json.dumps(body).encode(), version=version)
            return int(body["before"])
        except BadVersionError:
            continue


def truncation_holds(zk: KazooClient, log_id: int) -> dict[str, int]:
    """The holds on a log's truncation point (hold_truncation): name -> position."""
    return dict(_truncation(zk, log_id)[0]["holds"])


def seals_path(log_id: int) -> str:
    return f"{log_path(log_id)}/seals"


def read_seals(zk: KazooClient, log_id: int) -> dict[int, Stint]:
    """The stints of the shards of `log_id` that were ever handed over (log/seals.py):
    shard -> its generation here, and the log it went to if it was handed away."""
    try:
        data, _ = zk.get(seals_path(log_id))
    except NoNodeError:
        return {}
    return _seals(data)


def _seals(data: bytes) -> dict[int, Stint]:
    return {int(s): Stint(int(st["generation"]), int(st["to"])) for s, st in json.loads(data).items()}


def change_seal(zk: KazooClient, log_id: int, shard: int, stint: Stint) -> dict[int, Stint]:
    """Write `shard`'s stint in `log_id`'s list (handed away to stint.to, or open at its
    generation), by a versioned write that retries on a race; returns the list as written."""
    path = seals_path(log_id)
    while True:
        try:
            data, stat = zk.get(path)
            sealed, version = _seals(data), stat.version
        except NoNodeError:
            sealed, version = {}, None
        sealed[shard] = stint
        body = json.dumps({str(s): {"generation": st.generation, "to": st.to}
                           for s, st in sorted(sealed.items())}).encode()
        try:
            if version is None:
                zk.create(path, body, makepath=True)
            else:
                zk.set(path, body, version=version)
            return sealed
        except (BadVersionError, NodeExistsError):
            continue


def servers(zk: KazooClient) -> dict[int, dict]:
    """Live log servers: id -> {"addr": "host:port"}."""
    return {i: {"addr": addr} for i, addr in membership.members(zk, SERVERS).items()}


def read_store_identity(zk: KazooClient, server_id: int) -> str | None:
    """The identity of the replica store server `server_id` runs on (log/store_identity.py)."""
    try:
        data, _ = zk.get(f"{STORES}/{server_id}")
    except NoNodeError:
        return None
    return data.decode()


def record_store_identity(zk: KazooClient, server_id: int, identity: str) -> str:
    """Record `identity` for `server_id` unless one is recorded; the one recorded."""
    try:
        zk.create(f"{STORES}/{server_id}", identity.encode(), makepath=True)
        return identity
    except NodeExistsError:
        return read_store_identity(zk, server_id) or identity


def forget_store_identity(zk: KazooClient, server_id: int) -> None:
    """A server decommissioned and added back: the id may start again on an empty store."""
    try:
        zk.delete(f"{STORES}/{server_id}")
    except NoNodeError:
        pass
