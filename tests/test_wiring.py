"""Each server's core is built from its parts, with no I/O of its own: its shell
(`Node.open`, `StorageNode.open`, `Coordinator.open`) connects to ZooKeeper, waits for the
topology and opens the disk, and the constructor takes what they gave. Here the parts are
stand-ins that fail on any call, so a constructor that reached ZooKeeper, a log server or
a peer would fail."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from catalog import log_map
from catalog.registry import KvTopology
from catalog.replica_sets import everyone


class _NoCalls:
    """Any method called on it fails (attributes may be read: a bound method kept for later)."""

    def __init__(self, name: str) -> None:
        self._name = name
        self.listeners: list[Any] = []

    def add_listener(self, fn: Any) -> None:  # kazoo's session-state listener: no I/O
        self.listeners.append(fn)

    def __getattr__(self, attr: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            raise AssertionError(f"{self._name}.{attr}() called while building")
        return call


class _Logs(_NoCalls):
    def __init__(self) -> None:
        super().__init__("logs")
        self.zk = _NoCalls("zk")


KV = KvTopology(shards=8, storage_nodes=(0, 1, 2), logs=2)


def test_a_log_server_is_built_without_zookeeper_or_a_disk() -> None:
    from log.node import Node
    from log.store import MemStore
    from log.zk import Topology

    node = Node(0, "127.0.0.1:1", _NoCalls("zk"), Topology(2, (0, 1, 2)), MemStore())
    assert node.replica.first(0) >= 0 and len(node.zk.listeners) == 1


def test_a_coordinator_is_built_without_zookeeper_or_the_logs() -> None:
    from coordinator.node import Coordinator

    c = Coordinator(0, "127.0.0.1:1", _Logs(), 2, KV)  # type: ignore[arg-type]
    assert c.kv_logs == 2 and c.answers is not None


def test_a_storage_node_is_built_without_zookeeper_or_the_logs(tmp_path: Path) -> None:
    from storage_node.node import Parts, StorageNode
    from storage_node.store import NodeStore

    store = NodeStore(str(tmp_path / "state.db"))
    try:
        parts = Parts(_Logs(), store, KV, 2, log_map.first(KV.shards, 2), everyone(8, (0, 1, 2)),
                      str(tmp_path))  # type: ignore[arg-type]
        n = StorageNode(0, "127.0.0.1:1", parts)
        assert n.state.positions == {0: (0, 0), 1: (0, 0)} and n.state.holds(3)
        # Still starting (its bootstrap may replace its state): no copy of a shard, nor of
        # the whole, is given; a mover or a rebuild asks another replica
        from midtown_pb import kv_pb2 as pb
        from runtime.refusals import Refusal
        for one in (True, False):
            with pytest.raises(Refusal, match="is starting; ask another peer"):
                n.snapshot(pb.SnapshotRequest(one_shard=one, shard=3))
    finally:
        store.close()


def test_no_tombstone_is_purged_before_the_report_of_its_time(tmp_path: Path) -> None:
    """A node coming back judges from its peers' usage reports whether they may have purged
    tombstones it missed (storage_node/eventual_service.py drop_if_outlived): a purge as of
    a time must come after the report of that time is in ZooKeeper, so a round whose report
    cannot be written purges nothing (it once purged first, then published)."""
    import time

    from midtown_pb import kv_pb2 as pb
    from storage_node import lww
    from storage_node.node import Parts, StorageNode
    from storage_node.settings import Settings
    from storage_node.store import NodeStore

    store = NodeStore(str(tmp_path / "state.db"))
    try:
        parts = Parts(_Logs(), store, KV, 2, log_map.first(KV.shards, 2), everyone(8, (0, 1, 2)),
                      str(tmp_path))  # type: ignore[arg-type]
        n = StorageNode(0, "127.0.0.1:1", parts, Settings(tombstone_grace_s=1))
        old_ms = int(time.time() * 1000) - 60_000
        assert n.lww.write(pb.LwwWriteRequest(dataset="d", shard=3, partition_key=b"p", local_key=b"gone",
                                              value=pb.LwwValue(version=old_ms << 22, deleted=True)))
        def tombstones() -> int:
            now = int(time.time() * 1000)
            return sum(1 for _, v in store.under(b"E") if lww.purgeable(v, now, 1000))
        assert tombstones() == 1
        try:
            n.bookkeeping.usage_round()  # ZooKeeper (a stand-in that fails every call) is away
        except AssertionError:
            pass
        assert n.eventual.purged == 0 and tombstones() == 1
    finally:
        store.close()


def test_a_starting_node_gives_no_whole_copy_of_its_state(tmp_path: Path) -> None:
    """A peer's bootstrap asks for a whole copy (Snapshot) through a registration the node
    may still have from before its restart: while its own start (and bootstrap) has not
    finished, its state may be empty or about to be replaced, and it refuses UNAVAILABLE,
    so the peer asks another. (The whole-cluster simulation's seed 1028: a node that lost
    power bootstrapped from a peer that was itself starting on a lost disk, took its empty
    state at position 0, and stopped behind the logs' truncation.)"""
    import grpc
    import pytest

    from midtown_pb import kv_pb2 as pb
    from runtime.refusals import Refusal
    from storage_node.node import Parts, StorageNode
    from storage_node.store import NodeStore

    store = NodeStore(str(tmp_path / "state.db"))
    try:
        parts = Parts(_Logs(), store, KV, 2, log_map.first(KV.shards, 2), everyone(8, (0, 1, 2)),
                      str(tmp_path))  # type: ignore[arg-type]
        n = StorageNode(0, "127.0.0.1:1", parts)
        with pytest.raises(Refusal) as e:
            n.snapshot(pb.SnapshotRequest())
        assert e.value.code == grpc.StatusCode.UNAVAILABLE and "starting" in e.value.text
        n.state.started = True
        assert any(c.last for c in n.snapshot(pb.SnapshotRequest()))  # once started: the whole copy
    finally:
        store.close()


def test_a_whole_copy_is_given_at_or_past_the_positions_asked_or_refused(tmp_path: Path) -> None:
    """A bootstrap asks a peer for its whole state at or past the logs' heads
    (SnapshotRequest.min_positions, one per key-value log, waiting wait_ms at most;
    storage_node/bootstrap.py HEADS_WAIT_MS): a peer not there in time refuses (Behind:
    another may be), and more positions than the cluster has logs is a bad request naming
    the field."""
    import grpc
    import pytest

    from midtown_pb import kv_pb2 as pb
    from runtime.refusals import BadRequest, Refusal
    from storage_node.node import Parts, StorageNode
    from storage_node.store import NodeStore

    store = NodeStore(str(tmp_path / "state.db"))
    try:
        parts = Parts(_Logs(), store, KV, 2, log_map.first(KV.shards, 2), everyone(8, (0, 1, 2)),
                      str(tmp_path))  # type: ignore[arg-type]
        n = StorageNode(0, "127.0.0.1:1", parts)
        n.state.started = True
        with pytest.raises(BadRequest, match="^min_positions: 3 positions, this cluster has 2"):
            n.snapshot(pb.SnapshotRequest(min_positions=[0, 0, 0]))
        with pytest.raises(Refusal) as e:
            n.snapshot(pb.SnapshotRequest(min_positions=[0, 5], wait_ms=20))
        assert e.value.code == grpc.StatusCode.FAILED_PRECONDITION and "log 1 up to 0, not 5" in e.value.text
        assert any(c.last for c in n.snapshot(pb.SnapshotRequest(min_positions=[0, 0], wait_ms=20)))
    finally:
        store.close()
