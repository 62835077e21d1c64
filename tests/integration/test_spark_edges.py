"""What a data engineer trips on with the Spark data source, on real PySpark and a real
cluster (docs/spark.md: threads, query ids, what fails a job and what fails a row). The
cluster's storage nodes refuse shard scans past 50 keys, so that a shard too large to scan
takes a few rows to make."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from midtown import Client, errors
from midtown.cluster import LAYOUT_DEFAULT, Cluster
from tests.integration.conftest import started
from tests.integration.test_spark import _files, _stream, counters, events, frame, write_increments

pytestmark = pytest.mark.integration

SCAN_ROWS_MAX = 50


@pytest.fixture(scope="module")
def ec(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with started(tmp_path_factory.mktemp("edges") / "c", {"MIDTOWN_SHARD_SCAN_ROWS_MAX": str(SCAN_ROWS_MAX)},
                 layout=LAYOUT_DEFAULT) as c:
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


def test_a_shard_too_large_to_scan_fails_at_once_with_its_reason(spark: Any, ec: Cluster) -> None:
    """A refusal no retry can cure reaches the user with its reason and a code no client
    retries: the SDK at once, Spark's read in its first attempts, not after minutes."""
    ec.create_dataset("wide")
    with Client(zk=ec.zk_hosts, timeout=60) as db:
        for i in range(SCAN_ROWS_MAX + 5):
            db.put("wide", "one-key", f"l{i:03d}", b"v")
        refused = []
        t0 = time.monotonic()
        for shard in range(db.shards("wide")):
            try:
                db.scan_shard("wide", shard)
            except errors.FailedPrecondition as e:
                refused.append(e.message)
        assert time.monotonic() - t0 < 20, "refused at once, not retried until the deadline"
        assert len(refused) == 1 and f"holds more than {SCAN_ROWS_MAX} keys" in refused[0], refused
    t0 = time.monotonic()
    with pytest.raises(Exception) as si:
        (spark.read.format("midtown").option("zk", ec.zk_hosts).option("dataset", "wide")
         .option("timeout_s", "60").load().collect())
    assert f"holds more than {SCAN_ROWS_MAX} keys" in str(si.value)
    assert "FailedPrecondition: shard: " in str(si.value) and "Unavailable" not in str(si.value)
    assert time.monotonic() - t0 < 60, "four quick task attempts, not four timeouts"


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
