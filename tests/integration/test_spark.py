"""The Spark data source on real PySpark (local mode, task retries on) and a real cluster:
each test asserts exact counts (docs/spark.md)."""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cluster import LAYOUT_DEFAULT, Cluster
from midtown import Client
from tests.integration.conftest import started

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def sc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """The layout `midtown cluster up` starts (the host layout): what a data engineer runs."""
    with started(tmp_path_factory.mktemp("spark") / "c", layout=LAYOUT_DEFAULT) as c:
        yield c


def events(n: int, users: int, repeat_rate: float, seed: int) -> list[tuple[str, str]]:
    """(user, event id) rows; `repeat_rate` of them repeat an earlier event (Segment
    measured 0.6%), anywhere in the input."""
    rng = random.Random(seed)
    rows = [(f"u{rng.randrange(users)}", f"ev-{seed}-{i}") for i in range(n)]
    for _ in range(int(n * repeat_rate)):
        rows.insert(rng.randrange(len(rows)), rows[rng.randrange(n)])
    return rows


def counters(c: Cluster, dataset: str) -> dict[str, int]:
    out: dict[str, int] = {}
    with Client(c.coordinator_addrs, timeout=60) as db:
        for shard in range(db.shards(dataset)):
            for it in (i for page in db.scan_shard(dataset, shard) for i in page.items):
                if it.local_key == b"n":
                    out[it.partition_key.decode()] = int(it.value.value)
    return out


def write_increments(spark: Any, c: Cluster, dataset: str, df: Any, **extra: str) -> None:
    w = (df.write.format("midtown").option("zk", c.zk_hosts).option("dataset", dataset)
         .option("partition_key_column", "user").option("local_key_column", "metric")
         .option("operation", "increment").option("value_column", "one")
         .option("id_column", "event_id").option("rows_per_call", "200"))
    for k, v in extra.items():
        w = w.option(k, v)
    w.mode("append").save()


def frame(spark: Any, rows: list[tuple[str, str]], partitions: int = 4) -> Any:
    from pyspark.sql import functions as F

    return (spark.createDataFrame(rows, "user string, event_id string").repartition(partitions)
            .withColumn("metric", F.lit("n")).withColumn("one", F.lit(1).cast("long")))


def test_repeats_and_a_job_run_twice_count_each_event_once(spark: Any, sc: Cluster) -> None:
    sc.create_dataset("counts")
    rows = events(6000, 50, 0.006, seed=1)
    assert len(rows) > len(set(rows))
    df = frame(spark, rows)
    write_increments(spark, sc, "counts", df)
    write_increments(spark, sc, "counts", df)  # the same job again
    want = Counter(u for u, _ in set(rows))
    assert counters(sc, "counts") == dict(want)


def test_a_task_failing_half_way_then_succeeding(spark: Any, sc: Cluster) -> None:
    """The first attempt of each task writes about half its rows, then fails; Spark runs it
    again: every event exactly once."""
    from pyspark import TaskContext

    sc.create_dataset("retried")
    rows = events(4000, 20, 0.0, seed=2)

    def flaky(it: Iterator[Any]) -> Iterator[Any]:
        tc = TaskContext.get()
        for i, r in enumerate(it):
            if tc is not None and tc.attemptNumber() == 0 and i == 500:
                raise RuntimeError("injected: the first attempt dies half-way")
            yield r

    base = frame(spark, rows)
    df = spark.createDataFrame(base.rdd.mapPartitions(flaky), base.schema)
    write_increments(spark, sc, "retried", df)
    assert counters(sc, "retried") == dict(Counter(u for u, _ in rows))


