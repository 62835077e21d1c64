"""A pool of five log servers (issue 32): each segment opens on an ensemble of three
(log/ensemble.py), strong reads ask the last segment's own replicas (log/read_index.py),
and a writer's death moves its logs to new segments on live servers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from catalog import datasets
from catalog.routing import log_of, shard_of
from log import limits
from log import zk as zkpaths
from midtown import Client
from midtown.cluster import Cluster
from tests.integration.conftest import started, wait_for
from tests.integration.test_kv import run_history
from tests.linearizability import check_per_key

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with started(Path(tmp_path_factory.mktemp("pool")) / "c", log_server_count=5, logs=8,
                 kv_logs=3) as c:
        c.create_dataset("t")
        yield c


def _segments(c: Cluster) -> dict[int, tuple[int, tuple[int, ...]]]:
    """Each log's last segment: (epoch, replicas)."""
    zk = zkpaths.connect(c.zk_hosts)
    try:
        out = {}
        for log_id in range(c.logs):
            meta, _ = zkpaths.read_metadata(zk, log_id)
            seg = meta.last_segment
            assert seg is not None, f"log {log_id} has no segment"
            out[log_id] = (seg.epoch, seg.replicas)
        return out
    finally:
        zk.stop()
        zk.close()


def _kill_the_writer(pool: Cluster, zk: Any, log_id: int) -> int:
    """SIGKILL the writer of a log; once another server writes it, the one killed."""
    w = zkpaths.read_writer(zk, log_id)
    assert w is not None
    dead = int(w["server"])
    pool.kill(f"log-{dead}")
    wait_for(lambda: (x := zkpaths.read_writer(zk, log_id)) and x["server"] != dead
             and x.get("state") != "recovering", 60, "a new writer")
    return dead


def test_every_segment_is_on_three_of_the_five_servers(pool: Cluster) -> None:
    pool_ids = {p.server_id for p in pool.log_servers()}
    assert len(pool_ids) == 5
    for log_id, (_, replicas) in _segments(pool).items():
        assert len(set(replicas)) == len(replicas) == limits.ENSEMBLE_SIZE, (log_id, replicas)
        assert set(replicas) <= pool_ids


def test_linearizable_when_a_writer_dies_and_its_log_moves_to_live_servers(pool: Cluster) -> None:
    """Puts, strong gets, check-and-sets and deletes on hot keys while the writer of their
    log is SIGKILLed: every key's history linearizes (strong reads by the read index of the
    segment's own replicas), and the log's new segment leaves the dead server out."""
    keys = ["h0", "h1", "h2"]
    zk = zkpaths.connect(pool.zk_hosts)
    d = datasets.get(zk, "t")
    assert d is not None
    log_id = log_of(shard_of(d.id, b"h0", 64), pool.kv_logs)
    keys = [k for k in (f"h{i}" for i in range(40)) if log_of(shard_of(d.id, k.encode(), 64),
                                                                pool.kv_logs) == log_id][:3]
    killed: list[int] = []

    def kill_the_writer() -> None:
        killed.append(_kill_the_writer(pool, zk, log_id))

    try:
        with Client(zk=pool.zk_hosts, timeout=20) as db:
            history = run_history(db, keys, kill_the_writer)
        assert check_per_key(history) == []
        _, replicas = _segments(pool)[log_id]
        assert killed[0] not in replicas, f"the new segment {replicas} is on the dead server"
    finally:
        zk.stop()
        zk.close()
        if killed:
            pool.restart(f"log-{killed[0]}")


def test_a_log_server_lost_for_good_is_replaced_in_its_sealed_segments(pool: Cluster) -> None:
    """The writer of a log is SIGKILLed and not started again: writes go on (a new writer,
    its segment on live servers), the writer re-replicates the sealed segment the dead
    server held (log/rereplicator.py): a live server holding every committed entry of it
    takes its place in the metadata. Then a second replica of that segment dies too, and
    every acknowledged entry of the log still reads back."""
    from log.client import LogClient

    log_id = 1
    zk = zkpaths.connect(pool.zk_hosts)
    killed: list[int] = []
    try:
        with LogClient(pool.zk_hosts) as logs:
            acked = [logs.append(log_id, [b"before-%d" % i]) for i in range(20)]
            killed.append(_kill_the_writer(pool, zk, log_id))
            acked += [logs.append(log_id, [b"after-%d" % i], timeout_s=30) for i in range(20)]

            def sealed_on_dead() -> list[tuple[int, tuple[int, ...]]]:
                meta, _ = zkpaths.read_metadata(zk, log_id)
                return [(s.epoch, s.replicas) for s in meta.segments if s.sealed and killed[0] in s.replicas]
            wait_for(lambda: not sealed_on_dead(), 60,
                     f"the sealed segments of log {log_id} off server {killed[0]}")
            meta, _ = zkpaths.read_metadata(zk, log_id)
            sealed = [s for s in meta.segments if s.sealed and s.end is not None and s.end >= s.first]
            assert sealed, "the writer's death sealed a segment with entries"
            # A second replica of the newest sealed segment dies: what was acknowledged stays.
            writer = int(zkpaths.read_writer(zk, log_id)["server"])  # type: ignore[index]
            second = next(r for r in sealed[-1].replicas if r not in (killed[0], writer))
            killed.append(second)
            pool.kill(f"log-{second}")
            first = min(r["first"] for r in logs.status() if r["log"] == log_id)
            last = max(a.first_position + a.count - 1 for a in acked)
            got = [e.position for e in logs.read(log_id, first, max_entries=last - first + 1, timeout_s=30)
                   if e.position <= last]
            assert got == list(range(first, last + 1))
    finally:
        zk.stop()
        zk.close()
        for k in killed:
            pool.restart(f"log-{k}")
