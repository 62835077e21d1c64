"""`midtown-bench placements`: placements looked up per second, cached (in memory, after the
first read) and uncached (a fresh Placements object, so a read from Midtown each time), and
allocated per second under contention: 16 threads asking for the same new (tenant, time)
placements at once. Checks that every thread got the same placement for the same key."""

from __future__ import annotations

import argparse
import threading
import time

from bench.harness import fresh_cluster, log
from cli.output import emit
from midtown.client import Client
from midtown.placements import Placements

HOUR = 3_600_000


def run(a: argparse.Namespace) -> int:
    rows = []
    with fresh_cluster("placements", "the default layout", log) as c:
        c.create_dataset("placements")
        with Client(c.coordinator_addrs, timeout=30) as db:
            pl = Placements(db)
            pl.get_placement("warm", 0)
            n, t0 = 0, time.monotonic()
            while time.monotonic() - t0 < a.seconds:
                pl.get_placement("warm", 0)
                n += 1
            rows.append({"what": "lookup, cached", "per_s": round(n / (time.monotonic() - t0))})
            n, t0 = 0, time.monotonic()
            while time.monotonic() - t0 < a.seconds:
                Placements(db).get_placement("warm", 0)
                n += 1
            rows.append({"what": "lookup, uncached (a read from Midtown)",
                         "per_s": round(n / (time.monotonic() - t0))})
        log(f"allocating under contention: 16 threads, {a.seconds:.0f}s...")
        results: dict[tuple[str, int], set] = {}
        lock = threading.Lock()
        stop = time.monotonic() + a.seconds
        count = [0]

        def worker() -> None:
            with Client(c.coordinator_addrs, timeout=30) as db:
                i = 0
                while time.monotonic() < stop:
                    key = ("t", i * HOUR)  # every thread asks for the same new placements in turn
                    p = Placements(db).get_placement(*key)
                    with lock:
                        results.setdefault(key, set()).add(p)
                        count[0] += 1
                    i += 1

        ts = [threading.Thread(target=worker, daemon=True) for _ in range(16)]
        t0 = time.monotonic()
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        dt = time.monotonic() - t0
        same = all(len(v) == 1 for v in results.values())
        rows.append({"what": "allocate, 16 threads on the same keys", "per_s": round(len(results) / dt),
                     "calls_per_s": round(count[0] / dt), "all_threads_agree": same})
    emit(rows, a.json, ["what", "per_s", "calls_per_s", "all_threads_agree"])
    return 0 if all(r.get("all_threads_agree", True) for r in rows) else 1
