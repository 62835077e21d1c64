"""What a data engineer trips on with the Spark data source, on real PySpark and a real
cluster (docs/spark.md: threads, query ids, what fails a job and what fails a row, large
shards read by several tasks)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cluster import LAYOUT_DEFAULT, Cluster
from midtown import Client, Write
from tests.integration.conftest import started
from tests.integration.test_spark import _files, _stream, counters, events, frame, write_increments

pytestmark = pytest.mark.integration

@pytest.fixture(scope="module")
def ec(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with started(tmp_path_factory.mktemp("edges") / "c", layout=LAYOUT_DEFAULT) as c:
        yield c


def test_saves_from_two_threads_at_once(spark: Any, ec: Cluster) -> None:
    """Pipelines write in parallel threads of one session (the FAIR scheduler): a thread
    started after the session finds the source too."""
    ec.create_dataset("threads")
    frames = [frame(spark, events(500, 20, 0.0, seed=100 + i)) for i in range(2)]
    wanted = Counter(u for i in range(2) for u, _ in events(500, 20, 0.0, seed=100 + i))
    failures: list[BaseException] = []

    def save(df: Any) -> None:
        try:
            write_increments(spark, ec, "threads", df)
        except BaseException as e:  # noqa: BLE001 - reported below
            failures.append(e)

    threads = [threading.Thread(target=save, args=(df,)) for df in frames]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not failures, str(failures[0])[:600]
    assert counters(ec, "threads") == dict(wanted)


def test_a_session_built_the_plain_way_reads_writes_and_pushes_down(spark: Any, ec: Cluster) -> None:
    """The README's lines on a session as a user builds it (the run's session sets nothing
    of Midtown's: spark_connector/session.py; filter pushdown off, as Spark 4 leaves it):
    register() (twice is harmless) turns pushdown on; a save with no mode appends; a read
    with `where(partition_key = ...)` pushes the key down (it failed:
    DATA_SOURCE_PUSHDOWN_DISABLED), even where pushdown was turned off again after
    register(); format("Midtown") from a thread started after the session saves and reads
    (it failed: DATA_SOURCE_NOT_FOUND, the name matched in lower case only)."""
    from spark_connector import register
    from spark_connector.source import PUSHDOWN_CONF

    spark.conf.unset(PUSHDOWN_CONF)
    assert spark.conf.get(PUSHDOWN_CONF) == "false"
    register(spark)
    assert spark.conf.get(PUSHDOWN_CONF) == "true"
    spark.conf.unset(PUSHDOWN_CONF)
    ec.create_dataset("plain")
    rows = [(f"p{i % 7}", f"l{i:03d}", f"v{i}") for i in range(210)]
    df = spark.createDataFrame(rows, "partition_key string, local_key string, value string")
    df.write.format("midtown").option("zk", ec.zk_hosts).option("dataset", "plain").save()  # no mode
    spark.conf.unset(PUSHDOWN_CONF)
    got = (spark.read.format("midtown").option("zk", ec.zk_hosts).option("dataset", "plain")
           .option("decode", "utf8").load().where("partition_key = 'p3' AND local_key >= 'l100'").collect())
    assert sorted((r.partition_key, r.local_key, r.value) for r in got) == sorted(
        r for r in rows if r[0] == "p3" and r[1] >= "l100")
    with pytest.raises(Exception, match="mode: 'overwrite' is refused"):
        (df.write.format("midtown").option("zk", ec.zk_hosts).option("dataset", "plain")
         .mode("overwrite").save())
    outcome: list[object] = []

    def in_a_thread() -> None:
        try:
            (df.write.format("Midtown").option("zk", ec.zk_hosts).option("dataset", "plain")
             .option("local_key_column", "value").save())
            outcome.append(spark.read.format("MIDTOWN").option("zk", ec.zk_hosts)
                           .option("dataset", "plain").load().count())
        except BaseException as e:  # noqa: BLE001 - reported below
            outcome.append(e)
    t = threading.Thread(target=in_a_thread)
    t.start()
    t.join(300)
    assert outcome == [420], str(outcome)[:2000]


def test_a_shard_larger_than_a_split_is_read_by_several_tasks(spark: Any, ec: Cluster) -> None:
    """A shard holding more than split.sizeInMB is cut into key ranges, each its own Spark
    partition, all read from one view of the shard (one position; test_shard_scans.py
    checks the views); the other shards, small, are packed into four partitions. What the
    read returns equals the SDK's scan, each row once."""
    ec.create_dataset("wide")
    value = b"v" * 1000
    with Client(zk=ec.zk_hosts, timeout=60) as db:
        db.write_many("wide", [Write.put("one-key", f"l{i:05d}", value) for i in range(3500)])
        shards = db.shards("wide")
        want = {(i.partition_key, i.local_key, i.value.value)
                for s in range(shards) for page in db.scan_shard("wide", s) for i in page.items}
        plan = [db.shard_splits("wide", s, split_bytes=1 << 20) for s in range(shards)]
    big = [p for p in plan if len(p.splits) > 1]
    assert len(big) == 1 and len(big[0].splits) == 4, [len(p.splits) for p in plan]
    assert sum(s.keys for s in big[0].splits) == 3500
    df = (spark.read.format("midtown").option("zk", ec.zk_hosts).option("dataset", "wide")
          .option("split.sizeInMB", "1").option("fetch.sizeInRows", "300").load())
    assert df.rdd.getNumPartitions() == 4 + 4
    rows = df.collect()
    got = {(r.partition_key, r.local_key, r.value) for r in rows}
    assert len(rows) == len(got) == len(want) == 3500 and got == want


