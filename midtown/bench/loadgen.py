"""The load generator both benchmarks share: one thread per client, each calling its own
operation in a loop for a fixed time; throughput and latency percentiles."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def run_workload(make_op: Callable[[int], Callable[[int], object]], clients: int, seconds: float) -> dict:
    lat: list[float] = []
    errors = [0]
    lock = threading.Lock()
    ops = [make_op(i) for i in range(clients)]
    start = threading.Barrier(clients + 1)
    stop_at = [0.0]

    def run(i: int) -> None:
        mine: list[float] = []
        n = 0
        start.wait()
        while time.monotonic() < stop_at[0]:
            t0 = time.perf_counter()
            try:
                ops[i](n)
            except Exception:
                errors[0] += 1
                continue
            mine.append(time.perf_counter() - t0)
            n += 1
        with lock:
            lat.extend(mine)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    stop_at[0] = time.monotonic() + seconds
    t0 = time.monotonic()
    start.wait()
    for t in threads:
        t.join()
    dt = time.monotonic() - t0
    return {"ops_per_s": round(len(lat) / dt), "p50_ms": round(percentile(lat, 0.5) * 1000, 2),
            "p99_ms": round(percentile(lat, 0.99) * 1000, 2), "errors": errors[0]}
