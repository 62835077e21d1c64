"""`midtown-bench machines`: a cluster laid over three machines, played on this one (three
`machine up` shares under distinct machine names and zones, on loopback), run with one and
then with two workers per machine, and with two under mutual TLS.

For each: the placement check's counts (shards and open segments whose copies share a
machine) right after the machines joined and after `cluster rebalance`; puts at 1 and at
`--clients` clients: throughput, p50, p99 and CPU per operation of every worker, from
/proc; then `--rounds` times, every worker of the machine that writes the probed key's log
SIGKILLed at once (a machine lost), timed from the kill to the first put started after it
being acknowledged, and the machine brought back.

What this machine cannot show: with two cores, more workers than cores share them, so
throughput cannot grow with workers here; a machine's loss is a set of processes killed,
not a network gone (tests/integration/test_netns.py does that)."""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench import quiet
from bench.failover import Prober, rounds
from bench.harness import cpu_seconds, log
from bench.kv import midtown_ops, threads
from catalog import datasets, registry
from catalog.routing import shard_of
from cli.machines import check
from cli.output import emit
from cluster import Cluster
from cluster import machine as machine_mod
from cluster.ports import free_ports
from cluster.zookeeper import ZooKeeper
from log import zk as zkpaths
from midtown.client import Client

MACHINES = 3
DATASET, PARTITION, LOCAL = "bench", "probe", "k"


@contextlib.contextmanager
def laid_over(root: Path, workers: int, tls: bool) -> Iterator[tuple[str, list[Cluster]]]:
    """ZooKeeper, a cluster made by machines, and MACHINES machines of `workers` workers:
    (ZooKeeper's address, each machine's workers); everything stopped on the way out."""
    zk_proc = ZooKeeper(root / "zk", free_ports(1)[0], log_path=root / "zookeeper.log")
    machines: list[Cluster] = []
    try:
        zk_proc.start()
        zk = zkpaths.connect(zk_proc.hosts)
        try:
            zkpaths.create_cluster(zk, 4, [])
            registry.create_kv(zk, 16, [], 2, 3)
        finally:
            zk.stop()
            zk.close()
        files = None
        for i in range(MACHINES):
            name = f"m{i}"
            if tls:
                from cluster import certs

                cert, key = certs.ensure_cert(root / "certs", name)
                files = (str(root / "certs" / "ca.pem"), str(cert), str(key))
            log(f"machine {name}: {workers} worker(s)...")
            c = machine_mod.plan(root / name, zk_proc.hosts, workers, name, f"zone=z{i}", "127.0.0.1",
                                 "127.0.0.1", 0, files)
            machines.append(c)
            for p in c.procs.values():
                c.start_process(p.name)
            c.save()
        for c in machines:
            machine_mod.wait_workers(c, 180)
        yield zk_proc.hosts, machines
    finally:
        for c in machines:
            c.stop()
        zk_proc.stop()


def counts(zk_hosts: str) -> str:
    """The placement check's counts: shards and open segments whose copies share a machine."""
    zk = zkpaths.connect(zk_hosts)
    try:
        out = check(zk)
    finally:
        zk.stop()
        zk.close()
    return (f"{out['shards_sharing_a_machine']}/{out['shards']} shards, "
            f"{out['open_segments_sharing_a_machine']}/{out['open_segments']} segments")


def one_layout(root: Path, workers: int, tls: bool, a: argparse.Namespace) -> dict[str, Any]:
    row: dict[str, Any] = {"workers_per_machine": workers, "workers": workers * MACHINES,
                           "tls": "mutual" if tls else "off"}
    with laid_over(root, workers, tls) as (zk_hosts, machines):
        row["sharing_before"] = counts(zk_hosts)
        log("cluster rebalance...")
        env = None
        if tls:
            ca, cert, key = machines[0].tls_files
            env = {"MIDTOWN_TLS_CA": ca, "MIDTOWN_TLS_CERT": cert, "MIDTOWN_TLS_KEY": key}
        cmd = [sys.executable, "-m", "cli", "cluster", "rebalance", "--zk", zk_hosts, "--json"]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=900,
                           env={**os.environ, **(env or {})})
        if p.returncode != 0:
            raise RuntimeError(f"cluster rebalance: {p.stderr.strip()}")
        row["sharing_after"] = counts(zk_hosts)
        zk = zkpaths.connect(zk_hosts)
        try:
            datasets.create(zk, DATASET)
        finally:
            zk.stop()
            zk.close()
        pids = [p.pid for c in machines for p in c.procs.values()]
        trust = str(root / "certs" / "ca.pem") if tls else None
        for clients in (1, a.clients):
            ops = threads(midtown_ops([], zk=zk_hosts, tls_ca=trust))
            ops("put", clients, min(1.0, a.seconds / 4))  # warm-up
            log(f"puts, {clients} client(s), {a.seconds:g}s...")
            before = sum(cpu_seconds(p) for p in pids)
            r = ops("put", clients, a.seconds)
            used = sum(cpu_seconds(p) for p in pids) - before
            n = max(1.0, r["ops_per_s"] * a.seconds)
            row[f"put_{clients}_ops_per_s"] = r["ops_per_s"]
            row[f"put_{clients}_p50_ms"] = r["p50_ms"]
            row[f"put_{clients}_p99_ms"] = r["p99_ms"]
            row[f"cpu_{clients}_us"] = round(1e6 * used / n)
        row["kill_s"] = machine_kills(zk_hosts, machines, a.rounds, trust)
    return row


