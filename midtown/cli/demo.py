"""`make demo`: exactly-once ingestion through Spark, checked by eye.

Generates events from several tenants with repeats (0.6%, as Segment measured, plus a
re-sent slice), ingests them into Midtown through the `midtown` data source while the first
attempt of one task dies half-way, then prints what went in, what was skipped as duplicates,
what is stored, and each tenant's count beside the count it should have.

Run: python -m midtown.cli.demo [--dir run/local] [--events 20000]
(uses the local cluster in --dir if it runs, else starts one there and stops it after)."""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from midtown.cli.interrupts import exit_code, interrupt_on_stop_signals
from runtime.forking import restart_without_grpc_fork_handlers

TENANTS = ["acme", "globex", "initech", "umbrella", "hooli"]


def make_events(n: int, seed: int = 42) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    rows = [(rng.choice(TENANTS), f"evt-{i:07d}") for i in range(n)]
    repeats = [rows[rng.randrange(n)] for _ in range(int(n * 0.006))]  # duplicates in the input
    resent = rows[n // 2: n // 2 + n // 50]  # a client re-sending a slice after a timeout
    out = rows + repeats + resent
    rng.shuffle(out)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m midtown.cli.demo")
    ap.add_argument("--dir", default="run/local")
    ap.add_argument("--events", type=int, default=20_000)
    a = ap.parse_args(argv)
    # it starts Spark beside its gRPC clients (runtime/forking.py)
    restart_without_grpc_fork_handlers("midtown.cli.demo", sys.argv[1:] if argv is None else argv)
    from midtown import Client
    from midtown.cluster import LAYOUT_DEFAULT, Cluster, ClusterError

    d = Path(a.dir)
    started_here = False
    interrupt_on_stop_signals()
    try:
        try:
            c = Cluster.load(d)
            running = all(p.alive() for p in c.procs.values())
        except ClusterError:
            running = False
        if not running:
            print(f"starting a local cluster in {d} ...", flush=True)
            c = Cluster.load(d) if (d / "cluster.json").exists() else Cluster(d, layout=LAYOUT_DEFAULT)
            started_here = True
            c.start(progress=True)
        return _run(c, a.events, Client)
    except KeyboardInterrupt as e:
        print("interrupted", file=sys.stderr, flush=True)
        return exit_code(e)
    finally:
        if started_here:
            c.stop()


def _run(c: Any, n: int, Client: Any, spark: Any = None, inject_failure: bool = True) -> int:
    """The demo on cluster `c`, in `spark` if given (left running), else in a session of
    its own. Returns 0 when every tenant's count equals its distinct events."""
    from pyspark import TaskContext
    from pyspark.sql import functions as F

    from spark_connector.session import local_session

    name = f"demo_{int(time.time())}"
    c.create_dataset(name)
    rows = make_events(n)
    print(f"\n{len(rows)} events generated for {len(TENANTS)} tenants "
          f"({len(rows) - len(set(rows))} of them repeats); dataset {name!r}", flush=True)
    own = spark is None
    if own:
        spark = local_session("midtown-demo", "OFF")  # the injected task failure would print a Java stack

    def first_attempt_dies(it: Any) -> Any:
        tc = TaskContext.get()
        for i, r in enumerate(it):
            if inject_failure and tc is not None and tc.partitionId() == 0 and tc.attemptNumber() == 0 \
                    and i == 1000:
                raise RuntimeError("demo: the first attempt of task 0 dies half-way")
            yield r

    base = spark.createDataFrame(rows, "tenant string, event_id string").repartition(4)
    df = (spark.createDataFrame(base.rdd.mapPartitions(first_attempt_dies), base.schema)
          .withColumn("metric", F.lit("events")).withColumn("one", F.lit(1).cast("long")))
    group = f"midtown-demo-{name}"
    spark.sparkContext.setJobGroup(group, "the demo's exactly-once write")
    with tempfile.TemporaryDirectory(prefix="midtown-demo-") as tmp:
        report_path = os.path.join(tmp, "report.json")
        t0 = time.monotonic()
        try:
            (df.write.format("midtown").option("zk", c.zk_hosts).option("dataset", name)
             .option("partition_key_column", "tenant").option("local_key_column", "metric")
             .option("operation", "increment").option("value_column", "one").option("id_column", "event_id")
             .option("report", report_path).mode("append").save())
        finally:
            spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
        took = time.monotonic() - t0
        with open(report_path) as f:
            report = json.load(f)  # what the sink counted, from its tasks' commit messages
    tasks, failed_attempts = attempts(spark, group)
    if own:
        spark.stop()
    want = Counter(t for t, _ in set(rows))
    with Client(c.coordinator_addrs, timeout=60) as db:
        got = {t: int(db.get(name, t, "events").value) for t in TENANTS}
    stored = sum(got.values())
    repeats = len(rows) - len(set(rows))
    print(f"\ningested through Spark in {took:.1f} s: {tasks} write tasks, {failed_attempts} "
          "task attempt(s) failed and were run again (Spark's status tracker)")
    print(f"  events in:                     {len(rows)}   ({repeats} repeats of an event id)")
    print(f"  applied (the sink's count):    {report['applied']}")
    print(f"  duplicates skipped (the sink): {report['duplicates']}   (the input's repeats, and "
          "what the failed attempt had written before it died)")
    print(f"  failed (the sink):             {report['failed']}")
    print(f"  events stored:                 {stored}   (distinct event ids: {len(set(rows))})\n")
    print(f"  {'TENANT':10} {'STORED':>8} {'EXPECTED':>9}")
    for t in TENANTS:
        print(f"  {t:10} {got[t]:>8} {want[t]:>9}  {'ok' if got[t] == want[t] else 'WRONG'}")
    ok = got == dict(want) and report["applied"] + report["duplicates"] >= len(rows) \
        and report["failed"] == 0
    print("\nexactly once: " + ("yes, every tenant's count equals its distinct events" if ok else "NO"))
    if failed_attempts < 1:
        print("demo: the injected task failure did not happen (no failed task attempt in Spark's "
              "status tracker): this run shows no retry", file=sys.stderr)
        return 1
    return 0 if ok else 1


def attempts(spark: Any, group: str) -> tuple[int, int]:
    """(tasks, failed task attempts) of the jobs of `group`, from Spark's status tracker."""
    tracker = spark.sparkContext.statusTracker()
    tasks = failed = 0
    for job in tracker.getJobIdsForGroup(group):
        info = tracker.getJobInfo(job)
        for stage in info.stageIds if info else ():
            st = tracker.getStageInfo(stage)
            if st is not None:
                tasks += st.numTasks
                failed += st.numFailedTasks
    return tasks, failed


if __name__ == "__main__":
    sys.exit(main())
