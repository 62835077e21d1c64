"""`midtown-bench moves`: what moving shards costs, on a fresh local cluster of four storage
nodes (eight shards of three replicas each, split layout). Measured, in one run:

- the put latency of a steady workload (--clients threads putting small values over every
  shard) while one shard, loaded with --mb MB, moves at --rate MB/s (the moves' default,
  catalog/shard_moves.py), against the same workload just before (p50, p99, ratio), and
  that move's rate;
- a shard move's copy rate with no limit (the same shard moved back, no workload), and
  the time 1 GB would take at that rate;
- the time `midtown node decommission` takes to drain a node (its six shards, the big one
  among them when it holds it).

Every figure printed is measured here; the 1 GB time is the measured rate applied to 1 GB."""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from typing import Any

from bench.harness import Say, fresh_cluster, midtown_json, percentile_ms, progress_for, steady_puts
from cli.output import emit
from cluster import Cluster
from midtown.client import Client, Write

SHARDS, NODES, VALUE_BYTES = 8, 4, 64 * 1024


def run(a: argparse.Namespace) -> int:
    log = progress_for(a.json)
    with fresh_cluster("moves", f"{NODES} storage nodes, {SHARDS} shards of 3 replicas", log,
                       storage_nodes=NODES, shards=SHARDS, replicas=3, kv_logs=1, logs=4,
                       layout="split") as c:
        return _measure(a, c, log)


def _measure(a: argparse.Namespace, c: Cluster, log: Say) -> int:
    d = c.create_dataset("big")
    c.create_dataset("steady")
    from catalog import registry
    from catalog.routing import shard_of
    from log import zk as zkpaths
    zk = zkpaths.connect(c.zk_hosts)
    try:
        kv = registry.read_kv(zk)
        assert kv is not None
        sets = registry.read_replica_sets(zk, kv)
    finally:
        zk.stop()
        zk.close()
    shard = shard_of(d.id, b"big", SHARDS)
    holders = sets.of(shard)
    dest = next(n for n in range(NODES) if n not in holders)
    with Client(c.coordinator_addrs, timeout=60) as db:
        n = a.mb * 1024 * 1024 // VALUE_BYTES
        t0 = time.monotonic()
        for i in range(0, n, 16):
            db.write_many("big", [Write.put("big", f"v{j}", os.urandom(VALUE_BYTES))
                                  for j in range(i, min(n, i + 16))])
            if (i // 16) % max(1, n // 160) == 0:
                log(f"loading shard {shard}: {i * VALUE_BYTES / 2**20:.0f} of {a.mb} MB")
        load_s = time.monotonic() - t0
        log(f"loaded {a.mb} MB in {load_s:.1f}s; the steady workload alone for {a.seconds:g}s...")
        stop = threading.Event()
        timer = threading.Timer(a.seconds, stop.set)
        timer.start()
        before = [lat for _, lat in steady_puts(db, a.clients, stop)]
        log(f"moving shard {shard} from node {holders[0]} to node {dest} under the same workload...")
        stop = threading.Event()
        got: dict[str, Any] = {}
        done_at: list[float] = []

        def mover() -> None:
            got.update(midtown_json(c.zk_hosts, "shard", "move", str(shard), "--to", str(dest),
                           "--from", str(holders[0]), "--rate", str(a.rate)))
            done_at.append(time.monotonic())
            stop.set()
        move_t0 = time.monotonic()
        th = threading.Thread(target=mover, daemon=True)
        th.start()
        during_all = steady_puts(db, a.clients, stop)
        th.join()
        during = [lat for t, lat in during_all if move_t0 <= t <= done_at[0]]
    log("moving it back with no rate limit...")
    back = midtown_json(c.zk_hosts, "shard", "move", str(shard), "--to", str(holders[0]), "--from", str(dest),
               "--rate", "0")
    log("draining a node (midtown node decommission)...")
    t0 = time.monotonic()
    drained = midtown_json(c.zk_hosts, "node", "decommission", str(holders[1]))
    drain_s = time.monotonic() - t0
    def copy_rate(m: dict[str, Any]) -> float:
        return m["copied_bytes"] / 1e6 / m["copy_seconds"] if m.get("copy_seconds") else float("nan")
    paced, rate = copy_rate(got), copy_rate(back)
    def lat(xs: list[float]) -> str:
        return f"{percentile_ms(xs, .5):.2f} / {percentile_ms(xs, .99):.2f} ms ({len(xs)} puts)"
    p99_ratio = percentile_ms(during, .99) / percentile_ms(before, .99)
    rows = [
        {"what": "shard loaded", "value": f"{got['copied_bytes'] / 2**20:.1f} MiB copied "
                                          f"({got['copied_keys']} keys, values and first outcomes)"},
        {"what": f"move at --rate {a.rate:g}: copy rate", "value": f"{paced:.1f} MB/s"},
        {"what": f"move at --rate {a.rate:g}: whole move", "value": f"{got['seconds']:.2f} s"},
        {"what": "move, no limit: copy rate", "value": f"{rate:.1f} MB/s"},
        {"what": "move, no limit: whole move", "value": f"{back['seconds']:.2f} s"},
        {"what": "move, no limit: 1 GB at that rate", "value": f"{1000 / rate:.0f} s"},
        {"what": "puts without a move: p50 / p99", "value": lat(before)},
        {"what": "puts during the move: p50 / p99", "value": lat(during)},
        {"what": "p99 during / without", "value": f"{p99_ratio:.2f}x"},
        {"what": f"drain node {holders[1]} ({len(drained['moves'])} shards)",
         "value": f"{drain_s:.1f} s"},
    ]
    if a.json:
        emit({"rows": rows, "copy_mb_s": rate, "paced_mb_s": paced,
              "p99_ratio": p99_ratio,
              "p50_before_ms": statistics.median(before) * 1000 if before else None,
              "drain_s": drain_s}, True)
    else:
        emit(rows, False, ["what", "value"])
    return 0

