"""`midtown machine up`: one machine's workers (cluster/machine.py), and `midtown
cluster check`: the placement health check. The machines the cluster's servers
run on (and their localities), and how many shards and open log segments have copies that
share a machine (fleet/failure_domains.py). Exit 0 when none do (or the cluster says it
runs on one machine), 1 otherwise: `cluster rebalance` moves shards apart; a segment's
next one (an ensemble change, or the writer's next claim) is placed apart."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from catalog import registry
from cli.arguments import nonneg_arg, positive_arg, trace_options, use_trace_options
from cli.connect import CliError, zk_client
from cli.output import emit, progress, unless_empty
from fleet import failure_domains, machines
from log import zk as zkpaths
from runtime import membership


def check(zk: Any) -> dict[str, Any]:
    """What `cluster check` reports, read from ZooKeeper."""
    kv = registry.read_kv(zk)
    topo = zkpaths.read_topology(zk)
    if kv is None or topo is None:
        raise CliError("no cluster in this ZooKeeper (midtown cluster init, or cluster up)")
    log_where = machines.domains(zk, machines.LOG_SERVERS)
    node_where = machines.domains(zk, machines.STORAGE_NODES)
    live_logs = set(zkpaths.servers(zk))
    live_nodes = set(membership.members(zk, registry.STORAGE_NODES))
    by_machine: dict[str, dict[str, Any]] = {}

    def row(d: failure_domains.Domain) -> dict[str, Any]:
        return by_machine.setdefault(d.machine, {"machine": d.machine, "dc": d.dc,
                                                 "locality": failure_domains.locality_text(d.locality),
                                                 "log_servers": [], "storage_nodes": [], "down": []})
    for s in topo.log_servers:
        r = row(log_where(s))
        r["log_servers"].append(s)
        if s not in live_logs:
            r["down"].append(f"log server {s}")
    for n in kv.storage_nodes:
        r = row(node_where(n))
        r["storage_nodes"].append(n)
        if n not in live_nodes:
            r["down"].append(f"storage node {n}")
    sets = registry.read_replica_sets(zk, kv)
    shards = [s for s in range(kv.shards) if failure_domains.shared(sets.of(s), node_where)]
    open_segments: list[dict[str, Any]] = []
    for log_id in range(topo.logs):
        meta, _ = zkpaths.read_metadata(zk, log_id)
        seg = meta.last_segment
        if seg is not None and not seg.sealed:
            open_segments.append({"log": log_id, "epoch": seg.epoch, "servers": list(seg.replicas),
                                  "shared": sorted(failure_domains.shared(seg.replicas, log_where))})
    sharing_segments = [s for s in open_segments if s["shared"]]
    one = machines.one_machine(zk)
    # Data centers: what each holds; every server names one, or none does
    dcs: dict[str, dict[str, list[Any]]] = {}
    for r in by_machine.values():
        if r["dc"]:
            d = dcs.setdefault(r["dc"], {"machines": [], "log_servers": [], "storage_nodes": []})
            d["machines"].append(r["machine"])
            d["log_servers"] += r["log_servers"]
            d["storage_nodes"] += r["storage_nodes"]
    mixed = [m for m in (failure_domains.mixed_data_centers(topo.log_servers, log_where, "log servers"),
                         failure_domains.mixed_data_centers(kv.storage_nodes, node_where, "storage nodes"))
             if m]
    return {"machines": sorted(by_machine.values(), key=lambda r: r["machine"]),
            "data_centers": {k: {f: sorted(v) for f, v in d.items()} for k, d in sorted(dcs.items())},
            "data_center_problems": mixed,
            "shards": kv.shards, "shards_sharing_a_machine": len(shards), "sharing_shards": shards,
            "open_segments": len(open_segments), "open_segments_sharing_a_machine": len(sharing_segments),
            "segments": open_segments, "one_machine": one,
            "ok": not mixed and (one or not (shards or sharing_segments))}


def cmd_check(a: argparse.Namespace, zk_of: Callable[[argparse.Namespace], Any]) -> int:
    zk = zk_of(a)
    try:
        out = check(zk)
    finally:
        zk.stop()
        zk.close()
    if a.json:
        emit(out, True)
        return 0 if out["ok"] else 1
    emit([{**r, "log_servers": ",".join(map(str, r["log_servers"])),
           "storage_nodes": ",".join(map(str, r["storage_nodes"])), "down": ", ".join(r["down"])}
          for r in out["machines"]], False,
         unless_empty(out["machines"], ["machine", "dc", "locality", "log_servers", "storage_nodes", "down"],
                      "dc"))
    if out["data_centers"]:
        print("\ndata centers: " + "; ".join(
            f"{dc}: {len(d['machines'])} machine(s), log servers {_ids(d['log_servers'])}, "
            f"storage nodes {_ids(d['storage_nodes'])}" for dc, d in out["data_centers"].items()))
    for problem in out["data_center_problems"]:
        print(f"data centers: {problem}")
    print(f"\nshards whose copies share a machine: {out['shards_sharing_a_machine']} of {out['shards']}")
    print(f"open log segments whose servers share a machine: {out['open_segments_sharing_a_machine']} of "
          f"{out['open_segments']}")
    if out["one_machine"]:
        print("placement: this cluster says it runs on one machine; its copies share it")
    elif not out["ok"]:
        print("placement: copies share a machine (a machine's loss loses them): `midtown cluster rebalance` "
              "moves shards apart; a segment's servers are placed apart at its next ensemble change")
    else:
        print("placement: every shard and open segment has its copies on distinct machines")
    return 0 if out["ok"] else 1


def _ids(ids: list[int]) -> str:
    return ",".join(map(str, ids)) or "-"


PLAINTEXT_SAYS = ("plaintext between machines: anyone who can reach these ports can read every shard, "
                  "overwrite values and append to the logs (--tls-dir turns mutual TLS on)")


def cmd_machine_up(a: argparse.Namespace) -> int:
    """Start this machine's workers and supervise them in the foreground."""
    import os
    import time

    from cli.cluster import supervise_foreground
    from cluster import ClusterError
    from cluster import machine as machine_mod

    use_trace_options(a, os.environ)  # the workers' MIDTOWN_TRACE_*
    if a.plaintext == bool(a.tls_dir):
        raise CliError("--tls-dir: mutual TLS between machines is the default: give the directory of this "
                       "machine's certificate (midtown cluster certs), or --plaintext to run without it")
    zk_hosts = a.zk or os.environ.get("MIDTOWN_ZK")
    if not zk_hosts:
        raise CliError("--zk: the cluster's ZooKeeper (HOST:PORT,...; or set MIDTOWN_ZK)")
    name = a.machine or machines.this_machine()
    try:
        failure_domains.check_machine(name)
        failure_domains.parse_locality(a.locality)
    except ValueError as e:
        raise CliError(f"--{e}") from None
    tls = tls_files(Path(a.tls_dir), name) if a.tls_dir else None
    a.zk = zk_hosts
    probe = zk_client(a)  # unreachable: said within --timeout (exit 5), before anything is allocated
    probe.stop()
    probe.close()
    advertise = a.advertise or (a.host if a.host != "0.0.0.0" else name)
    t0 = time.monotonic()
    try:
        c = machine_mod.plan(Path(a.dir), zk_hosts, a.workers or machine_mod.workers_default(), name,
                             a.locality, a.host, advertise, a.base_port, tls)
    except ClusterError as e:
        raise CliError(str(e)) from None
    running = [p.name for p in c.procs.values() if c.running(p.name)]
    if running:
        raise CliError(f"--dir: {a.dir} has workers running ({', '.join(running)})")
    say = progress(a.json)

    def start() -> None:
        for p in c.procs.values():
            c.start_process(p.name)
        c.save()
        machine_mod.wait_workers(c, a.timeout, say)

    def say_up() -> None:
        rows = [{"worker": p.name, "id": p.server_id, "coordinator": f"{advertise}:{p.port}",
                 "log": f"{advertise}:{p.log_port}", "storage": f"{advertise}:{p.storage_port}",
                 "pid": p.pid} for p in c.procs.values()]
        if a.json:
            emit({"machine": name, "locality": a.locality, "zk": c.zk_hosts, "tls": bool(tls),
                  "workers": rows, "seconds": round(time.monotonic() - t0, 1)}, True)
            return
        print(f"machine {name}{f' ({a.locality})' if a.locality else ''}: {len(rows)} workers up in "
              f"{time.monotonic() - t0:.1f}s, data in {a.dir}")
        emit(rows, False, ["worker", "id", "coordinator", "log", "storage", "pid"])
        print("mutual TLS between machines" if tls else PLAINTEXT_SAYS)
    supervise_foreground(c, start, say_up)
    return 0


