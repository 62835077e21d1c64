"""Shards handed over to other key-value logs online, with real processes (docs/log.md,
"Adding logs and handing shards over"; issue 52): the linearizability checker's workload
on hot keys while `log add` gives the store two more logs and the keys' shards are handed
from their log to the new ones, the old log's writer SIGKILLed in the middle of the first
hand-off (the driver goes on through the new writer); every key's history linearizes, no
acknowledged write is lost (the checker's reads see each), and every shard's replicas end
at the same positions with the same digests."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from catalog import datasets, registry
from catalog.routing import shard_of
from log import zk as zkpaths
from log.client import LogClient
from midtown import Client
from midtown.cluster import Cluster
from midtown.handoffs import hand_off
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
