"""One machine's share of a cluster: `midtown machine up` starts N workers (default: one
per core, as a Python process does its work on one), each a host-layout process (a log
server, a storage node and a coordinator: coordinator/host.py), all saying they run on
this machine, and supervises them as `cluster up` does its processes.

A worker's id comes from ZooKeeper the first time it starts (a sequential node under
/midtown/ids: unique across machines, never numbered by hand) and is kept in its data
directory (DIR/worker-K/id), so a restarted worker is the same member. A new id joins
the log servers' pool and the storage nodes' membership at once; its shards come with
`midtown cluster rebalance`, as for any node added (docs/operations.md)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from catalog import registry
from cluster.ports import free_ports
from cluster.runner import Cluster, ClusterError, Proc
from fleet import failure_domains, machines
from fleet.failure_domains import Domain
from log import zk as zkpaths
from runtime import membership
from runtime.process import ZK_UNREACHABLE

IDS = "/midtown/ids"
ID_FILE = "id"
PORTS_PER_WORKER = 4  # coordinator, log server, storage node, metrics


def allocate_id(zk: Any) -> int:
    """A member id no server has had: the next of ZooKeeper's sequence under IDS, past the
    ids given by hand (`cluster init --log-servers`) or in use."""
    topo = zkpaths.read_topology(zk)
    kv = registry.read_kv(zk)
    taken = set(topo.log_servers if topo else ()) | set(kv.storage_nodes if kv else ())
    for role in machines.ROLES:
        taken |= set(machines.recorded(zk, role))
    while True:
        made = zk.create(f"{IDS}/id-", b"", sequence=True, makepath=True)
        zk.delete(made)  # the sequence lives in the parent; the node is not needed
        n = int(made.rsplit("-", 1)[1])
        if n not in taken:
            return n


def join(zk: Any, member_id: int) -> None:
    """Make a new id a log server of the pool and a storage node member."""
    zkpaths.change_pool(zk, add=member_id)
    kv = registry.read_kv(zk)
    if kv is None:
        raise ClusterError("no cluster in this ZooKeeper: run `midtown cluster init --by-machines` once")
    if member_id not in kv.storage_nodes:
        registry.add_storage_node(zk, member_id)


def worker_id(zk: Any, data: Path, domain: Domain) -> int:
    """The id of the worker whose data directory is `data`: the one it was given, or a new
    one (allocated, written to DATA/id, its machine recorded, then joined: a crash between
    leaves an id unused, never two workers with one; placement knows its machine before it
    is a member)."""
    f = data / ID_FILE
    if f.exists():
        return int(f.read_text().strip())
    data.mkdir(parents=True, exist_ok=True)
    n = allocate_id(zk)
    tmp = data / (ID_FILE + ".tmp")
    with open(tmp, "w") as out:
        out.write(f"{n}\n")
        out.flush()
        os.fsync(out.fileno())
    tmp.replace(f)
    machines.claim(zk, [(role, n) for role in machines.ROLES], domain)
    join(zk, n)
    return n


def workers_default() -> int:
    return len(os.sched_getaffinity(0)) or 1


def plan(dir: Path, zk_hosts: str, workers: int, machine: str, locality: str, host: str,
         advertise: str, base_port: int, tls: tuple[str, str, str] | None = None) -> Cluster:
    """The machine's workers as a Cluster of host processes joining `zk_hosts` (its state
    in DIR/cluster.json, for `cluster status --dir DIR`); ids allocated or read back.
    Ports: base_port + 4K .. + 4K + 3 for worker K (coordinator, log, storage, metrics);
    base_port 0: free ports. `tls`: the machine's (CA, certificate, key) for mutual TLS."""
    if workers < 1:
        raise ClusterError(f"--workers: {workers}, must be at least 1")
    domain = Domain(failure_domains.check_machine(machine), failure_domains.parse_locality(locality))
    dir.mkdir(parents=True, exist_ok=True)
    (dir / "logs").mkdir(exist_ok=True)
    c = Cluster(dir, layout="host", log_server_count=workers, storage_nodes=workers, zk_external=zk_hosts,
                tls=tls is not None, tls_files=list(tls or ()))
    zk = zkpaths.connect(zk_hosts)
    try:
        for k in range(workers):
            name = f"worker-{k}"
            ports = free_ports(PORTS_PER_WORKER) if base_port == 0 else \
                [base_port + PORTS_PER_WORKER * k + i for i in range(PORTS_PER_WORKER)]
            n = worker_id(zk, dir / name, domain)
            c.procs[name] = Proc(name, "host", ports[0], server_id=n, log_port=ports[1],
                                 storage_port=ports[2], metrics_port=ports[3], host=host, machine=machine,
                                 locality=locality,
                                 advertise=advertise if advertise != host else "")
    finally:
        zk.stop()
        zk.close()
    c.save()
    return c


def _registered(c: Cluster, zk: Any) -> tuple[str, bool]:
    """(how many of the workers' parts are registered, whether all are)."""
    ids = {p.server_id for p in c.procs.values()}
    topo = zkpaths.read_topology(zk)
    pool = set(topo.log_servers) if topo else set()
    logs = ids & pool & set(zkpaths.servers(zk))
    nodes = ids & set(membership.members(zk, registry.STORAGE_NODES))
    coords = ids & set(membership.members(zk, registry.COORDINATORS))
    return (f"workers up: log servers {len(logs)}/{len(ids & pool)}, storage nodes {len(nodes)}/{len(ids)}, "
            f"coordinators {len(coords)}/{len(ids)}"), logs == ids & pool and nodes == ids and coords == ids


def wait_workers(c: Cluster, timeout_s: float, say: Any = None) -> None:
    """Until every worker's storage node and coordinator are registered (and its log
    server, when it is in the pool)."""
    import time

    zk = zkpaths.connect(c.zk_hosts)
    try:
        deadline = time.monotonic() + timeout_s
        last = ""
        msg = "workers up: not known yet"
        while True:
            try:
                msg, done = _registered(c, zk)
            except ZK_UNREACHABLE:
                # ZooKeeper's connection lost a moment (as an ensemble on a loaded machine's
                # is; a test under load saw `machine up` end here): asked again until the deadline
                done = False
            else:
                if say is not None and msg != last:
                    say(msg)
                    last = msg
            if done:
                return
            for p in c.procs.values():
                if not c.running(p.name):
                    raise ClusterError(f"{p.name} (id {p.server_id}) exited with code {c.exit_code(p.name)}; "
                                       f"see {c.dir / 'logs' / (p.name + '.log')}")
            if time.monotonic() > deadline:
                raise ClusterError(f"workers not ready after {timeout_s:g}s: {msg}")
            time.sleep(0.2)
    finally:
        zk.stop()
        zk.close()
