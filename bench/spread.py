"""`midtown-bench spread`: what each machine carries as storage nodes are added (issue 32).
The same offered load (--rate puts/s of --value-bytes values, new keys, paced for
--seconds) runs on two fresh local clusters of five log servers, one with 3 storage nodes
and one with 6 (shards of 3 replicas, split layout), and prints per storage node:

- the records it applied per second (its `midtown_storage_applied_records_total`, read
  before and after the load), and the records it read from the logs (`..._tailed_...`);
- the bytes of keys and values it holds (its usage count, `midtown node status` BYTES);

and per log server the segments that name it (its share: segments / all segments, 3/5
when every segment is on 3 of 5 servers and nothing else) and the bytes of its data
directory, with the 6-node means over the 3-node ones. Every figure is measured in this
run."""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench import quiet
from bench.harness import fresh_cluster, midtown_json, progress_for
from cli.output import emit
from midtown.client import Client

SHARDS, LOG_SERVERS, LOGS, KV_LOGS = 64, 5, 10, 5


def _counter(port: int, name: str) -> float:
    """The sum over labels of a counter on a process's Prometheus endpoint."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name + "{"))


def _du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _load(db: Client, rate: float, seconds: float, value: bytes, say: Any) -> tuple[int, float]:
    """Puts of new keys at `rate`/s (paced, from 32 threads) for `seconds`: (done, elapsed)."""
    threads, done, lock = 32, [0], threading.Lock()
    t0 = time.monotonic()

    def one(i: int) -> None:
        n = 0
        while True:
            due = t0 + (n * threads + i) / rate
            if due - t0 >= seconds:
                return
            time.sleep(max(0.0, due - time.monotonic()))
            db.put("spread", f"k{i}-{n}", "l", value)
            with lock:
                done[0] += 1
            n += 1
    ts = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(threads)]
    for t in ts:
        t.start()
    while any(t.is_alive() for t in ts):
        time.sleep(min(5.0, seconds / 4))
        say(f"  {done[0]} puts in {time.monotonic() - t0:.0f} s")
    for t in ts:
        t.join()
    return done[0], time.monotonic() - t0


def _one(nodes: int, a: argparse.Namespace, say: Any) -> dict[str, Any]:
    with fresh_cluster("spread", f"{nodes} storage nodes, {LOG_SERVERS} log servers", say,
                       check_quiet=False, storage_nodes=nodes, replicas=3, shards=SHARDS, logs=LOGS,
                       kv_logs=KV_LOGS, log_server_count=LOG_SERVERS, coordinators=1, layout="split") as c:
        c.create_dataset("spread")
        nodes_p = c.playing("storage-node")
        applied0 = {p.server_id: _counter(p.metrics_port, "midtown_storage_applied_records_total")
                    for p in nodes_p}
        tailed0 = {p.server_id: _counter(p.metrics_port, "midtown_storage_tailed_entries_total")
                   for p in nodes_p}
        with Client(c.coordinator_addrs, timeout=30) as db:
            puts, elapsed = _load(db, a.rate, a.seconds, b"v" * a.value_bytes, say)
        applied = {p.server_id: (_counter(p.metrics_port, "midtown_storage_applied_records_total")
                                 - applied0[p.server_id]) / elapsed for p in nodes_p}
        tailed = {p.server_id: (_counter(p.metrics_port, "midtown_storage_tailed_entries_total")
                                - tailed0[p.server_id]) / elapsed for p in nodes_p}
        say("  waiting for the nodes' usage counts to take the load in...")
        want = puts * 3 * a.value_bytes  # three copies of every value, at least
        deadline = time.monotonic() + 120
        while True:
            status = {r["node"]: r for r in midtown_json(c.zk_hosts, "node", "status")}
            if sum(r["bytes"] or 0 for r in status.values()) >= want or time.monotonic() > deadline:
                break
            time.sleep(1)
        servers = {r["server"]: r for r in midtown_json(c.zk_hosts, "log-server", "list")}
        rows = [{"nodes": nodes, "node": n, "shards": status[n]["shards"],
                 "applied_per_s": round(applied[n], 1), "tailed_per_s": round(tailed[n], 1),
                 "bytes": status[n]["bytes"]} for n in sorted(applied)]
        copies = sum(r["segments"] for r in servers.values())  # each segment on 3 servers
        logs = [{"nodes": nodes, "log_server": s, "segments": servers[s]["segments"],
                 "share": round(servers[s]["segments"] / (copies / 3), 2) if copies else 0.0,
                 "disk_bytes": _du(c.dir / f"log-{s}")} for s in sorted(servers)]
        return {"puts": puts, "puts_per_s": puts / elapsed, "nodes": rows, "log_servers": logs}


def run(a: argparse.Namespace) -> int:
    say = progress_for(a.json)
    quiet.check(say)
    os.environ["MIDTOWN_USAGE_INTERVAL_S"] = "2"  # the nodes count their bytes often
    three, six = _one(3, a, say), _one(6, a, say)

    def mean(r: dict[str, Any], k: str, part: str = "nodes") -> float:
        return statistics.mean(x[k] or 0 for x in r[part])
    summary = [
        {"what": "offered load (puts/s achieved)", "3 nodes": f"{three['puts_per_s']:.0f}",
         "6 nodes": f"{six['puts_per_s']:.0f}", "6 / 3": f"{six['puts_per_s'] / three['puts_per_s']:.2f}x"},
    ]
    for r in (three, six):  # per put: the same measure if the achieved loads differ
        for n in r["nodes"]:
            n["applied_per_put"] = n["applied_per_s"] / r["puts_per_s"]
    for what, k, part in [("records applied/s per storage node (mean)", "applied_per_s", "nodes"),
                          ("records applied per put, per storage node (mean)", "applied_per_put", "nodes"),
                          ("entries read/s per storage node (mean)", "tailed_per_s", "nodes"),
                          ("bytes held per storage node (mean)", "bytes", "nodes"),
                          ("log data on disk per log server (mean)", "disk_bytes", "log_servers")]:
        x, y = mean(three, k, part), mean(six, k, part)
        fmt = "{:,.2f}" if max(x, y) < 10 else "{:,.0f}"
        summary.append({"what": what, "3 nodes": fmt.format(x), "6 nodes": fmt.format(y),
                        "6 / 3": f"{y / x:.2f}x" if x else "-"})
    for r in (three, six):
        shares = [x["share"] for x in r["log_servers"]]
        disk = [x["disk_bytes"] for x in r["log_servers"]]
        r["spread"] = {"share": f"{min(shares):.2f}-{max(shares):.2f}",
                       "disk": f"{min(disk) / max(disk):.2f}" if max(disk) else "-"}
    summary += [{"what": "share of the segments per log server (min-max; 3 of 5: 0.60)",
                 "3 nodes": three["spread"]["share"], "6 nodes": six["spread"]["share"], "6 / 3": "-"},
                {"what": "log data on disk, smallest log server / largest",
                 "3 nodes": three["spread"]["disk"], "6 nodes": six["spread"]["disk"], "6 / 3": "-"}]
    if a.json:
        emit({"three": three, "six": six, "summary": summary}, True)
        return 0
    emit(three["nodes"] + six["nodes"], False, ["nodes", "node", "shards", "applied_per_s", "tailed_per_s",
                                                "bytes"])
    print()
    emit(three["log_servers"] + six["log_servers"], False, ["nodes", "log_server", "segments", "share",
                                                            "disk_bytes"])
    print()
    emit(summary, False, ["what", "3 nodes", "6 nodes", "6 / 3"])
    return 0
