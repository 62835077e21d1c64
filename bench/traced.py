"""`midtown-bench trace`: where a single client's put, strong get and CAS spend their time,
step by step and process by process, from traces (runtime/tracing.py); and what tracing
costs at a sampling ratio (1% by default) against a cluster with tracing off.

A local cluster whose servers write their spans to a file and follow their callers (a
ratio of 0: they trace what a traced client sends). The breakdown: `--ops-traced`
operations of each kind, one at a time, every one traced, summarised as `midtown trace
--summary` does (each step's median). The cost: puts and strong gets at each client count,
this process tracing at `--sample` and not tracing, alternating round by round on the same
cluster (two clusters side by side differed by more than tracing costs); throughput,
latency and CPU per operation; and the tracing calls themselves timed in this process."""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.harness import environment, fresh_cluster, progress_for
from bench.kv import cluster_pids, medians, midtown_ops, threads, with_cpu
from cli import trace as trace_cli
from cli.output import emit
from cluster import Cluster
from runtime import tracing

OPS = {"put": "Put", "get": "Get", "cas": "CheckAndSet"}
WARM_UP = 20


def breakdown(c: Cluster, spans: Path, count: int, say: Any) -> dict[str, dict[str, Any]]:
    """`count` operations of each kind, one at a time, each traced (after 20 untraced that
    open the connections and read the routes); per kind: the number of traces, their median
    and each step's (cli/trace.py summary)."""
    zk = c.zk_hosts if c.layout == "host" else None
    ops = midtown_ops(c.coordinator_addrs, coalesce=False, zk=zk)
    runs = {op: ops[op](0) for op in OPS}
    for run in runs.values():
        for n in range(WARM_UP):
            run(n)
    tracing.configure("bench client", sample=1.0, file=str(spans))
    try:
        for op, run in runs.items():
            say(f"tracing {count} {op}s, one at a time...")
            for n in range(WARM_UP, WARM_UP + count):
                run(n)
    finally:
        tracing.shutdown()
    time.sleep(2 * tracing.EXPORT_DELAY_MS / 1000)  # the servers' last batches
    loaded, _ = trace_cli.load(str(spans))
    roots = trace_cli.traces(loaded)
    out = {}
    for op, name in OPS.items():
        mine = [r for r in roots if r.name == name and r.service == "bench client"]
        p50 = statistics.median([r.took_ns for r in mine] or [0])
        out[op] = {"traces": len(mine), "p50_ms": round(p50 / 1e6, 3),
                   "processes": sorted({s.service for r in mine for ss in trace_cli.paths(r).values()
                                        for s in ss}),
                   "steps": trace_cli.summary(mine) if mine else []}
    return out


def overhead(c: Cluster, spans: Path, a: argparse.Namespace, say: Any) -> list[dict[str, Any]]:
    """Puts and strong gets at each client count, this process tracing at `a.sample` and not
    tracing, alternating round by round on the same cluster; medians and the ratios on / off."""
    zk = c.zk_hosts if c.layout == "host" else None
    runner = with_cpu(threads(midtown_ops(c.coordinator_addrs, zk=zk)), lambda: cluster_pids(c))
    rows = []
    for op in ("put", "get"):
        for clients in a.clients:
            runs: dict[str, list[dict[str, Any]]] = {"off": [], "on": []}
            for i in range(a.rounds + 1):  # the first round warms up, not counted
                for name in ("off", "on"):
                    if name == "on":
                        tracing.configure("bench client", sample=a.sample, file=str(spans))
                    try:
                        say(f"{op}, {clients} client(s), tracing {name}"
                            f"{f' ({a.sample:g})' if name == 'on' else ''}, round {i}/{a.rounds}...")
                        r = runner(op, clients, a.seconds if i else min(1.0, a.seconds))
                    finally:
                        tracing.shutdown()
                    if i:
                        runs[name].append(r)
            m = {name: medians(rs) for name, rs in runs.items()}
            row: dict[str, Any] = {"op": op if op != "get" else "get (strong)", "clients": clients}
            for name in ("off", "on"):
                for k in ("ops_per_s", "p50_ms", "p99_ms", "cpu_total_us"):
                    row[f"{name}_{k}"] = m[name][k]
            row["throughput_ratio"] = round(row["on_ops_per_s"] / max(1, row["off_ops_per_s"]), 3)
            row["p50_ratio"] = round(row["on_p50_ms"] / max(1e-9, row["off_p50_ms"]), 3)
            row["cpu_ratio"] = round(row["on_cpu_total_us"] / max(1, row["off_cpu_total_us"]), 3)
            rows.append(row)
    return rows


