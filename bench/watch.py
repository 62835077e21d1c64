"""`midtown-bench watch`: changes delivered per second to 1 watcher and to 16, and the delay
from a put's acknowledgement to its delivery (p50, p99), on a fresh local cluster.

Throughput: writers put as fast as they can (bulk writes of BATCH keys, WRITERS threads)
for `--seconds`, while N watchers (threads of one process, each its own Client) watch the
dataset from "now"; each counts the changes it receives until it has them all (every
watcher must see every put: checked). Delivered/s is each watcher's count over the time
from the first put to its last change; the table gives the median watcher's and the
writers' own rate beside it.

Delay: one client puts a key every 1/--rate s; a watcher notes when each key's change
arrives; the delay is that moment minus the put's acknowledgement (both in this process,
monotonic clock). A change may arrive before the acknowledgement (the watch and the answer
race): counted as 0."""

from __future__ import annotations

import argparse
import statistics
import threading
import time

from bench.harness import fresh_cluster, log
from bench.loadgen import percentile
from cli.output import emit
from cluster import Cluster
from midtown.client import Client, Watcher, Write

BATCH = 200
WRITERS = 4


class Counter:
    """A watcher counting the changes it receives, and when the last came."""

    def __init__(self, zk: str, dataset: str) -> None:
        self.db = Client(zk=zk, timeout=60)
        self.w: Watcher = self.db.watch(dataset, "now")
        self.n = 0
        self.last = 0.0
        self.error: Exception | None = None
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self) -> None:
        try:
            for _ in self.w:
                self.n += 1
                self.last = time.monotonic()
        except Exception as e:
            self.error = e

    def ready(self) -> bool:
        return bool(self.w.positions) or self.error is not None

    def close(self) -> None:
        self.w.close()
        self.t.join(30)
        self.db.close()


def throughput(c: Cluster, dataset: str, watchers: int, seconds: float) -> dict:
    counters = [Counter(c.zk_hosts, dataset) for _ in range(watchers)]
    try:
        deadline = time.monotonic() + 60
        while not all(x.ready() for x in counters):
            if time.monotonic() > deadline:
                raise SystemExit("the watchers did not start within 60 s")
            time.sleep(0.05)
        written = [0] * WRITERS
        stop = time.monotonic() + seconds
        t0 = time.monotonic()

        def writer(i: int) -> None:
            with Client(zk=c.zk_hosts, timeout=60) as db:
                n = 0
                while time.monotonic() < stop:
                    db.write_many(dataset, [Write.put(f"w{i}-{(n + j) % 5000}", b"k", b"v" * 100)
                                            for j in range(BATCH)])
                    n += BATCH
                    written[i] = n

        ts = [threading.Thread(target=writer, args=(i,)) for i in range(WRITERS)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        wrote_s = time.monotonic() - t0
        total = sum(written)
        log(f"{watchers} watcher(s): {total:,} puts in {wrote_s:.1f} s; waiting for every watcher "
            "to get them")
        deadline = time.monotonic() + 300
        while any(x.n < total and x.error is None for x in counters):
            if time.monotonic() > deadline:
                raise SystemExit(f"after 300 s the watchers had {sorted(x.n for x in counters)} of {total:,}")
            time.sleep(0.1)
        errors = [x.error for x in counters if x.error is not None]
        if errors:
            raise SystemExit(f"a watcher failed: {errors[0]}")
        if any(x.n != total for x in counters):
            raise SystemExit(f"watchers got {sorted(x.n for x in counters)} changes, not {total:,} each")
        rates = sorted(x.n / (x.last - t0) for x in counters)
        return {"watchers": watchers, "puts": total, "puts_per_s": round(total / wrote_s),
                "delivered_per_s_per_watcher": round(statistics.median(rates)),
                "delivered_per_s_all": round(sum(rates)), "slowest_watcher_per_s": round(rates[0])}
    finally:
        for x in counters:
            x.close()


def delay(c: Cluster, dataset: str, count: int, rate: float) -> dict:
    acked: dict[bytes, float] = {}
    arrived: dict[bytes, float] = {}
    with Client(zk=c.zk_hosts, timeout=60) as db, Client(zk=c.zk_hosts, timeout=60) as wdb:
        w = wdb.watch(dataset, "now")
        done = threading.Event()

        def watch() -> None:
            for ch in w:
                arrived.setdefault(ch.partition_key, time.monotonic())
                if len(arrived) >= count:
                    done.set()
                    return

        t = threading.Thread(target=watch, daemon=True)
        t.start()
        while not w.positions:
            time.sleep(0.05)
        for i in range(count):
            key = f"d{i}".encode()
            db.put(dataset, key, b"k", b"v")
            acked[key] = time.monotonic()
            time.sleep(1 / rate)
        if not done.wait(60):
            raise SystemExit(f"the watcher got {len(arrived)} of {count} puts within 60 s")
        w.close()
    ms = [max(0.0, arrived[k] - acked[k]) * 1000 for k in acked]
    return {"puts": count, "rate_per_s": rate, "p50_ms": round(percentile(ms, 0.5), 1),
            "p99_ms": round(percentile(ms, 0.99), 1), "max_ms": round(max(ms), 1)}


def run(a: argparse.Namespace) -> int:
    rows: list[dict] = []
    with fresh_cluster("watch", "the default layout, no client rate limit", log, client_rate_limit=0) as c:
        for n in a.watchers:
            c.create_dataset(f"t{n}")
            log(f"throughput with {n} watcher(s), {a.seconds:.0f} s of puts...")
            rows.append(throughput(c, f"t{n}", n, a.seconds))
        c.create_dataset("delay")
        log(f"delay: {a.count} puts at {a.rate:.0f}/s, one watcher...")
        lat = delay(c, "delay", a.count, a.rate)
    if a.json:
        emit({"throughput": rows, "delay": lat}, True)
        return 0
    emit(rows, False, ["watchers", "puts", "puts_per_s", "delivered_per_s_per_watcher",
                       "delivered_per_s_all", "slowest_watcher_per_s"])
    print()
    emit([lat], False, ["puts", "rate_per_s", "p50_ms", "p99_ms", "max_ms"])
    print("\ndelivered_per_s_per_watcher: the median watcher's changes over the time from the first put "
          "to its last change (each watcher received every put: checked); delay: a change's arrival at "
          "a watcher minus its put's acknowledgement, both seen in this process")
    return 0