def cmd_certs(a: argparse.Namespace) -> int:
    """The cluster's CA in DIR (made the first time) and a certificate it signs for each
    --machine, valid for its name and the --address(es) given: copy DIR/ca.pem and the
    machine's MACHINE.pem and MACHINE.key to that machine (never ca.key: keep it where
    certificates are made) and give `machine up --tls-dir` the directory."""
    from cluster import certs

    d = Path(a.dir)
    rows = []
    for name in a.machine:
        try:
            failure_domains.check_machine(name)
        except ValueError as e:
            raise CliError(f"--{e}") from None
        cert, key = certs.ensure_cert(d, name, (*a.address, name, "localhost", "127.0.0.1"))
        rows.append({"machine": name, "cert": str(cert), "key": str(key), "ca": str(d / "ca.pem")})
    emit(rows, a.json, ["machine", "cert", "key", "ca"])
    return 0


def tls_files(d: Path, machine: str) -> tuple[str, str, str]:
    """(CA, certificate, key) of `machine` in `d` (midtown cluster certs), or CliError."""
    files = (d / "ca.pem", d / f"{machine}.pem", d / f"{machine}.key")
    for f in files:
        if not f.is_file():
            raise CliError(f"--tls-dir: no {f.name} in {d} (midtown cluster certs --dir {d} --machine "
                           f"{machine} --address ADDRESS makes it)")
    return (str(files[0]), str(files[1]), str(files[2]))


