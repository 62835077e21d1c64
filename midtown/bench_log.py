"""`midtown bench log`: append throughput and latency for 1 and 64 concurrent appenders,
with batches of 1 and 100 payloads, and the failover time (SIGKILL the writer, time to the
next acknowledged append), on a local 3-server cluster started for the run."""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

from log import zk as zkpaths
from log.client import LogClient, LogError
from midtown.cluster import Cluster
from midtown.output import emit

PAYLOAD = b"x" * 100


def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def workload(client: LogClient, clients: int, batch: int, seconds: float, logs: int) -> dict:
    lat: list[float] = []
    errors = [0]
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def run(i: int) -> None:
        mine: list[float] = []
        payloads = [PAYLOAD] * batch
        while time.monotonic() < stop:
            t0 = time.perf_counter()
            try:
                client.append(i % logs, payloads, timeout_s=30)
            except LogError:
                errors[0] += 1
                continue
            mine.append(time.perf_counter() - t0)
        with lock:
            lat.extend(mine)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(clients)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    dt = time.monotonic() - t0
    return {
        "clients": clients, "batch": batch, "appends_per_s": round(len(lat) / dt),
        "entries_per_s": round(len(lat) * batch / dt),
        "p50_ms": round(_pct(lat, 0.50) * 1000, 2), "p99_ms": round(_pct(lat, 0.99) * 1000, 2),
        "errors": errors[0],
    }


def failover(cluster: Cluster, client: LogClient, log_id: int = 0) -> dict:
    """SIGKILL the writer of a log while an appender runs; the failover time is from the
    kill to the first append acknowledged by a newer epoch."""
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

    th = threading.Thread(target=appender)
    th.start()
    time.sleep(1.0)
    name = f"log-{w['server']}"
    kill_at[0] = time.monotonic()
    cluster.kill(name)
    th.join(130)
    took = done[0] - kill_at[0] if done else float("nan")
    new = zkpaths.read_writer(client.zk, log_id)
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
        cluster = Cluster(Path(tmp.name) / "cluster", storage_nodes=0, coordinators=0)
        print("starting a local cluster (ZooKeeper + 3 log servers)...", file=sys.stderr, flush=True)
        cluster.start(progress=False)
    results: list[dict] = []
    fo: dict = {}
    try:
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
    return 0