def test_a_query_id_is_taken_over_after_its_lease_or_on_request(spark: Any, ec: Cluster,
                                                               tmp_path: Path) -> None:
    """A query whose checkpoint was lost runs again under the same query_id: refused while
    the last copy's lease (its last commit) is fresh, saying it is running; taken over with
    takeover=true, or once the lease has run out. Event ids keep the counts exact."""
    ec.create_dataset("qid")
    batches = [events(100, 5, 0.0, seed=200 + i) for i in range(2)]
    _files(tmp_path / "src", batches)
    ids = {"query_id": "ingest", "id_column": "event_id"}
    a = _stream(spark, ec, tmp_path / "src", tmp_path / "cp-a", "qid", lease_s="600", **ids)
    a.awaitTermination(180)
    assert a.exception() is None
    b = _stream(spark, ec, tmp_path / "src", tmp_path / "cp-b", "qid", lease_s="600", **ids)
    with pytest.raises(Exception):  # noqa: B017 - the query's failure, checked below
        b.awaitTermination(180)
    said = str(b.exception())
    assert "another running copy" in said and "committed batch 1" in said and "takeover=true" in said
    c = _stream(spark, ec, tmp_path / "src", tmp_path / "cp-c", "qid", takeover="true", **ids)
    c.awaitTermination(180)
    assert c.exception() is None, "taken over on request"
    time.sleep(1.5)
    d = _stream(spark, ec, tmp_path / "src", tmp_path / "cp-d", "qid", lease_s="1", **ids)
    d.awaitTermination(180)
    assert d.exception() is None, "taken over once the lease ran out"
    assert counters(ec, "qid") == dict(Counter(u for rows in batches for u, _ in rows))


def test_a_refused_row_fails_alone_and_the_job_names_it(spark: Any, ec: Cluster) -> None:
    """One row over the value limit in a bulk call: that row is refused, the others are
    written; the job fails at commit naming the row's keys and the limit, with advice that
    fits a job without id_column."""
    ec.create_dataset("onebad")
    rows = [(f"u{i % 50}", f"l{i}", "v") for i in range(3000)] + [("big-one", "l", "x" * 2_000_000)]
    df = spark.createDataFrame(rows, "partition_key string, local_key string, value string").coalesce(1)
    with pytest.raises(Exception) as ei:
        (df.write.format("midtown").option("zk", ec.zk_hosts).option("dataset", "onebad")
         .mode("append").save())
    said = str(ei.value)
    assert "1 of 3001 rows were refused and the 3000 others written" in said, said[:2000]
    assert "big-one/l" in said and "the limit is 983040" in said
    assert "with id_column each event" not in said
    with Client(zk=ec.zk_hosts, timeout=60) as db:
        stored = sum(len(list(db.scan_all("onebad", f"u{i}"))) for i in range(50))
        assert db.get("onebad", "big-one", "l") is None
    assert stored == 3000


def test_increments_onto_text_name_the_rows_once(spark: Any, ec: Cluster) -> None:
    ec.create_dataset("notnum")
    with Client(zk=ec.zk_hosts, timeout=60) as db:
        for i in range(5):
            db.put("notnum", f"u{i}", "n", b"not a number")
    df = frame(spark, [(f"u{i}", f"e{i}") for i in range(5)], partitions=1)
    with pytest.raises(Exception) as ei:
        write_increments(spark, ec, "notnum", df)
    said = str(ei.value)
    assert said.count("not a decimal integer") == 1, said[:2000]
    assert "(5 rows: u0/n, u1/n, u2/n and 2 more)" in said or "5 rows:" in said, said[:2000]


def test_an_unreachable_cluster_fails_the_job_within_its_timeout(spark: Any) -> None:
    df = spark.createDataFrame([("a", "x", "v")], "partition_key string, local_key string, value string")
    t0 = time.monotonic()
    with pytest.raises(Exception) as ei:
        (df.write.format("midtown").option("zk", "127.0.0.1:1").option("dataset", "d")
         .option("timeout_s", "2").mode("append").save())
    took = time.monotonic() - t0
    said = str(ei.value)
    assert "cannot reach the Midtown cluster through ZooKeeper at 127.0.0.1:1 within 2s" in said, said[:1000]
    assert took < 12, took
