"""Shards handed over to other key-value logs online, with real processes (docs/log.md,
"Adding logs and handing shards over"; issue 52): the linearizability checker's workload
on hot keys while `log add` gives the store two more logs and the keys' shards are handed
from their log to the new ones, the old log's writer SIGKILLed in the middle of the first
hand-off (the driver goes on through the new writer); every key's history linearizes, no
acknowledged write is lost (the checker's reads see each), and every shard's replicas end
at the same positions with the same digests."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from catalog import datasets, registry
from catalog.routing import shard_of
from cluster import Cluster
from drivers.handoffs import hand_off
from log import zk as zkpaths
from log.client import LogClient
from midtown import Client
from tests.integration.conftest import started, wait_for
from tests.integration.test_kv import _converged, run_history
from tests.linearizability import check_per_key

# A client thread of the workload that dies on an error it did not expect fails the test
pytestmark = [pytest.mark.integration,
              pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with started(tmp_path_factory.mktemp("handoffs") / "c", coordinators=2) as c:
        c.create_dataset("t")
        yield c


def test_linearizable_while_shards_hand_over_and_the_old_writer_is_killed(cluster: Cluster) -> None:
    keys = ["h0", "h1", "h2", "h3"]
    done: list[dict[str, Any]] = []
    killed: list[str] = []
    with LogClient(cluster.zk_hosts) as logs, Client(zk=cluster.zk_hosts, timeout=20) as db:
        registry.add_kv_logs(logs.zk, 2, logs.topology().logs)
        kv = registry.read_kv(logs.zk)
        d = datasets.get(logs.zk, "t")
        assert kv is not None and d is not None
        shards = sorted({shard_of(d.id, k.encode(), kv.shards) for k in keys})
        new_logs = (kv.logs - 2, kv.logs - 1)

        def kill_old_writer(old: int) -> Any:
            def progress(msg: str) -> None:
                if "begun" in msg and not killed:  # the hand-off is under way: its old log's writer dies
                    w = zkpaths.read_writer(logs.zk, old)
                    assert w is not None
                    killed.append(f"log-{w['server']}")
                    cluster.kill(killed[0])
            return progress

        def disturb() -> None:
            for i, s in enumerate(shards):
                time.sleep(1)
                old = registry.read_log_map(logs.zk, kv).log_of(s)
                to = new_logs[i % 2]
                progress = kill_old_writer(old) if i == 0 else lambda _: None
                done.append(hand_off(logs, kv, s, to, 120, progress))
            if killed:
                cluster.restart(killed[0])

        history = run_history(db, keys, disturb)
        m = registry.read_log_map(logs.zk, kv)
    assert check_per_key(history) == []
    assert killed and [r["handed"] for r in done] == [True] * len(shards)
    assert [m.log_of(s) for s in shards] == [new_logs[i % 2] for i in range(len(shards))]
    assert m.handing == () and all(m.stint(s)[0] == 1 for s in shards)
    wait_for(lambda: _converged(cluster), 90, "every shard's replicas at the same position and digest")
    print(f"hand-offs: writes held {[r['took_s'] for r in done]} s")


def test_a_watch_from_now_and_a_strong_scan_follow_a_handed_shard(cluster: Cluster) -> None:
    """After the hand-offs above (run first): a watch from now of a handed shard starts at
    now in the shard's own order (the new log's ReadIndex plus the stint's version base,
    not the raw index, which stands below every position the shard had in its old log:
    the watch would replay older changes), and its first change is the put made after it;
    a strong scan of the shard, by the new log's index, sees that put."""
    with LogClient(cluster.zk_hosts) as logs, Client(zk=cluster.zk_hosts, timeout=20) as db:
        kv = registry.read_kv(logs.zk)
        d = datasets.get(logs.zk, "t")
        assert kv is not None and d is not None
        shard = shard_of(d.id, b"h0", kv.shards)
        gen, base, _ = registry.read_log_map(logs.zk, kv).stint(shard)
        assert gen == 1 and base > 0  # handed above, from a log further on than the new one
        watcher = db.watch("t", partition_key="h0")
        later = threading.Timer(1.0, lambda: db.put("t", "h0", "watched", b"1"))
        later.start()
        try:
            first = next(iter(watcher))
        finally:
            later.join()
            watcher.close()
        got = db.get("t", "h0", "watched")
        assert (first.local_key, first.shard, first.version) == (b"watched", shard, got.version)
        pages = db.scan_shard("t", shard, partition_key="h0")
        scanned = [it.local_key for page in pages for it in page.items]
        assert b"watched" in scanned


def test_a_log_added_takes_on_time_marks_once_a_shard_is_handed_to_it(cluster: Cluster) -> None:
    """The new logs' writers were elected before `log add` made them key-value logs, so
    they began without the key-value duties; the first shard opened in one (a hand-off,
    above) gives it time marks at once (log/writer.py carry_shards): idle, its time moves
    on by itself, every TIME_MARK_IDLE_MS, for the storage nodes' expiry of its shards."""
    with LogClient(cluster.zk_hosts) as logs:
        kv = registry.read_kv(logs.zk)
        d = datasets.get(logs.zk, "t")
        assert kv is not None and d is not None
        new = registry.read_log_map(logs.zk, kv).log_of(shard_of(d.id, b"h0", kv.shards))
        assert new >= kv.logs - 2

        def last() -> int:
            return next(int(r["last"]) for r in logs.status() if r["log"] == new)
        time.sleep(2)  # the positions the nodes publish after the last writes land first
        before = last()
        time.sleep(3.5)
        assert last() - before >= 2
