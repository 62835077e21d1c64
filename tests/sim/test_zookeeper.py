"""tests/sim/zookeeper.py, the simulated ZooKeeper: the servers' real ZooKeeper code
(log/zk.py, catalog/registry.py) on it, versioned writes that race, ephemeral nodes that go
with an expired session, watches and kazoo's recipes told in order and set again on a new
session, and partitions that suspend a session or, past its timeout, expire it."""

from __future__ import annotations

from typing import Any

import pytest
from kazoo.exceptions import ConnectionLoss, NodeExistsError
from kazoo.protocol.states import KazooState

from log import zk as zkpaths
from log.metadata import LogMetadata
from runtime import world
from tests.sim.scheduler import Scheduler
from tests.sim.zookeeper import Ensemble


def _run(seed: int, body: Any) -> Any:
    s = Scheduler(seed)
    ens = Ensemble()
    out = s.run(lambda: body(ens))
    assert s.failures == [] and ens.errors == []
    return out


def test_the_logs_metadata_code_runs_on_it_and_one_of_two_racing_writes_wins() -> None:
    def body(ens: Ensemble) -> tuple[int, int]:
        a, b = ens.client(), ens.client()
        a.start()
        b.start()
        topo = zkpaths.create_cluster(a, 2, [1, 2, 3])
        assert zkpaths.read_topology(b) == topo
        assert zkpaths.change_pool(b, add=4).log_servers == (1, 2, 3, 4)
        meta, version = zkpaths.read_metadata(a, 1)
        wins = []

        def claim(c: Any, epoch: int) -> None:
            wins.append(zkpaths.cas_metadata(c, LogMetadata(1, epoch=epoch), version))

        ts = [world.spawn(f"claim{e}", lambda c=c, e=e: claim(c, e)) for c, e in ((a, 5), (b, 6))]
        for t in ts:
            t.join()
        assert sorted(wins, key=str) == [1, None]  # one compare-and-set took the version
        return zkpaths.read_metadata(b, 1)[0].epoch, zkpaths.read_metadata(b, 1)[1]

    for seed in range(6):
        epoch, version = _run(seed, body)
        assert epoch in (5, 6) and version == 1


def test_an_expired_session_loses_its_ephemeral_node_and_watchers_are_told_in_order() -> None:
    def body(ens: Ensemble) -> None:
        writer, watcher = ens.client(), ens.client()
        writer.start()
        watcher.start()
        zkpaths.create_cluster(writer, 1, [])
        seen: list[Any] = []
        watcher.DataWatch(zkpaths.writer_path(0), lambda data, stat: seen.append(data))
        states: list[str] = []
        writer.add_listener(states.append)
        writer.create(zkpaths.writer_path(0), b'{"server": 1}', ephemeral=True)
        with pytest.raises(NodeExistsError):
            watcher.create(zkpaths.writer_path(0), b'{"server": 2}', ephemeral=True)
        world.sleep(0.1)
        old = writer.client_id
        ens.expire(writer)
        world.sleep(0.1)
        assert seen == [None, b'{"server": 1}', None]  # created, then gone with the session
        assert states == [KazooState.LOST, KazooState.CONNECTED] and writer.client_id != old
        assert writer.exists(zkpaths.writer_path(0)) is None
        watcher.create(zkpaths.writer_path(0), b'{"server": 2}', ephemeral=True)
        world.sleep(0.1)
        assert seen[-1] == b'{"server": 2}'

    _run(1, body)


def test_a_short_partition_suspends_the_session_and_a_long_one_expires_it() -> None:
    def body(ens: Ensemble) -> None:
        c, other = ens.client(), ens.client()
        c.start()
        other.start()
        c.create("/w", b"", ephemeral=True)
        states: list[str] = []
        c.add_listener(states.append)
        ens.partition(c, 1.0)
        with pytest.raises(ConnectionLoss):
            c.get("/w")
        world.sleep(2)
        assert states == [KazooState.SUSPENDED, KazooState.CONNECTED]
        assert c.get("/w")[1].ephemeralOwner == c.client_id[0]  # the same session: node kept
        ens.partition(c, 10.0)
        world.sleep(5)
        assert other.exists("/w") is None  # expired at the timeout, while still cut off
        world.sleep(6)
        assert c.exists("/w") is None and c.connected

    _run(2, body)


