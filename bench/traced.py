"""`midtown-bench trace`: where a single client's put, strong get and CAS spend their time,
step by step and process by process, from traces (runtime/tracing.py); and what tracing
costs at a sampling ratio (1% by default) against a cluster with tracing off.

Two local clusters of the same layout run side by side: one with tracing off, one whose
servers write their spans to a file and follow their callers (a ratio of 0: they trace
what a traced client sends). The breakdown: `--ops-traced` operations of each kind, one at
a time, every one traced, summarised as `midtown trace --summary` does (each step's median).
The overhead: puts and strong gets at each client count, the two clusters alternating round
by round (this machine is noisy), this process tracing at `--sample` against the one and
not at all against the other; throughput, latency and the servers' CPU per operation."""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.harness import fresh_cluster, progress_for
from bench.kv import cluster_pids, medians, midtown_ops, threads, with_cpu
from cli import trace as trace_cli
from cli.output import emit
from cluster import Cluster
from runtime import tracing

OPS = {"put": "Put", "get": "Get", "cas": "CheckAndSet"}
WARM_UP = 20


@contextlib.contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    """`values` in this process's environment while the block runs (the processes it starts
    inherit them), the old ones back after."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


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
        out[op] = {"traces": len(mine), "p50_ms": round(_median([r.took_ns for r in mine]) / 1e6, 3),
                   "processes": sorted({s.service for r in mine for ss in trace_cli.paths(r).values()
                                        for s in ss}),
                   "steps": trace_cli.summary(mine) if mine else []}
    return out


def _median(xs: list[int]) -> float:
    if not xs:
        return 0.0
    xs = sorted(xs)
    mid = len(xs) // 2
    return xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2


def overhead(off: Cluster, on: Cluster, spans: Path, a: argparse.Namespace, say: Any) -> list[dict[str, Any]]:
    """Puts and strong gets at each client count, the clusters alternating; medians and the
    ratios on / off."""
    runners = {}
    for name, c in (("off", off), ("on", on)):
        zk = c.zk_hosts if c.layout == "host" else None
        runners[name] = with_cpu(threads(midtown_ops(c.coordinator_addrs, zk=zk)),
                                 lambda c=c: cluster_pids(c))  # type: ignore[misc]
    rows = []
    for op in ("put", "get"):
        for clients in a.clients:
            runs: dict[str, list[dict[str, Any]]] = {"off": [], "on": []}
            for i in range(a.rounds + 1):  # the first round warms up, not counted
                for name, runner in runners.items():
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


def run(a: argparse.Namespace) -> int:
    say = progress_for(a.json)
    with tempfile.TemporaryDirectory(prefix="midtown-bench-trace-") as tmp, contextlib.ExitStack() as stack:
        spans = Path(tmp) / "spans.jsonl"
        settings = {"layout": a.layout, "client_rate_limit": 0}
        off = stack.enter_context(fresh_cluster("trace-off", f"the {a.layout} layout, tracing off", say,
                                                **settings))
        with environment({tracing.ENV_FILE: str(spans), tracing.ENV_SAMPLE: "0"}):
            on = stack.enter_context(fresh_cluster("trace-on", f"the {a.layout} layout, tracing on "
                                                   "(following the callers)", say, check_quiet=False,
                                                   **settings))
        for c in (off, on):
            c.create_dataset("bench")
        steps = breakdown(on, spans, a.ops_traced, say)
        costs = overhead(off, on, spans, a, say) if a.rounds else []
    if a.json:
        emit({"layout": a.layout, "breakdown": steps, "overhead": costs, "sample": a.sample}, True)
        return 0
    for op, b in steps.items():
        print(f"\n{op}, one client, {a.layout} layout: {b['traces']} traces, p50 {b['p50_ms']} ms, "
              f"across {len(b['processes'])} processes ({', '.join(b['processes'])})")
        emit(b["steps"], False, ["p50_ms", "p50_self_ms", "share", "in", "step"])
    if costs:
        print(f"\ntracing's cost: this process tracing {a.sample:g} of its operations against a cluster "
              "tracing what it is sent, beside one with tracing off; medians of "
              f"{a.rounds} round(s) of {a.seconds:g} s, alternating")
        emit(costs, False, ["op", "clients", "off_ops_per_s", "on_ops_per_s", "throughput_ratio",
                            "off_p50_ms", "on_p50_ms", "p50_ratio", "off_cpu_total_us", "on_cpu_total_us",
                            "cpu_ratio"])
    print("\np50_ms: the step's median time; p50_self_ms: the part no step below it accounts for; share: "
          "of the operation's median; in: the traces it ran in (a step on any host counts as one)")
    return 0
