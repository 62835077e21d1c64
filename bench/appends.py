"""`midtown-bench log`: append throughput and latency for 1 and 64 concurrent appenders,
with batches of 1 and 100 payloads, and the failover time (SIGKILL the writer of log 0,
then SIGSTOP the writer of log 1: time to the next append acknowledged by a newer epoch),
on a local 3-server cluster started for the run; then, on five log servers, two copies of
a log's open segment lost one after the other, with the writers' ensemble changes on and
off (the longest gap between acknowledged appends)."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from bench.harness import environment, fresh_cluster, log
from bench.loadgen import run_workload
from cli.output import emit
from cluster import Cluster
from log import zk as zkpaths
from log.client import LogClient
from runtime.refusals import Refusal

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
            except Refusal:
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


def copy_deaths(changes: bool, after_s: float = 4.0, window_s: float = 8.0) -> dict:
    """A log's open segment loses a copy (a follower SIGKILLed for good), then `after_s`
    later another (a follower of the segment open then), on a fresh cluster of five log
    servers, while an appender runs; with the writer's ensemble changes on (`changes`:
    MIDTOWN_ENSEMBLE_CHANGE) or off. Measures, per kill, when the open segment no longer
    had the dead copy (None: not within the run), and the longest gap between two
    acknowledged appends from the first kill to `window_s` after the second (a log still
    stalled then counts until that moment)."""
    with environment({"MIDTOWN_ENSEMBLE_CHANGE": "on" if changes else "off"}), \
            fresh_cluster("copies", "5 log servers", lambda _m: None, check_quiet=False, storage_nodes=0,
                          coordinators=0, layout="split", log_server_count=5, logs=2) as cluster:
        return _copy_deaths_on(cluster, changes, after_s, window_s)


def _copy_deaths_on(cluster: Cluster, changes: bool, after_s: float, window_s: float) -> dict:
    with LogClient(cluster.zk_hosts) as client:
        acks: list[float] = []
        stop = threading.Event()

        def appender() -> None:
            while not stop.is_set():
                try:
                    client.append(0, [PAYLOAD], timeout_s=30)
                except Refusal:
                    continue
                acks.append(time.monotonic())

        th = threading.Thread(target=appender, daemon=True)
        th.start()
        time.sleep(2.0)
        kills: list[dict] = []
        dead: set[int] = set()
        t_first = time.monotonic()
        for i in range(2):
            meta, _ = zkpaths.read_metadata(client.zk, 0)
            seg = meta.last_segment
            w = zkpaths.read_writer(client.zk, 0)
            assert seg is not None and w is not None
            victim = next(r for r in seg.replicas if r != w["server"] and r not in dead)
            dead.add(victim)
            at = time.monotonic()
            cluster.kill(f"log-{victim}")
            moved = None
            end = at + (after_s if i == 0 else window_s)
            while time.monotonic() < end:
                s2 = zkpaths.read_metadata(client.zk, 0)[0].last_segment
                if moved is None and s2 is not None and victim not in s2.replicas:
                    moved = round(time.monotonic() - at, 2)
                time.sleep(0.05)
            kills.append({"killed": f"log-{victim}", "segment_off_it_s": moved})
        t_end = time.monotonic()
        stop.set()
        th.join(40)
    times = [t for t in acks if t_first <= t <= t_end] + [t_end]
    gap = max((b - a for a, b in zip([t_first, *times], times)), default=0.0)
    return {"ensemble_changes": "on" if changes else "off", "kills": kills,
            "longest_gap_s": round(gap, 2), "appends": len(acks)}


def run(a: argparse.Namespace) -> int:
    if a.dir:
        return _measure(a, Cluster.load(Path(a.dir)), fresh=False)
    # The log alone: no storage nodes or coordinators reading it meanwhile.
    with fresh_cluster("log", "ZooKeeper + 3 log servers", log, storage_nodes=0, coordinators=0,
                       layout="split") as cluster:
        return _measure(a, cluster, fresh=True)


def _measure(a: argparse.Namespace, cluster: Cluster, fresh: bool) -> int:
    """The workloads on `cluster`; on a `fresh` one, its failovers and lost copies too."""
    results: list[dict] = []
    fo: dict = {}
    with LogClient(cluster.zk_hosts) as client:
        logs = client.topology().logs
        for clients, batch in [(1, 1), (1, 100), (64, 1), (64, 100)]:
            print(f"workload: {clients} appender(s), batches of {batch}, {a.seconds:.0f}s...",
                  file=sys.stderr, flush=True)
            workload(client, clients, batch, min(1.0, a.seconds / 4), logs)  # warm-up
            results.append(workload(client, clients, batch, a.seconds, logs))
        if not a.no_failover and fresh:
            print("failover: SIGKILL the writer of log 0...", file=sys.stderr, flush=True)
            fo = failover(cluster, client)
            print("failover: SIGSTOP the writer of log 1...", file=sys.stderr, flush=True)
            fo["paused"] = failover(cluster, client, log_id=1, pause=True)
    if not a.no_failover and fresh:
        copies = []
        for on in (True, False):
            print(f"copies lost: five log servers, two followers of a log's open segment SIGKILLed "
                  f"4 s apart, ensemble changes {'on' if on else 'off'}...", file=sys.stderr, flush=True)
            copies.append(copy_deaths(on))
        fo["copies"] = copies
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
            for c in fo.get("copies", []):
                kills = "; ".join(f"{k['killed']} killed, the open segment off it after "
                                  + (f"{k['segment_off_it_s']}s" if k["segment_off_it_s"] is not None
                                     else "(not within the run)") for k in c["kills"])
                print(f"copies lost, ensemble changes {c['ensemble_changes']}: {kills}; longest gap between "
                      f"acknowledged appends {c['longest_gap_s']}s")
    return 0