def step_costs(sample: float, n: int = 20_000) -> dict[str, float]:
    """What tracing adds, µs, timed in this process: an SDK operation's span and its call's
    context at `sample` (most not sampled), a server's method called by a caller that did not
    sample it, and an operation traced whole (two spans, kept in memory)."""
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    def client() -> None:
        with tracing.span("Get"), tracing.span("attempt"):
            tracing.headers(None)

    quiet = ((tracing.TRACEPARENT, f"00-{'1' * 32}-{'2' * 16}-00"),)

    def server() -> None:
        with tracing.served("get", quiet), tracing.span("admission"):
            pass

    def per_op(fn: Any, ratio: float | None, times: int) -> float:
        if ratio is not None:
            tracing.configure("bench client", sample=ratio, exporter=InMemorySpanExporter())
        try:
            t = time.perf_counter()
            for _ in range(times):
                fn()
            return round((time.perf_counter() - t) / times * 1e6, 2)
        finally:
            tracing.shutdown()
    return {"off_us": per_op(client, None, n), "client_us": per_op(client, sample, n),
            "server_unsampled_us": per_op(server, 0.0, n), "traced_whole_us": per_op(client, 1.0, n // 10)}


def run(a: argparse.Namespace) -> int:
    say = progress_for(a.json)
    with tempfile.TemporaryDirectory(prefix="midtown-bench-trace-") as tmp:
        spans = Path(tmp) / "spans.jsonl"
        with environment({tracing.ENV_FILE: str(spans), tracing.ENV_SAMPLE: "0"}), \
                fresh_cluster("trace", f"the {a.layout} layout, its servers tracing what they are sent", say,
                              layout=a.layout, client_rate_limit=0) as c:
            c.create_dataset("bench")
            steps = breakdown(c, spans, a.ops_traced, say)
            costs = overhead(c, spans, a, say) if a.rounds else []
    say("timing the tracing calls in this process...")
    micro = step_costs(a.sample)
    if a.json:
        emit({"layout": a.layout, "breakdown": steps, "overhead": costs, "sample": a.sample,
              "step_costs": micro}, True)
        return 0
    for op, b in steps.items():
        print(f"\n{op}, one client, {a.layout} layout: {b['traces']} traces, p50 {b['p50_ms']} ms, "
              f"across {len(b['processes'])} processes ({', '.join(b['processes'])})")
        emit(b["steps"], False, ["p50_ms", "p50_self_ms", "share", "in", "step"])
    print("\np50_ms: the step's median time; p50_self_ms: the part no step below it accounts for; share: "
          "of the operation's median; in: the traces it ran in (a step on any host counts as one)")
    if costs:
        print(f"\ntracing's cost: this process tracing {a.sample:g} of its operations against not tracing, "
              f"on the same cluster (its servers trace what they are sent), alternating; medians of "
              f"{a.rounds} round(s) of {a.seconds:g} s")
        emit(costs, False, ["op", "clients", "off_ops_per_s", "on_ops_per_s", "throughput_ratio",
                            "off_p50_ms", "on_p50_ms", "p50_ratio", "off_cpu_total_us", "on_cpu_total_us",
                            "cpu_ratio"])
    print(f"\nper operation, timed in this process: {micro['off_us']} µs with tracing off, "
          f"{micro['client_us']} µs for an SDK call's spans at {a.sample:g}, "
          f"{micro['server_unsampled_us']} µs for a server's method called by a caller that did not "
          f"sample it, {micro['traced_whole_us']} µs for an operation traced whole (two spans)")
    return 0
