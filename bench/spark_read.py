"""`midtown-bench spark-read`: a whole dataset read through the `midtown` Spark data source,
rows/s and the Python workers' peak memory, at each size asked (1 and 5 million keys by
default), beside reading the same rows from Parquet files on local disk in the same run.

For each size: the keys are loaded through bulk writes (progress on standard error), then
Spark reads them with `spark.read.format("midtown")` and computes `count(*)` and
`sum(length(value))` (every row and every value reaches Spark), timed; the count is
checked against the keys loaded. The same rows, written to Parquet beforehand (untimed),
are read with the same query. While each read runs, the resident memory of every Python
worker of the Spark session is sampled (VmHWM, from /proc, every 0.2 s): the largest is
reported. Parquet is read by the JVM alone (no Python worker). Each size is read
`--rounds` times from each source, alternating: the first round at the first size is the
session's first read (Midtown's starts Spark's Python workers and fills the nodes'
caches), the fastest one a read in a running session."""

from __future__ import annotations

import argparse
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from bench.harness import fresh_cluster, log
from cli.output import emit
from cluster import Cluster
from midtown.client import Client, Write

LOAD_BATCH = 5_000
LOAD_THREADS = 4


def _python_workers() -> list[int]:
    """The pids of the Spark session's Python workers (pyspark.daemon and its forks)."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if b"pyspark.daemon" in cmd or b"pyspark.worker" in cmd:
            out.append(int(pid))
    return out


def _hwm_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class PeakMemory:
    """The largest peak resident memory of any Spark Python worker while it runs."""

    def __init__(self) -> None:
        self.peak_kb = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for pid in _python_workers():
                self.peak_kb = max(self.peak_kb, _hwm_kb(pid))
            self._stop.wait(0.2)

    def __enter__(self) -> PeakMemory:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join(5)


def measure(df: object) -> tuple[float, int, int]:
    """(seconds, rows, value bytes) of `count(*)` and `sum(length(value))` over `df`."""
    t0 = time.monotonic()
    row = df.selectExpr("count(*) AS n", "sum(length(value)) AS b").collect()[0]  # type: ignore[attr-defined]
    return time.monotonic() - t0, int(row.n), int(row.b or 0)


def run(a: argparse.Namespace) -> int:
    from pyspark.sql import functions as F

    from spark_connector.session import local_session

    rows: list[dict] = []
    with fresh_cluster("spark-read", "the default layout, no client rate limit", log,
                       client_rate_limit=0) as c:
        tmp = c.dir.parent
        spark = local_session("midtown-bench-spark-read")
        loaded = 0
        c.create_dataset("big")
        for size in a.keys:
            log(f"loading up to {size:,} keys of {a.value_bytes} B values...")
            if size > loaded:  # one dataset, grown from one size to the next
                _load_range(c, "big", loaded, size, a.value_bytes)
                loaded = size
            parquet = str(tmp / f"rows-{size}.parquet")
            (spark.range(size).select(
                F.concat(F.lit("u"), (F.col("id") % 10_000).cast("string")).alias("partition_key"),
                F.format_string("k%09d", F.col("id")).alias("local_key"),
                F.expr(f"repeat('v', {a.value_bytes})").alias("value"))
             .write.mode("overwrite").parquet(parquet))
            df = (spark.read.format("midtown").option("zk", c.zk_hosts).option("dataset", "big")
                  .option("decode", "utf8").load())
            mine: list[float] = []
            theirs: list[float] = []
            peak_kb = 0
            for r in range(a.rounds):  # alternating, so that both meet the same machine
                log(f"spark: reading {size:,} keys from Midtown (round {r + 1} of {a.rounds})...")
                with PeakMemory() as mem:
                    took, n, b = measure(df)
                if n != size or b != size * a.value_bytes:
                    raise SystemExit(f"the read returned {n:,} rows and {b:,} value bytes, "
                                     f"not {size:,} and {size * a.value_bytes:,}")
                mine.append(took)
                peak_kb = max(peak_kb, mem.peak_kb)
                log(f"spark: reading {size:,} rows from Parquet (round {r + 1} of {a.rounds})...")
                ptook, pn, _ = measure(spark.read.parquet(parquet))
                if pn != size:
                    raise SystemExit(f"Parquet returned {pn:,} rows, not {size:,}")
                theirs.append(ptook)
            partitions = df.rdd.getNumPartitions()  # type: ignore[attr-defined]
            rows.append(figures(size, mine, theirs, peak_kb, partitions))
        spark.stop()
    if a.json:
        emit(rows, True)
        return 0
    emit(rows, False, COLUMNS)
    print(f"\nboth: count(*) and sum(length(value)) over every row, on the same 2-core local Spark, "
          f"{a.rounds} rounds alternating; first: the first round at each size (at the first size, "
          "the session's first read of each: Midtown's starts the Python workers), best: the "
          "fastest round; worker_peak_mb: the largest peak resident memory of a Spark Python "
          "worker during the Midtown reads (Parquet is read by the JVM alone); each count is checked")
    return 0


COLUMNS = ["keys", "partitions", "midtown_first_rows_per_s", "parquet_first_rows_per_s", "first_ratio",
           "midtown_best_rows_per_s", "midtown_best_s", "parquet_best_rows_per_s", "best_ratio",
           "worker_peak_mb"]


def figures(size: int, mine: list[float], theirs: list[float], peak_kb: int, partitions: int) -> dict:
    """One row of the table from the seconds each round took (Midtown's, Parquet's): the
    first round of each and the fastest, as rows/s, and Midtown's over Parquet's. Pure."""
    best, pbest = min(mine), min(theirs)
    return {"keys": size, "partitions": partitions,
            "midtown_first_rows_per_s": round(size / mine[0]),
            "parquet_first_rows_per_s": round(size / theirs[0]), "first_ratio": round(theirs[0] / mine[0], 3),
            "midtown_best_rows_per_s": round(size / best), "midtown_best_s": round(best, 2),
            "parquet_best_rows_per_s": round(size / pbest), "best_ratio": round(pbest / best, 3),
            "worker_peak_mb": round(peak_kb / 1024)}


def _load_range(c: Cluster, dataset: str, start: int, end: int, value_bytes: int) -> None:
    """Keys start..end-1 (partition key u<n % 10,000>, local key k<n>, as the Parquet rows
    are named), through LOAD_THREADS writers."""
    value = b"v" * value_bytes
    lock = threading.Lock()
    done = [0]
    t0 = time.monotonic()
    step = LOAD_BATCH * LOAD_THREADS

    def writer(first: int) -> None:
        with Client(zk=c.zk_hosts, timeout=120) as db:
            for b in range(first, end, step):
                n = min(LOAD_BATCH, end - b)
                db.write_many(dataset, [Write.put(f"u{(b + i) % 10_000}", f"k{b + i:09d}", value)
                                        for i in range(n)])
                with lock:
                    before = done[0]
                    done[0] += n
                    if before // 250_000 != done[0] // 250_000:
                        log(f"loaded {start + done[0]:,} of {end:,} keys "
                            f"({done[0] / max(1e-9, time.monotonic() - t0):,.0f}/s)")

    with ThreadPoolExecutor(LOAD_THREADS) as pool:
        list(pool.map(writer, [start + i * LOAD_BATCH for i in range(LOAD_THREADS)]))
