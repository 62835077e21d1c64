"""`midtown-bench handoffs`: what adding key-value logs and handing shards over to them
does, on a fresh local cluster (three storage nodes, eight shards, all on one log at
first; split layout: each log's writer in a log server process). Measured, in one run:

- puts per second of a workload that saturates the one log (--clients threads putting
  small values over every shard), for --seconds;
- the same workload while `log add` gives the store two more logs and the shards are
  handed over one by one to spread them over the three, as `cluster rebalance` plans it
  (docs/log.md, "Adding logs and handing shards over"): each hand-off's time from its
  beginning in the map to the map naming the new log, within which its shard's writes
  can be held (p50, max), and
  the put latency during the hand-offs against before (p50, p99, p99 ratio);
- puts per second of the workload after, for --seconds, and the ratio after / before;
- as a control, puts per second of the same workload on a second fresh cluster made with
  three logs from the start (no hand-off): what three logs give on this machine.

Every figure printed is measured here. On one machine every process shares its cores, so
more logs (more writer processes) add throughput only while a core is left idle: on a
2-core machine the ratio says what this machine can show, not what separate hosts would."""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from typing import Any

from bench.harness import Say, fresh_cluster, percentile_ms, progress_for, steady_puts
from cli.output import emit
from cluster import Cluster
from midtown.client import Client

SHARDS, NODES, ADDED = 8, 3, 2


def run(a: argparse.Namespace) -> int:
    log = progress_for(a.json)
    settings: dict[str, Any] = {"storage_nodes": NODES, "shards": SHARDS, "replicas": 3, "logs": 4,
                                "layout": "split"}
    with fresh_cluster("handoffs", f"{NODES} storage nodes, {SHARDS} shards, 1 key-value log", log,
                       kv_logs=1, **settings) as c:
        before, during, after, held = _spread_under_load(a, c, log)
    log(f"control: a cluster made with {1 + ADDED} logs, the workload for {a.seconds:g}s...")
    with fresh_cluster("handoffs", f"{1 + ADDED} key-value logs", log, check_quiet=False, kv_logs=1 + ADDED,
                       **settings) as c:
        c.create_dataset("steady")
        with Client(c.coordinator_addrs, timeout=60) as db:
            made = _timed(db, a.clients, a.seconds)
    lat_before = before["latencies"]

    def lat(xs: list[float]) -> str:
        return f"{percentile_ms(xs, .5):.2f} / {percentile_ms(xs, .99):.2f} ms ({len(xs)} puts)"
    ratio = after["rate"] / before["rate"]
    p99_ratio = percentile_ms(during, .99) / percentile_ms(lat_before, .99)
    rows = [
        {"what": "puts/s, shards on 1 log", "value": f"{before['rate']:.0f}"},
        {"what": f"puts/s, shards spread over {1 + ADDED} logs", "value": f"{after['rate']:.0f}"},
        {"what": "after / before", "value": f"{ratio:.2f}x"},
        {"what": f"control: puts/s, a cluster made with {1 + ADDED} logs",
         "value": f"{made['rate']:.0f}"},
        {"what": "after / control", "value": f"{after['rate'] / made['rate']:.2f}x"},
        {"what": f"hand-offs begun to done, writes held within: p50 / max ({len(held)} shards)",
         "value": f"{statistics.median(held) * 1000:.1f} / {max(held) * 1000:.1f} ms"},
        {"what": "puts without hand-offs: p50 / p99", "value": lat(lat_before)},
        {"what": "puts during hand-offs: p50 / p99", "value": lat(during)},
        {"what": "p99 during / without", "value": f"{p99_ratio:.2f}x"},
    ]
    if a.json:
        emit({"rows": rows, "puts_per_s_before": before["rate"], "puts_per_s_after": after["rate"],
              "ratio": ratio, "puts_per_s_made_with_more_logs": made["rate"],
              "held_p50_ms": statistics.median(held) * 1000,
              "held_max_ms": max(held) * 1000, "p99_ratio": p99_ratio}, True)
    else:
        emit(rows, False, ["what", "value"])
    return 0


def _spread_under_load(a: argparse.Namespace, c: Cluster,
                       log: Say) -> tuple[dict[str, Any], list[float], dict[str, Any], list[float]]:
    """On `c`, every shard on one log: the workload alone, then while `log add` and
    hand-offs spread the shards over more logs, then after. (before, the latencies of the
    puts made during the hand-offs, after, each hand-off's time holding writes.)"""
    c.create_dataset("steady")
    from catalog import log_map, registry
    from drivers.handoffs import hand_off
    from log.client import LogClient

    with Client(c.coordinator_addrs, timeout=60) as db, LogClient(c.zk_hosts) as logs:
        log(f"the workload on one log for {a.seconds:g}s...")
        before = _timed(db, a.clients, a.seconds)
        grown = registry.add_kv_logs(logs.zk, ADDED, logs.topology().logs)
        kv = registry.read_kv(logs.zk)
        assert kv is not None
        log(f"log add {ADDED}: logs 0..{grown.logs - 1}; handing shards over under the same workload...")
        held: list[float] = []
        stop = threading.Event()
        spans: list[tuple[float, float]] = []

        def spread() -> None:  # as `cluster rebalance` does (catalog/log_map.py spread)
            try:
                for shard, _, to in log_map.spread(registry.read_log_map(logs.zk, kv)):
                    t0 = time.monotonic()
                    r = hand_off(logs, kv, shard, to, 120)
                    spans.append((t0, time.monotonic()))
                    held.append(r["took_s"])
                    log(f"shard {shard} -> log {to}: {r['took_s'] * 1000:.1f} ms begun to done")
            finally:
                stop.set()
        th = threading.Thread(target=spread, daemon=True)
        th.start()
        during_all = steady_puts(db, a.clients, stop)
        th.join()
        during = [lat for t, lat in during_all if any(s <= t <= e for s, e in spans)]
        log(f"the workload on {grown.logs} logs for {a.seconds:g}s...")
        after = _timed(db, a.clients, a.seconds)
    return before, during, after, held


def _timed(db: Client, clients: int, seconds: float) -> dict[str, Any]:
    """The workload for `seconds`: its puts' latencies and their rate."""
    stop = threading.Event()
    timer = threading.Timer(seconds, stop.set)
    t0 = time.monotonic()
    timer.start()
    got = steady_puts(db, clients, stop)
    took = time.monotonic() - t0
    return {"latencies": [lat for _, lat in got], "rate": len(got) / took}