def add_parser(cluster: Any, common: Callable[..., None], zk_of: Callable[[argparse.Namespace], Any],
               sub: Any) -> None:
    ck = cluster.add_parser("check", help="the machines the servers run on, and copies that share one "
                                          "(exit 1 when any do)")
    common(ck)
    ck.set_defaults(fn=lambda a: cmd_check(a, zk_of))
    from cluster import machine as machine_mod

    ct = cluster.add_parser("certs", help="the cluster's CA and a certificate for each machine (mutual TLS "
                                          "between machines)")
    ct.add_argument("--dir", required=True, help="where the CA is kept and the certificates are written")
    ct.add_argument("--machine", action="append", required=True,
                    help="a machine's name (repeat for more; `admin`: one for the command line)")
    ct.add_argument("--address", action="append", default=[],
                    help="an address the certificates are valid for besides each machine's name (IP or DNS "
                         "name; repeat for more; one command per machine when their addresses differ)")
    ct.add_argument("--json", action="store_true")
    ct.set_defaults(fn=cmd_certs)
    mg = sub.add_parser("machine", help="run this machine's share of a cluster")
    mgs = mg.add_subparsers(dest="cmd", metavar="COMMAND", required=True)
    up = mgs.add_parser("up", help="start and supervise this machine's workers (each a log server, a "
                                   "storage node and a coordinator) in the foreground")
    up.add_argument("--zk", help="the cluster's ZooKeeper HOST:PORT,... (default: $MIDTOWN_ZK)")
    up.add_argument("--dir", default="/var/lib/midtown", help="data directory (default %(default)s): "
                    "worker-K/ for each worker, its id in worker-K/id")
    up.add_argument("--workers", type=nonneg_arg("--workers"), default=0,
                    help=f"worker processes (default: one per core, {machine_mod.workers_default()} here)")
    up.add_argument("--machine", help="this machine's name (default: the host's name)")
    up.add_argument("--locality", default="", help="zone=...,rack=...: copies spread over localities")
    up.add_argument("--host", default="0.0.0.0", help="address to listen on (default %(default)s)")
    up.add_argument("--advertise", help="the address other machines and clients reach this one by "
                                        "(default: --host, or the machine's name)")
    up.add_argument("--base-port", type=nonneg_arg("--base-port"), default=7000,
                    help="worker K listens on BASE+4K (coordinator), +1 (log), +2 (storage), +3 (metrics); "
                         "0: free ports (default %(default)s)")
    up.add_argument("--tls-dir", help="the cluster's ca.pem and this machine's MACHINE.pem and MACHINE.key "
                                      "(midtown cluster certs): mutual TLS between machines")
    up.add_argument("--plaintext", action="store_true", help="no TLS: " + PLAINTEXT_SAYS.split(": ", 1)[1])
    up.add_argument("--timeout", type=positive_arg("--timeout"), default=120.0,
                    help="seconds for the workers to come up (default %(default)s)")
    up.add_argument("--json", action="store_true")
    trace_options(up)
    up.set_defaults(fn=cmd_machine_up)