def test_two_attempts_of_the_same_rows_at_once(spark: Any, sc: Cluster) -> None:
    """Speculation cannot be triggered in local mode: two jobs write the same rows at the
    same time, as two attempts of one task would."""
    sc.create_dataset("twice")
    rows = events(4000, 20, 0.0, seed=3)
    df = frame(spark, rows).cache()
    errors: list[BaseException] = []

    def run() -> None:
        # A JVM thread has no active session of its own, and data sources registered from
        # Python are found through it.
        spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
        try:
            write_increments(spark, sc, "twice", df)
        except BaseException as e:  # noqa: B036 - reported below
            errors.append(e)

    ts = [threading.Thread(target=run) for _ in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(300)
    assert not errors, [str(e)[:3000] for e in errors]
    assert counters(sc, "twice") == dict(Counter(u for u, _ in rows))


def test_read_back_equals_the_sdk_and_one_partition_key(spark: Any, sc: Cluster) -> None:
    sc.create_dataset("kv")
    with Client(sc.coordinator_addrs, timeout=60) as db:
        from midtown import Write

        db.write_many("kv", [Write.put(f"p{i % 13}", f"l{i}", f"v{i}".encode()) for i in range(700)])
        want = set()
        for shard in range(db.shards("kv")):
            want |= {(i.partition_key, i.local_key, i.value.value, i.value.version)
                     for page in db.scan_shard("kv", shard) for i in page.items}
    df = spark.read.format("midtown").option("zk", sc.zk_hosts).option("dataset", "kv").load()
    got = {(r.partition_key, r.local_key, r.value, r.version) for r in df.collect()}
    assert got == want and len(got) == 700
    strings = (spark.read.format("midtown").option("zk", sc.zk_hosts).option("dataset", "kv")
               .option("decode", "utf8").load())
    one = strings.where("partition_key = 'p3'").collect()
    assert {r.local_key for r in one} == {f"l{i}" for i in range(700) if i % 13 == 3}
    assert all(r.value == "v" + r.local_key[1:] for r in one)


def test_bad_options_fail_at_planning_naming_the_option(spark: Any, sc: Cluster) -> None:
    sc.create_dataset("opts")
    df = spark.createDataFrame([("a", "x", "v")], "partition_key string, local_key string, value string")

    def write(**o: str) -> None:
        w = df.write.format("midtown")
        for k, v in o.items():
            w = w.option(k, v)
        w.mode("append").save()

    zk = sc.zk_hosts
    cases = [
        ({"zk": zk}, "dataset"),
        ({"zk": zk, "dataset": "nope"}, "dataset"),
        ({"dataset": "opts"}, "zk"),
        ({"zk": zk, "dataset": "opts", "partition_key_column": "missing"}, "partition_key_column"),
        ({"zk": zk, "dataset": "opts", "operation": "increment"}, "value_column"),
        ({"zk": zk, "dataset": "opts", "operation": "merge"}, "operation"),
        ({"zk": zk, "dataset": "opts", "rows_per_call": "0"}, "rows_per_call"),
    ]
    for opts, needle in cases:
        with pytest.raises(Exception) as ei:
            write(**opts)
        assert needle in str(ei.value), (opts, str(ei.value)[:500])
    with pytest.raises(Exception) as ei:
        df.write.format("midtown").option("zk", zk).option("dataset", "opts").mode("overwrite").save()
    assert "overwrite" in str(ei.value) and "append" in str(ei.value)
    with pytest.raises(Exception) as ei:
        spark.read.format("midtown").option("zk", zk).option("dataset", "opts").option(
            "consistency", "maybe").load().collect()
    assert "consistency" in str(ei.value)


def _stream(spark: Any, c: Cluster, src: Path, cp: Path, dataset: str, **extra: str) -> Any:
    """A streaming query over the JSON files in `src`, one file per micro-batch, run until
    it has taken every file there (availableNow)."""
    from pyspark.sql import functions as F

    df = (spark.readStream.schema("user string, event_id string").option("maxFilesPerTrigger", 1)
          .json(str(src)).withColumn("metric", F.lit("n")).withColumn("one", F.lit(1).cast("long")))
    w = (df.writeStream.format("midtown").option("zk", c.zk_hosts).option("dataset", dataset)
         .option("partition_key_column", "user").option("local_key_column", "metric")
         .option("operation", "increment").option("value_column", "one")
         .option("checkpointLocation", str(cp)))
    for k, v in extra.items():
        w = w.option(k, v)
    return w.trigger(availableNow=True).start()


def _files(src: Path, batches: list[list[tuple[str, str]]]) -> None:
    import json

    src.mkdir(parents=True, exist_ok=True)
    for i, rows in enumerate(batches):
        (src / f"part-{i:03d}.json").write_text("".join(json.dumps({"user": u, "event_id": e}) + "\n"
                                                         for u, e in rows))


def test_a_stream_restarted_between_write_and_commit_replays_nothing(spark: Any, sc: Cluster,
                                                                    tmp_path: Path) -> None:
    """The sink committed the last batch in Midtown, but Spark stopped before recording it
    in its checkpoint (its commit file is gone): on restart Spark replays that batch, and
    the sink skips it whole. Written without event ids, so a batch written twice would
    count twice."""
    sc.create_dataset("stream")
    batches = [events(300, 7, 0.0, seed=10 + i) for i in range(3)]
    _files(tmp_path / "src", batches)
    q = _stream(spark, sc, tmp_path / "src", tmp_path / "cp", "stream")
    q.awaitTermination(180)
    assert q.exception() is None
    commits = sorted((tmp_path / "cp" / "commits").glob("[0-9]*"), key=lambda p: int(p.name))
    assert [p.name for p in commits] == ["0", "1", "2"]
    commits[-1].unlink()  # the crash: the batch is in Midtown, not in Spark's checkpoint
    (commits[-1].parent / f".{commits[-1].name}.crc").unlink(missing_ok=True)
    q = _stream(spark, sc, tmp_path / "src", tmp_path / "cp", "stream")
    q.awaitTermination(180)
    assert q.exception() is None
    assert (tmp_path / "cp" / "commits" / "2").exists(), "the batch was replayed"
    want = Counter(u for rows in batches for u, _ in rows)
    assert counters(sc, "stream") == dict(want)


def test_a_second_copy_of_a_query_fails_with_a_conflict(spark: Any, sc: Cluster, tmp_path: Path) -> None:
    sc.create_dataset("copies")
    _files(tmp_path / "src", [events(100, 5, 0.0, seed=20 + i) for i in range(2)])
    a = _stream(spark, sc, tmp_path / "src", tmp_path / "cp-a", "copies", query_id="ingest")
    a.awaitTermination(180)
    assert a.exception() is None
    before = counters(sc, "copies")
    b = _stream(spark, sc, tmp_path / "src", tmp_path / "cp-b", "copies", query_id="ingest")
    with pytest.raises(Exception):  # noqa: B017 - the query's failure, checked below
        b.awaitTermination(180)
    assert "another running copy" in str(b.exception())
    assert counters(sc, "copies") == before, "the second copy wrote nothing"


def test_kills_during_an_ingestion_lose_and_duplicate_nothing(spark: Any, sc: Cluster) -> None:
    """A storage node and then the log writer are SIGKILLed (and restarted) while Spark
    writes (in the host layout, a host that does not write the log, then the writer's
    host); tasks whose calls fail are retried by Spark: every event exactly once."""
    from log import zk as logzk

    sc.create_dataset("killed")
    rows = events(30000, 40, 0.006, seed=4)
    df = frame(spark, rows, partitions=8)
    done = threading.Event()
    errors: list[BaseException] = []

    def ingest() -> None:
        spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
        try:
            write_increments(spark, sc, "killed", df)
        except BaseException as e:  # noqa: B036 - reported below
            errors.append(e)
        finally:
            done.set()

    t = threading.Thread(target=ingest)
    t.start()
    import time

    def process(role: str, beside_writer: bool) -> str:
        """The process that is a `role` with the log writer's id, or with another id."""
        w = logzk.read_writer(zk, 0)
        assert w is not None, "log 0 has no writer"
        return next(p.name for p in sc.playing(role) if (p.server_id == w["server"]) == beside_writer)

    zk = logzk.connect(sc.zk_hosts)
    try:
        time.sleep(3)
        storage = process("storage-node", beside_writer=False)
        sc.kill(storage)
        time.sleep(2)
        sc.restart(storage)
        if not done.is_set():
            writer = process("log-server", beside_writer=True)
            sc.kill(writer)
            time.sleep(2)
            sc.restart(writer)
    finally:
        zk.stop()
        zk.close()
    t.join(600)
    assert not errors, [str(e)[:2000] for e in errors]
    assert counters(sc, "killed") == dict(Counter(u for u, _ in set(rows)))


def test_routing_by_placements_keeps_tasks_to_few_tenants_and_counts_exact(spark: Any, sc: Cluster) -> None:
    """A many-tenant batch routed by placements (one shard per tenant here): each task sees
    only the tenants whose placements hold its shard, and every event is counted once."""
    from pyspark import TaskContext
    from pyspark.sql import functions as F

    from midtown.placements import Placements
    from spark_connector import routed

    sc.create_dataset("placements")
    sc.create_dataset("tenants")
    with Client(sc.coordinator_addrs, timeout=60) as db:
        Placements(db).update_settings(lambda s: type(s)(16, s.placement_ms, 1, (), {}, {}))
    rng = random.Random(9)
    tenants = [f"t{i}" for i in range(24)]
    hour = 1_700_000_000_000 - 1_700_000_000_000 % 3_600_000
    rows = [(rng.choice(tenants), f"ev{i}", hour + rng.randrange(3_600_000)) for i in range(3000)]
    rows += rows[:30]  # repeats
    df = spark.createDataFrame(rows, "tenant string, event_id string, ts_ms long")
    r = routed(df, zk=sc.zk_hosts, tenant_column="tenant", time_column="ts_ms", id_column="event_id")

    def tenants_per_task(it: Any) -> Any:
        seen = {(row["tenant"], row["placement_shard"]) for row in it}
        yield (TaskContext.get().partitionId(), sorted(seen))  # type: ignore[union-attr]

    with Client(sc.coordinator_addrs, timeout=60) as db:
        home = {t: set(Placements(db).get_placement(t, hour).shards) for t in tenants}
    for _, pairs in r.rdd.mapPartitions(tenants_per_task).collect():
        task_shards = {s for _, s in pairs}
        seen = {t for t, _ in pairs}
        # A task holds only the tenants placed on its shards, and few of them.
        assert seen <= {t for t in tenants if home[t] & task_shards}, pairs
        assert len(seen) <= len(tenants) // 2, pairs
    (r.withColumn("metric", F.lit("n")).withColumn("one", F.lit(1).cast("long"))
     .write.format("midtown").option("zk", sc.zk_hosts).option("dataset", "tenants")
     .option("partition_key_column", "tenant").option("local_key_column", "metric")
     .option("operation", "increment").option("value_column", "one").option("id_column", "event_id")
     .mode("append").save())
    assert counters(sc, "tenants") == dict(Counter(t for t, _, _ in set(rows)))


def test_make_demo_prints_only_what_it_checked(spark: Any, sc: Cluster,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """`make demo`'s run (cli/demo.py) in this session: the first attempt of a task
    dies after its first bulk calls were written. Every line it prints with a number is a
    claim with its own check (or the input it generated, or a time it measured), and every
    claim holds; among them, the duplicates the sink skipped are the input's repeats plus
    what the dying attempt wrote, counted in the store under that attempt's key, more than
    zero. (It once printed a fixed sentence saying so while the attempt had written nothing.)"""
    import re

    from cli import demo

    claims = demo.Claims()
    assert demo._run(sc, 8000, Client, spark, claims=claims) == 0
    out = capsys.readouterr().out
    assert claims.made and [t for t, holds in claims.made if not holds] == []
    said = {t for t, _ in claims.made}
    for line in out.splitlines():
        if any(ch.isdigit() for ch in line) and not re.match(
                r"^(\d+ events generated for \d+ tenants|ingested through Spark in [\d.]+ s:$)", line):
            assert line.strip() in said, f"printed without a check: {line!r}"
    dups = next(t for t in said if t.startswith("duplicates skipped"))
    m = re.search(r"= (\d+) repeats in the input \+ (\d+) events the failed attempt had written", dups)
    assert m is not None and int(m.group(2)) > 0, dups
    assert "exactly once: yes" in out and all(t in out for t in demo.TENANTS)


def test_the_demo_fails_when_its_task_failure_does_not_happen(
        spark: Any, sc: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    """The demo is evidence of a retry: without one, it says so and exits 1."""
    from cli import demo

    assert demo._run(sc, 500, Client, spark, inject_failure=False) == 1
    assert "the injected task failure did not happen" in capsys.readouterr().err