def machine_kills(zk_hosts: str, machines: list[Cluster], n: int, ca: str | None) -> list[float]:
    """`n` rounds of the machine that writes the probed key's log losing every worker at
    once, brought back after; the seconds from each kill to the next acknowledged put."""
    zk = zkpaths.connect(zk_hosts)
    try:
        d = datasets.get(zk, DATASET)
        kv = registry.read_kv(zk)
        assert d is not None and kv is not None
        log_id = registry.read_log_map(zk, kv).log_of(shard_of(d.id, PARTITION.encode(), kv.shards))
        with Client(zk=zk_hosts, timeout=30, tls_ca=ca) as db:
            prober = Prober(lambda i: db.put(DATASET, PARTITION, LOCAL, str(i).encode()))
            try:
                def kill() -> tuple[float, Any]:
                    w = None
                    deadline = time.monotonic() + 60
                    while w is None and time.monotonic() < deadline:
                        w = zkpaths.read_writer(zk, log_id)
                        time.sleep(0.05 if w is None else 0)
                    if w is None:
                        raise RuntimeError(f"log {log_id} had no writer for 60 s")
                    m = next(c for c in machines if any(p.server_id == int(w["server"])
                                                        for p in c.procs.values()))
                    t0 = time.monotonic()
                    for p in m.procs.values():
                        m.signal(p.name, 9)
                    for p in m.procs.values():
                        m.wait_exit(p.name)

                    def back() -> None:
                        for p in m.procs.values():
                            m.start_process(p.name)
                        machine_mod.wait_workers(m, 180)
                    return t0, back
                return [round(x, 3) for x in rounds(prober, kill, n, "a machine killed", None)]
            finally:
                prober.stop()
    finally:
        zk.stop()
        zk.close()


def ratio(a: dict[str, Any], b: dict[str, Any], key: str) -> float:
    return round(a[key] / max(1e-9, b[key]), 2)


def run(a: argparse.Namespace) -> int:
    quiet.check(log)
    rows = []
    for workers, tls in ((1, False), (2, False), (2, True)):
        with tempfile.TemporaryDirectory(prefix="midtown-bench-machines-") as tmp:
            rows.append(one_layout(Path(tmp), workers, tls, a))
    for r in rows:
        kills = r.pop("kill_s")
        r["kill_to_put_median_s"] = round(statistics.median(kills), 3) if kills else None
        r["kill_to_put_max_s"] = max(kills) if kills else None
    plain = next(r for r in rows if r["workers_per_machine"] == 2 and r["tls"] == "off")
    mutual = next(r for r in rows if r["tls"] == "mutual")
    c = a.clients
    tls_cost = {f"tls_put_{k}_ratio": ratio(mutual, plain, f"put_{k}_ops_per_s")
                for k in (1, c)}
    tls_cost.update({f"tls_p50_{k}_ratio": ratio(mutual, plain, f"put_{k}_p50_ms") for k in (1, c)})
    if a.json:
        emit({"rows": rows, **tls_cost}, True)
        return 0
    emit(rows, False, ["workers_per_machine", "workers", "tls", "put_1_ops_per_s", "put_1_p50_ms", "cpu_1_us",
                       f"put_{c}_ops_per_s", f"put_{c}_p99_ms", f"cpu_{c}_us", "kill_to_put_median_s",
                       "kill_to_put_max_s", "sharing_before", "sharing_after"])
    print(f"\nthree machines on this one ({len(os.sched_getaffinity(0))} cores), loopback; cpu: "
          "CPU per put of every worker, µs; kill_to_put: from SIGKILL of every worker of the machine "
          f"that writes the probed key's log to the first put started after it acknowledged ({a.rounds} "
          "rounds); sharing: shards and open segments whose copies share a machine, as the machines "
          "joined and after cluster rebalance")
    print("mutual TLS / plaintext, two workers per machine: puts/s at 1 client "
          f"{tls_cost['tls_put_1_ratio']}, "
          f"at {c} {tls_cost[f'tls_put_{c}_ratio']}; p50 at 1 client {tls_cost['tls_p50_1_ratio']}, "
          f"at {c} {tls_cost[f'tls_p50_{c}_ratio']}")
    return 0
