"""The `midtown cluster` commands: up, init, down, status and restart of a local cluster
(rebalance is added by cli/shards.py)."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from catalog import registry, replica_sets
from catalog.replica_sets import REPLICAS_DEFAULT
from cli.arguments import at_least_one_arg, nonneg_arg, positive_arg, trace_options, use_trace_options
from cli.connect import DEFAULT_DIR, CliError, zk_client
from cli.interrupts import STOP_SIGNALS
from cli.output import emit
from cluster import LAYOUT_DEFAULT, LAYOUTS
from fleet import machines


# ---------------------------------------------------------------- cluster
def cmd_cluster_up(a: argparse.Namespace) -> int:
    """Start a local cluster under a supervisor (cluster/supervisor.py) that restarts a
    process that dies: in the foreground, or in a process of its own with --detach."""
    from cluster import Cluster, ClusterError

    use_trace_options(a, os.environ)  # the processes' MIDTOWN_TRACE_*
    d = Path(a.dir)
    try:
        c = Cluster.load(d) if (d / "cluster.json").exists() else \
            Cluster(d, logs=a.logs, kv_logs=a.kv_logs, layout=a.layout, tls=a.tls,
                    log_server_count=a.hosts, storage_nodes=a.hosts, replicas=a.replicas)
    except ClusterError as e:
        raise CliError(str(e)) from None
    if c.supervisor_alive():
        raise CliError(f"cluster in {d} is already running (supervisor pid {c.supervisor_pid}); "
                       f"stop it with `midtown cluster down --dir {d}`")
    t0 = time.monotonic()
    if a.detach:
        c = _start_detached(c, progress=not a.json)
        _print_up(a, c, time.monotonic() - t0)
        return 0
    supervise_foreground(c, lambda: c.start(progress=not a.json),
                         lambda: _print_up(a, c, time.monotonic() - t0))
    return 0


def supervise_foreground(c: Any, start: Callable[[], None], say_up: Callable[[], None]) -> None:
    """Start `c`'s processes (`start`), say so, and supervise them until SIGINT, SIGTERM or
    SIGHUP; then stop them. Whatever stops the command once it has begun to start
    processes (a stop signal while they start: a KeyboardInterrupt; after, the handlers
    below, installed before anything says the cluster is up), the `finally` stops them. A
    signal that came between that line and the handlers used to end the command and leave
    the cluster running (found by the signal test running its commands at once)."""
    import threading

    from cluster import ClusterError
    from cluster.supervisor import supervise

    stop = threading.Event()
    try:
        try:
            start()
        except ClusterError as e:
            raise CliError(str(e)) from None
        for sig in (signal.SIGINT, *STOP_SIGNALS):
            signal.signal(sig, lambda *_: stop.set())
        say_up()
        print("running in the foreground, restarting a process that dies; Ctrl-C stops everything",
              flush=True)
        supervise(c, stop, lambda msg: print(f"{time.strftime('%H:%M:%S')} {msg}", flush=True))
    finally:
        print("stopping...", flush=True)
        c.stop()
        print("stopped", flush=True)


def _start_detached(c: Any, progress: bool) -> Any:
    """Run the supervisor in a process of its own, which starts the cluster; wait until it
    says the cluster is ready (or exits)."""
    import subprocess

    from cluster import Cluster
    from runtime import children

    c.plan()
    log_path = c.dir / "logs" / "supervisor.log"
    with open(log_path, "ab") as out:
        proc = children.start([sys.executable, "-m", "cluster.supervisor", "--dir", str(c.dir)],
                              stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                              start_new_session=True)
    # Until it is up, the supervisor is the command's to stop (a stop signal meanwhile stops
    # it, and it stops what it started); once up, it runs on its own.
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log_path.read_text(errors="replace").strip().splitlines()[-3:]
            raise CliError(f"the cluster did not start: {' / '.join(tail)} (see {log_path})")
        loaded = Cluster.load(c.dir)
        if loaded.supervisor_pid == proc.pid:
            children.release(proc)
            return loaded
        time.sleep(0.2)
    raise CliError(f"the cluster was not ready after 120 s (see {log_path})")


def _print_up(a: argparse.Namespace, c: Any, took_s: float) -> None:
    rows = c.status()
    if a.json:
        emit({"dir": str(c.dir), "zk": c.zk_hosts, "coordinators": c.coordinator_addrs,
              "tls_ca": str(c.tls_ca) if c.tls_ca else None, "supervisor_pid": c.supervisor_pid or None,
              "one_machine": c.one_machine(),
              "processes": rows}, True)
        return
    print(f"cluster up in {took_s:.1f}s, data in {c.dir}")
    emit(rows, False, ["name", "addr", "pid", "state"])
    print(f"\nZooKeeper: {c.zk_hosts}   (other terminals: export MIDTOWN_ZK={c.zk_hosts})")
    tls = f", tls_ca=\"{c.tls_ca}\"" if c.tls_ca else ""
    for addr in c.coordinator_addrs:
        print(f"coordinator: {addr}")
    if c.layout == "host":  # a client given ZooKeeper sends each write beside its log's writer
        print(f"clients: midtown.Client(zk=\"{c.zk_hosts}\"{tls})   (each write to the coordinator "
              "beside its log's writer)")
    else:
        print(f"clients: midtown.Client(\"{c.coordinator_addrs[0]}\"{tls})")
    if c.one_machine():  # said once, here: every copy of this cluster shares the machine
        here = c.machine_of(c.playing("log-server")[0])
        print(f"placement: every server runs on one machine ({here}), "
              "so every copy of a shard or a log segment is on it; a cluster laid over machines keeps "
              "copies on distinct ones (docs/operations.md)")
    if c.tls_ca:
        print(f"TLS: clients trust {c.tls_ca}; the processes call each other with mutual TLS")
    if c.supervisor_pid:
        print(f"supervisor: pid {c.supervisor_pid} (restarts a process that dies; "
              f"log in {c.dir / 'logs' / 'supervisor.log'})")


def _load_cluster(d: str) -> Any:
    from cluster import Cluster, ClusterError

    try:
        return Cluster.load(Path(d))
    except ClusterError as e:
        raise CliError(str(e)) from None


def cmd_cluster_init(a: argparse.Namespace) -> int:
    """Create the topology in ZooKeeper for servers started by hand (Docker, several hosts)."""
    from log import zk as zkpaths

    try:
        ids = [] if a.by_machines else [int(x) for x in a.log_servers.split(",")]
    except ValueError:
        raise CliError(f"--log-servers: expected ids like 0,1,2, got {a.log_servers!r}") from None
    try:
        nodes = [] if a.by_machines else [int(x) for x in a.storage_nodes.split(",")]
    except ValueError:
        raise CliError(f"--storage-nodes: expected ids like 0,1,2, got {a.storage_nodes!r}") from None
    try:
        replica_sets.check_replicas(a.replicas, max(a.replicas, len(nodes)))
        replica_sets.check_per_dc_range(a.copies_per_dc)
    except ValueError as e:
        raise CliError(f"--{e}") from None
    zk = zk_client(a)
    try:
        machines.set_one_machine(zk, a.one_machine)
        topo = zkpaths.create_cluster(zk, a.logs, ids, leased_below=a.kv_logs)
    except ValueError as e:
        raise CliError(str(e)) from None
    finally:
        zk.stop()
        zk.close()

    zk2 = zk_client(a)
    try:
        kv = registry.create_kv(zk2, a.shards, nodes, a.kv_logs, a.replicas, a.copies_per_dc)
    except ValueError as e:
        raise CliError(str(e)) from None
    finally:
        zk2.stop()
        zk2.close()
    emit({"logs": topo.logs, "log_servers": list(topo.log_servers), "shards": kv.shards,
          "kv_logs": kv.logs, "copies_per_dc": kv.per_dc or None,
          "storage_nodes": list(kv.storage_nodes)}, a.json)
    return 0


def cmd_cluster_down(a: argparse.Namespace) -> int:
    """Stop the cluster: its supervisor (which stops what it supervises), then whatever is
    left. Only processes that are the ones recorded (pid and start time) are signalled: a
    pid in cluster.json that another program holds now (after a crash or a reboot) is not."""
    from runtime import children

    c = _load_cluster(a.dir)
    if children.signal_recorded(c.supervisor_pid, c.supervisor_started, signal.SIGTERM):
        deadline = time.monotonic() + 90
        while c.supervisor_alive() and time.monotonic() < deadline:
            time.sleep(0.2)
        c = _load_cluster(a.dir)
    c.stop()  # whatever is left (no supervisor, or one that did not finish)
    c.supervisor_pid, c.supervisor_started = 0, 0
    c.save()
    emit(c.status(), a.json, ["name", "addr", "state"])
    return 0


def cmd_cluster_status(a: argparse.Namespace) -> int:
    c = _load_cluster(a.dir)
    emit(c.status(), a.json, ["name", "kind", "addr", "pid", "state", "restarts", "metrics"])
    return 0


def cmd_cluster_restart(a: argparse.Namespace) -> int:
    """Restart one process: through the supervisor when one runs (it counts it), else
    directly. Returns once the process runs again."""
    from cluster.supervisor import request_restart

    c = _load_cluster(a.dir)
    if a.name not in c.procs:
        raise CliError(f"NAME: no process {a.name!r} in {a.dir}; choose one of {', '.join(c.procs)}")
    old = c.procs[a.name].pid
    if c.supervisor_alive():
        request_restart(c.dir, a.name)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            p = _load_cluster(a.dir).procs[a.name]
            if p.pid and p.pid != old and p.alive():
                break
            time.sleep(0.2)
        else:
            raise CliError(f"{a.name} did not start again within 60 s (see {c.dir / 'logs'})")
    else:
        c.terminate(a.name)
        c.start_process(a.name)
        c.procs[a.name].restarts += 1
        c.save()
    c = _load_cluster(a.dir)
    emit([r for r in c.status() if r["name"] == a.name], a.json, ["name", "pid", "state", "restarts"])
    return 0


def add_parser(sub: Any) -> Any:
    """cluster up|init|down|status|restart: a local cluster (and rebalance, added by
    cli/shards.py); returns the group's subparsers."""
    cl = sub.add_parser("cluster", help="start, stop and inspect a local cluster")
    cls = cl.add_subparsers(dest="cmd", metavar="COMMAND", required=True)
    up = cls.add_parser("up", help="start a local cluster (ZooKeeper and the servers) on loopback")
    up.add_argument("--dir", default=str(DEFAULT_DIR))
    up.add_argument("--detach", action="store_true", help="return once ready")
    up.add_argument("--tls", action="store_true",
                    help="new cluster only: mutual TLS between its processes and TLS for clients, with "
                         "certificates made in DIR/tls (clients trust DIR/tls/ca.pem)")
    up.add_argument("--json", action="store_true")
    up.add_argument("--logs", type=nonneg_arg("--logs"), default=16, help="logs (new cluster only)")
    up.add_argument("--kv-logs", type=nonneg_arg("--kv-logs"), default=registry.KV_LOGS_LOCAL_DEFAULT,
                    help="logs the key-value store spreads its shards over (new cluster only; "
                         "default %(default)s: on one machine fewer logs batch better)")
    up.add_argument("--hosts", type=at_least_one_arg("--hosts"), default=3,
                    help="machines to play (new cluster only): hosts of the host layout; log servers "
                         "and storage nodes of the split layout (default %(default)s)")
    up.add_argument("--replicas", type=at_least_one_arg("--replicas"), default=REPLICAS_DEFAULT,
                    help="copies of each shard (new cluster only; default %(default)s): with more "
                         "storage nodes, each holds a part of the shards")
    up.add_argument("--layout", choices=LAYOUTS, default=LAYOUT_DEFAULT,
                    help="host (default): one process per machine with a log server, a storage node "
                         "and a coordinator, clients given --zk routed to the log writer's; split: one "
                         "process per component (new cluster only; docs/performance.md)")
    trace_options(up)
    up.set_defaults(fn=cmd_cluster_up)
    it = cls.add_parser("init", help="create a cluster's topology in ZooKeeper (servers started by hand)")
    it.add_argument("--zk", help="ZooKeeper HOST:PORT (default: $MIDTOWN_ZK)")
    it.add_argument("--timeout", type=positive_arg("--timeout"), default=10.0,
                    help="seconds to wait for ZooKeeper (default %(default)s)")
    it.add_argument("--logs", type=nonneg_arg("--logs"), default=16)
    it.add_argument("--log-servers", default="0,1,2", help="log server ids, comma-separated")
    it.add_argument("--shards", type=nonneg_arg("--shards"), default=64)
    it.add_argument("--storage-nodes", default="0,1,2", help="storage node ids, comma-separated")
    it.add_argument("--replicas", type=at_least_one_arg("--replicas"), default=REPLICAS_DEFAULT,
                    help="copies of each shard (default %(default)s): with more storage nodes, each "
                         "holds a part of the shards")
    it.add_argument("--copies-per-dc", type=int, default=0, metavar="N",
                    help="copies of each shard in every data center the storage nodes name (their "
                         "--locality dc=...), in place of --replicas dealt over them (default: not set)")
    it.add_argument("--kv-logs", type=nonneg_arg("--kv-logs"), default=registry.KV_LOGS_DEFAULT,
                    help="logs the key-value store spreads its shards over (default %(default)s: "
                         "one for each log server to write)")
    it.add_argument("--by-machines", action="store_true",
                    help="no servers yet: each `midtown machine up` adds its workers, with ids from "
                         "ZooKeeper (--log-servers and --storage-nodes are not used)")
    it.add_argument("--one-machine", action="store_true",
                    help="the servers share one machine: place their copies on it anyway (a test or demo "
                         "cluster; that machine's loss loses every copy). Without it, copies go to distinct "
                         "machines, and what cannot is refused")
    it.add_argument("--json", action="store_true")
    it.set_defaults(fn=cmd_cluster_init)
    down = cls.add_parser("down", help="stop a local cluster")
    down.add_argument("--dir", default=str(DEFAULT_DIR))
    down.add_argument("--json", action="store_true")
    down.set_defaults(fn=cmd_cluster_down)
    st = cls.add_parser("status", help="processes of a local cluster")
    st.add_argument("--dir", default=str(DEFAULT_DIR))
    st.add_argument("--json", action="store_true")
    st.set_defaults(fn=cmd_cluster_status)
    rs = cls.add_parser("restart", help="restart one process of a local cluster (see cluster status)")
    rs.add_argument("name", metavar="NAME", help="a process name, such as storage-1 or log-0")
    rs.add_argument("--dir", default=str(DEFAULT_DIR))
    rs.add_argument("--json", action="store_true")
    rs.set_defaults(fn=cmd_cluster_restart)
    return cls
