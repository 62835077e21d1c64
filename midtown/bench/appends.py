"""`midtown bench log`: append throughput and latency for 1 and 64 concurrent appenders,
with batches of 1 and 100 payloads, and the failover time (SIGKILL the writer of log 0,
then SIGSTOP the writer of log 1: time to the next append acknowledged by a newer epoch),
on a local 3-server cluster started for the run."""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from log import zk as zkpaths
from log.client import LogClient, LogError
from midtown.bench import quiet
from midtown.bench.loadgen import run_workload
from midtown.cluster import Cluster
from midtown.output import emit

PAYLOAD = b"x" * 100


def workload(client: LogClient, clients: int, batch: int, seconds: float, logs: int) -> dict:
    payloads = [PAYLOAD] * batch

    def make_op(i: int) -> Callable[[int], object]:
        return lambda n: client.append(i % logs, payloads, timeout_s=30)

    r = run_workload(make_op, clients, seconds)
    return {"clients": clients, "batch": batch, "appends_per_s": r["ops_per_s"],
            "entries_per_s": r["ops_per_s"] * batch, "p50_ms": r["p50_ms"], "p99_ms": r["p99_ms"],
            "errors": r["errors"]}


def failover(cluster: Cluster, client: LogClient, log_id: int = 0, pause: bool = False) -> dict:
    """SIGKILL the writer of a log while an appender runs (`pause`: SIGSTOP it, SIGCONT
    after); the failover time is from the signal to the first append acknowledged by a
    newer epoch."""
    w = zkpaths.read_writer(client.zk, log_id)
    assert w is not None
    old_epoch = client.append(log_id, [PAYLOAD]).epoch
    done: list[float] = []
    kill_at = [0.0]

    def appender() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                r = client.append(log_id, [PAYLOAD], timeout_s=60)
            except LogError:
                continue
            if r.epoch > old_epoch:
                done.append(time.monotonic())
                return

    th = threading.Thread(target=appender, daemon=True)  # never keeps an interrupted run alive
    th.start()
    time.sleep(1.0)
    name = f"log-{w['server']}"
    kill_at[0] = time.monotonic()
    if pause:
        cluster.signal(name, signal.SIGSTOP)
    else:
        cluster.kill(name)
    try:
        th.join(130)
    finally:
        if pause:
            cluster.signal(name, signal.SIGCONT)
    took = done[0] - kill_at[0] if done else float("nan")
    new = zkpaths.read_writer(client.zk, log_id)
    if not pause:
        cluster.restart(name)
    return {"killed": name, "new_writer": f"log-{new['server']}" if new else None,
            "failover_s": round(took, 2)}


def run(a: argparse.Namespace) -> int:
    tmp = None
    if a.dir:
        cluster = Cluster.load(Path(a.dir))
    else:
        tmp = tempfile.TemporaryDirectory(prefix="midtown-bench-")
        # The log alone: no storage nodes or coordinators reading it meanwhile.
        cluster = Cluster(Path(tmp.name) / "cluster", storage_nodes=0, coordinators=0,
                          layout="split")
    results: list[dict] = []
    fo: dict = {}
    try:
        if tmp is not None:
            quiet.check(lambda m: print(m, file=sys.stderr, flush=True))
            print("starting a local cluster (ZooKeeper + 3 log servers)...", file=sys.stderr, flush=True)
            cluster.start(progress=False)
        with LogClient(cluster.zk_hosts) as client:
            logs = client.topology().logs
            for clients, batch in [(1, 1), (1, 100), (64, 1), (64, 100)]:
                print(f"workload: {clients} appender(s), batches of {batch}, {a.seconds:.0f}s...",
                      file=sys.stderr, flush=True)
                workload(client, clients, batch, min(1.0, a.seconds / 4), logs)  # warm-up
                results.append(workload(client, clients, batch, a.seconds, logs))
            if not a.no_failover and tmp is not None:
                print("failover: SIGKILL the writer of log 0...", file=sys.stderr, flush=True)
                fo = failover(cluster, client)
                print("failover: SIGSTOP the writer of log 1...", file=sys.stderr, flush=True)
                fo["paused"] = failover(cluster, client, log_id=1, pause=True)
    finally:
        if tmp is not None:
            cluster.stop()
            tmp.cleanup()
    if a.json:
        emit({"workloads": results, "failover": fo}, True)
    else:
        emit(results, False, ["clients", "batch", "appends_per_s", "entries_per_s", "p50_ms",
                              "p99_ms", "errors"])
        if fo:
            print(f"\nfailover: killed {fo['killed']}, {fo['new_writer']} took over; next "
                  f"acknowledged append after {fo['failover_s']}s")
            p = fo["paused"]
            print(f"failover: paused {p['killed']}, {p['new_writer']} took over; next "
                  f"acknowledged append after {p['failover_s']}s")
    return 0