def test_replica_set_watches_run_again_on_a_new_session() -> None:
    """catalog/registry.py's watch (a storage node's): told of each version, and read again
    when its session is new, so a change made while it had none is not missed."""
    import json

    from catalog import registry, replica_sets

    def sets(*nodes: int) -> bytes:
        return json.dumps(replica_sets.to_json(replica_sets.ReplicaSets(3, (nodes,)))).encode()

    def body(ens: Ensemble) -> None:
        admin, node = ens.client(), ens.client()
        admin.start()
        node.start()
        got: list[tuple[int, tuple[int, ...]]] = []
        registry.watch_replica_sets(node, lambda rs: got.append((rs.version, rs.of(0))))
        admin.create(registry.REPLICA_SETS, sets(1, 2, 3), makepath=True)
        world.sleep(0.1)
        ens.partition(node, 10.0)  # the node's session expires; a change lands meanwhile
        world.sleep(1)
        admin.set(registry.REPLICA_SETS, sets(1, 2, 4), version=0)
        world.sleep(11)
        assert got == [(0, (1, 2, 3)), (1, (1, 2, 4))]

    _run(3, body)


def test_a_multi_replaces_a_node_in_one_step_or_not_at_all() -> None:
    """As ZooKeeper runs a multi, each op on what the ops before it did: a lost writer's
    node deleted (at its version) and created again by its successor (log/election.py
    _take_over); at another version nothing happens."""
    def body(ens: Ensemble) -> tuple[bytes, list[str], bytes]:
        a, b = ens.client(), ens.client()
        a.start()
        b.start()
        a.create("/w", b"old", ephemeral=True)
        tx = b.transaction()
        tx.delete("/w", version=0)
        tx.create("/w", b"new", ephemeral=True)
        assert not any(isinstance(r, Exception) for r in tx.commit())
        replaced = b.get("/w")[0]
        tx = a.transaction()
        tx.delete("/w", version=5)
        tx.create("/w", b"stale", ephemeral=True)
        failed = [type(r).__name__ for r in tx.commit()]
        return replaced, failed, a.get("/w")[0]

    replaced, failed, after = _run(1, body)
    assert replaced == b"new" and after == b"new"
    assert failed == ["BadVersionError", "RuntimeInconsistency"]


@pytest.mark.parametrize("seed", range(6))
def test_a_multi_is_applied_whole_before_another_task_sees_any_of_it(seed: int) -> None:
    """Make soak, seed 101881: two movers each ended a move of one shard, a multi of the
    replica sets (at its version), a history entry and the move's record (at its version);
    one's multi was half applied when a watcher's notice let the other run, which read the
    sets as changed and wrote over them: two 'done' entries in the history, the first of
    them failed. Watchers are now told once the multi is applied whole, as ZooKeeper does."""
    def body(ens: Ensemble) -> tuple[int, int]:
        admin = ens.client()
        admin.start()
        admin.create("/sets", b"0")
        admin.create("/move", b"0")
        admin.ensure_path("/history")
        watcher = ens.client()
        watcher.start()
        watcher.DataWatch("/sets", lambda data, stat: None)  # a notice for every change of the sets
        done: list[int] = []

        def mover(i: int) -> None:
            c = ens.client()
            c.start()
            for _ in range(30):
                world.event().set()  # a preemption point: another may be in the middle of its multi
                v, mv = c.get("/sets")[1].version, c.get("/move")[1].version
                tx = c.transaction()
                tx.set_data("/sets", b"%d" % i, version=v)
                tx.create("/history/change-", b"%d" % v, sequence=True)
                tx.set_data("/move", b"%d" % i, version=mv)
                if not any(isinstance(r, Exception) for r in tx.commit()):
                    done.append(i)
        for i in range(3):
            world.spawn(f"mover-{i}", lambda i=i: mover(i))
        world.sleep(1)
        return len(done), len(admin.get_children("/history"))

    done, history = _run(seed, body)
    assert done == history >= 30
