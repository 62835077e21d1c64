"""`make demo`: exactly-once ingestion through Spark, checked by eye.

Generates events from several tenants with repeats (0.6%, as Segment measured, plus a
re-sent slice), ingests them into Midtown through the `midtown` data source while the first
attempt of one task dies after its first bulk calls were written, then prints what went in,
what was skipped as duplicates (the input's repeats, and what the dying attempt wrote,
counted in the store), what is stored, and each tenant's count beside the count it should
have. Every number and sentence it prints is checked (`Claims`).

Run: python -m cli.demo [--dir run/local] [--events 20000]
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

from cli.interrupts import exit_code, interrupt_on_stop_signals
from runtime.forking import restart_without_grpc_fork_handlers
from spark_connector.source import MidtownDataSource, MidtownWriter, register

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
    ap = argparse.ArgumentParser(prog="python -m cli.demo")
    ap.add_argument("--dir", default="run/local")
    ap.add_argument("--events", type=int, default=20_000)
    a = ap.parse_args(argv)
    # it starts Spark beside its gRPC clients (runtime/forking.py)
    restart_without_grpc_fork_handlers("cli.demo", sys.argv[1:] if argv is None else argv)
    from cluster import LAYOUT_DEFAULT, Cluster, ClusterError
    from midtown import Client

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


ROWS_PER_CALL = 500  # the sink's bulk calls in the demo
DIE_AT = 2 * ROWS_PER_CALL  # task 0's first attempt dies once it has written this many rows


class DyingWriter(MidtownWriter):  # type: ignore[misc]
    """The `midtown` sink, but the first attempt of task 0 writes its first DIE_AT rows
    through the sink's own write path (its bulk calls acknowledged), then dies. (Raising in
    an earlier stage of the task, as the demo once did, killed the attempt before any row
    reached the sink: Spark hands the sink its rows in batches.)"""

    def write(self, iterator: Any) -> Any:
        import itertools

        from pyspark import TaskContext

        from spark_connector.writing import rows_of, write_rows

        tc = TaskContext.get()
        if tc is not None and tc.partitionId() == 0 and tc.attemptNumber() == 0:
            with self.o.conn.client() as db:
                write_rows(self.o, itertools.islice(rows_of(iterator), DIE_AT),
                           lambda ws: db.write_many(self.o.dataset, ws))
            raise RuntimeError(f"demo: the first attempt of task 0 dies after writing {DIE_AT} rows")
        return super().write(iterator)


class DemoDataSource(MidtownDataSource):  # type: ignore[misc]
    @classmethod
    def name(cls) -> str:
        return "midtown_demo"

    def writer(self, schema: Any, overwrite: bool) -> Any:
        w = super().writer(schema, overwrite)
        assert isinstance(w, MidtownWriter)
        return DyingWriter(w.o)


class Claims:
    """What the demo prints that a reader may take as fact: each sentence or number comes
    with the check it rests on. A claim whose check fails is printed as NOT SO and makes the
    demo exit 1; `tests/integration/test_spark.py` fails if any claim printed does not hold."""

    def __init__(self) -> None:
        self.made: list[tuple[str, bool]] = []

    def say(self, text: str, holds: bool) -> None:
        self.made.append((text, holds))
        print(("  " if holds else "  NOT SO: ") + text, flush=True)

    @property
    def all_hold(self) -> bool:
        return all(h for _, h in self.made)


def _run(c: Any, n: int, Client: Any, spark: Any = None, inject_failure: bool = True,
         claims: Claims | None = None) -> int:
    """The demo on cluster `c`, in `spark` if given (left running), else in a session of
    its own. Every task attempt counts into keys of its own (local key
    `events/p<partition>/a<attempt>` of each tenant), so the store shows what each attempt
    wrote: a tenant's count is the sum of its keys. Returns 0 when every claim printed holds
    and the injected failure happened after its attempt had written."""
    from pyspark import TaskContext
    from pyspark.sql import functions as F

    from spark_connector.session import local_session

    claims = claims if claims is not None else Claims()
    name = f"demo_{int(time.time())}"
    c.create_dataset(name)
    rows = make_events(n)
    distinct = len(set(rows))
    repeats = len(rows) - distinct
    print(f"\n{len(rows)} events generated for {len(TENANTS)} tenants ({repeats} of them repeats of an "
          f"event id); dataset {name!r}", flush=True)
    own = spark is None
    if own:
        spark = local_session("midtown-demo", "OFF")  # the injected task failure would print a Java stack

    def tagged(it: Any) -> Any:
        """Each row with its task attempt's key (the stage that writes runs this too, in the
        same attempt)."""
        tc = TaskContext.get()
        assert tc is not None
        key = f"events/p{tc.partitionId()}/a{tc.attemptNumber()}"
        for tenant, event_id in it:
            yield tenant, event_id, key

    base = spark.createDataFrame(rows, "tenant string, event_id string").repartition(4)
    schema = "tenant string, event_id string, metric string"
    df = (spark.createDataFrame(base.rdd.mapPartitions(tagged), schema)
          .withColumn("one", F.lit(1).cast("long")))
    group = f"midtown-demo-{name}"
    spark.sparkContext.setJobGroup(group, "the demo's exactly-once write")
    with tempfile.TemporaryDirectory(prefix="midtown-demo-") as tmp:
        report_path = os.path.join(tmp, "report.json")
        t0 = time.monotonic()
        try:
            if inject_failure:
                register(spark, DemoDataSource)
            source = "midtown_demo" if inject_failure else "midtown"
            (df.write.format(source).option("zk", c.zk_hosts).option("dataset", name)
             .option("partition_key_column", "tenant").option("local_key_column", "metric")
             .option("operation", "increment").option("value_column", "one").option("id_column", "event_id")
             .option("rows_per_call", str(ROWS_PER_CALL)).option("report", report_path).mode("append").save())
        finally:
            spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
        took = time.monotonic() - t0
        with open(report_path) as f:
            report = json.load(f)  # what the sink counted, from its tasks' commit messages
    write_tasks, failed_attempts = attempts(spark, group)
    if own:
        spark.stop()
    want = Counter(t for t, _ in set(rows))
    by_attempt: Counter = Counter()  # (partition, attempt) -> events it applied, from the store
    got: dict[str, int] = {}
    with Client(c.coordinator_addrs, timeout=60) as db:
        for t in TENANTS:
            got[t] = 0
            for it in db.scan_all(name, t):
                _, p, a = it.local_key.decode().split("/")
                by_attempt[(int(p[1:]), int(a[1:]))] += int(it.value.value)
                got[t] += int(it.value.value)
    dying = by_attempt.get((0, 0), 0)
    stored = sum(got.values())
    print(f"\ningested through Spark in {took:.1f} s:", flush=True)
    written_by = {p for p, _ in by_attempt}  # the partitions whose attempts applied events
    retries = {(p, a) for p, a in by_attempt if a > 0}
    claims.say(f"{write_tasks} write tasks; {failed_attempts} task attempt(s) failed and were run again "
               "(Spark's status tracker; the store holds a key of each attempt that wrote)",
               write_tasks == len(written_by) and failed_attempts == len(retries))
    claims.say(f"events in:                     {len(rows)}   ({repeats} repeats of an event id)",
               len(rows) == distinct + repeats == report["rows"])
    claims.say(f"applied (the sink's count):    {report['applied']}   (each distinct event once, less what "
               f"the failed attempt applied: {distinct} - {dying})", report["applied"] == distinct - dying)
    if dying:
        claims.say(f"duplicates skipped (the sink): {report['duplicates']}   = {repeats} repeats in the "
                   f"input + {dying} events the failed attempt had written before it died (the store holds "
                   "them under its key, events/p0/a0)", report["duplicates"] == repeats + dying)
    else:
        claims.say(f"duplicates skipped (the sink): {report['duplicates']}   = the {repeats} repeats in the "
                   "input (no failed attempt wrote anything)", report["duplicates"] == repeats)
    claims.say(f"failed (the sink):             {report['failed']}", report["failed"] == 0)
    claims.say(f"events stored:                 {stored}   (distinct event ids: {distinct})",
               stored == distinct)
    print(f"\n  {'TENANT':10} {'STORED':>8} {'EXPECTED':>9}")
    for t in TENANTS:
        claims.say(f"{t:10} {got[t]:>8} {want[t]:>9}", got[t] == want[t])
    ok = claims.all_hold
    print("\nexactly once: " + ("yes, every tenant's count equals its distinct events, and every number "
                                "above is checked" if ok else "NO: see the lines marked NOT SO"))
    if inject_failure and (failed_attempts < 1 or dying == 0):
        print("demo: the injected task failure did not happen after its attempt had written (failed "
              f"attempts: {failed_attempts}, events it wrote: {dying}): this run shows no retry",
              file=sys.stderr)
        return 1
    if not inject_failure:
        print("demo: the injected task failure did not happen (no failed task attempt in Spark's "
              "status tracker): this run shows no retry", file=sys.stderr)
        return 1
    return 0 if ok else 1


def attempts(spark: Any, group: str) -> tuple[int, int]:
    """(tasks, failed task attempts) of the stage that writes, in the jobs of `group`, from
    Spark's status tracker: each job's last stage (the earlier ones shuffle the input and
    write nothing)."""
    tracker = spark.sparkContext.statusTracker()
    tasks = failed = 0
    for job in tracker.getJobIdsForGroup(group):
        info = tracker.getJobInfo(job)
        if info is None or not info.stageIds:
            continue
        st = tracker.getStageInfo(max(info.stageIds))
        if st is not None:
            tasks += st.numTasks
            failed += st.numFailedTasks
    return tasks, failed


if __name__ == "__main__":
    sys.exit(main())
