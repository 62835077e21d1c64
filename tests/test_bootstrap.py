"""Bootstrapping a storage node's state from a peer (storage_node/bootstrap.py), over real
gRPC on loopback from small Snapshot servers: a whole copy replaces the state exactly, a
copy cut short leaves the marker that makes the next start try again. And what a rebuild
shard by shard takes and where it tails from (storage_node/rebuild.py, shard_copy.py)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest
from rocksdict import Options, Rdict

from catalog import log_map
from catalog.log_map import LogMap
from catalog.replica_sets import ReplicaSets
from catalog.shard_moves import COPYING, JOINED, TAILING, Move
from midtown_pb import kv_pb2 as pb
from midtown_pb import kv_pb2_grpc
from runtime.stubs import Stubs
from storage_node import bootstrap, keys, rebuild, shard_copy
from storage_node.handoff import Place

PEER = {b"K\x00\x00\x00\x01a": b"v1", b"P\x00\x00\x00\x00": b"\x00" * 16, b"D\x00\x00\x00\x01": b"d" * 8}


def _serve(stream: Any) -> tuple[grpc.Server, str]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("midtown.kv.v1.Storage", {
        "Snapshot": grpc.unary_stream_rpc_method_handler(
            lambda raw, ctx: stream(), request_deserializer=lambda b: b,
            response_serializer=lambda m: m.SerializeToString())})])
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, f"127.0.0.1:{port}"


def _cut_short() -> Iterator[pb.SnapshotChunk]:
    yield pb.SnapshotChunk(keys=[b"K\x00\x00\x00\x01b"], values=[b"partial"])
    raise RuntimeError("the peer died")


def _miscounted() -> Iterator[pb.SnapshotChunk]:
    yield pb.SnapshotChunk(keys=[b"K\x00\x00\x00\x01a"], values=[b"v1"], last=True, count=5)


def test_chunks_split_by_size_and_count_every_pair() -> None:
    pairs = [(b"K%03d" % i, b"x" * 100) for i in range(50)] + [(bootstrap.MARKER, b"1")]
    out = list(bootstrap.chunks(pairs, chunk_bytes=1000))
    assert len(out) > 5 and out[-1].last and not any(c.last for c in out[:-1])
    assert out[-1].count == 50 == sum(len(c.keys) for c in out)
    assert bootstrap.MARKER not in [k for c in out for k in c.keys]


def test_needed_when_truncated_past_or_unfinished() -> None:
    assert not bootstrap.needed({0: 10, 1: 5}, {0: 10, 1: 0}, marker=False)
    assert bootstrap.needed({0: 9, 1: 5}, {0: 10, 1: 0}, marker=False)
    assert bootstrap.needed({}, {0: 1}, marker=False)  # new, and the log starts later
    assert bootstrap.needed({0: 10}, {0: 0}, marker=True)
    # a lost store (empty, its id published before): the logs may be truncated past 0 now
    assert bootstrap.needed({0: 0}, {0: 0}, marker=False, lost=True)


def test_a_whole_copy_replaces_the_state_and_a_broken_one_leaves_the_marker() -> None:
    servers = []
    try:
        for stream in (_cut_short, _miscounted, lambda: bootstrap.chunks(sorted(PEER.items()))):
            s, addr = _serve(stream)
            servers.append((s, addr))
        with tempfile.TemporaryDirectory() as d:
            db = Rdict(str(Path(d) / "db"), Options(raw_mode=True))
            try:
                db[b"K\x00\x00\x00\x09old"] = b"stale"  # the node's own, behind: must go
                syncs: list[int] = []
                peers = Stubs(kv_pb2_grpc.StorageStub)
                broken = [a for _, a in servers[:2]]
                with pytest.raises(bootstrap.BootstrapFailed, match="5"):
                    bootstrap.copy_from(db, broken, lambda: syncs.append(1), peers)
                assert db.get(bootstrap.MARKER) is not None  # the next start tries again
                used = bootstrap.copy_from(db, [a for _, a in servers], lambda: syncs.append(1), peers)
                assert used == servers[2][1]
                assert {bytes(k): bytes(v) for k, v in db.items()} == PEER
            finally:
                peers.close()
                db.close()
    finally:
        for s, _ in servers:
            s.stop(None)


def test_a_whole_copy_leaves_out_the_peers_marks_of_shards_this_node_does_not_hold() -> None:
    """The peer took shards 3 and 5 in by moves (their marks); this node holds shard 3 only:
    its copy has the mark of 3 and not of 5, whose other keys come all the same (dropped
    later, or by an intake's copy). Kept, the mark of 5 passed for this node's own copy of
    it: make soak's every-broken step, seed 96 with any-generation's faults."""
    marks = {keys.mark_key(3): b"\x00" * 7 + b"\x75", keys.mark_key(5): b"\x00" * 7 + b"\x75"}
    server, addr = _serve(lambda: bootstrap.chunks(sorted({**PEER, **marks}.items())))
    peers = Stubs(kv_pb2_grpc.StorageStub)
    try:
        with tempfile.TemporaryDirectory() as d:
            db = Rdict(str(Path(d) / "db"), Options(raw_mode=True))
            try:
                bootstrap.copy_from(db, [addr], lambda: None, peers, shards={3})
                assert {bytes(k): bytes(v) for k, v in db.items()} == {**PEER, keys.mark_key(3): marks[
                    keys.mark_key(3)]}
            finally:
                db.close()
    finally:
        peers.close()
        server.stop(None)
    assert keys.shard_of_mark(keys.mark_key(5)) == 5 and keys.shard_of_mark(b"K\x00\x00\x00\x05") is None


def test_a_whole_copy_from_a_peer_that_no_longer_held_a_shard_of_this_nodes_is_refused() -> None:
    """The peer was chosen because it held shards 3 and 5, but had left 5 (a move) by the
    time it took its checkpoint, and says so: the copy is refused (the marker stays, the
    next peer or try is asked), where it made this node hold shard 5 empty (the
    whole-cluster simulation's seed 431 with any-generation's faults). A peer that held
    both gives the copy."""
    def saying(held: list[int]) -> Any:
        def stream() -> Iterator[pb.SnapshotChunk]:
            for chunk in bootstrap.chunks(sorted(PEER.items())):
                if chunk.last:
                    chunk.held[:], chunk.held_known = held, True
                yield chunk
        return stream
    (left, a), (kept, b) = _serve(saying([3])), _serve(saying([3, 5, 7]))
    peers = Stubs(kv_pb2_grpc.StorageStub)
    try:
        with tempfile.TemporaryDirectory() as d:
            db = Rdict(str(Path(d) / "db"), Options(raw_mode=True))
            try:
                with pytest.raises(bootstrap.BootstrapFailed, match=r"no longer held shards \[5\]"):
                    bootstrap.copy_from(db, [a], lambda: None, peers, shards=[3, 5])
                assert db.get(bootstrap.MARKER) is not None
                assert bootstrap.copy_from(db, [a, b], lambda: None, peers, shards=[3, 5]) == b
                assert {bytes(k): bytes(v) for k, v in db.items()} == PEER
            finally:
                db.close()
    finally:
        peers.close()
        left.stop(None)
        kept.stop(None)


def test_a_whole_copy_is_asked_at_or_past_the_heads_and_a_peer_behind_them_is_passed_over() -> None:
    """A bootstrap asks each peer for a copy standing at or past its heads (min_positions,
    waiting up to HEADS_WAIT_MS: storage_node/node.py snapshot waits, then refuses as
    Behind); a peer that refuses is passed over for the next."""
    asked: list[tuple[str, list[int], int]] = []

    def peer(name: str, applied: list[int]) -> Any:
        def stream(raw: bytes, ctx: grpc.ServicerContext) -> Iterator[pb.SnapshotChunk]:
            req = pb.SnapshotRequest.FromString(raw)
            asked.append((name, list(req.min_positions), req.wait_ms))
            if any(a < m for a, m in zip(applied, req.min_positions)):
                ctx.abort(grpc.StatusCode.FAILED_PRECONDITION, f"{name} is behind")
            yield from bootstrap.chunks(sorted(PEER.items()))
        return stream

    servers = []
    for name, applied in (("behind", [5, 3]), ("caught up", [9, 3])):
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("midtown.kv.v1.Storage", {
            "Snapshot": grpc.unary_stream_rpc_method_handler(
                peer(name, applied), request_deserializer=lambda b: b,
                response_serializer=lambda m: m.SerializeToString())})])
        servers.append((server, f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"))
        server.start()
    peers = Stubs(kv_pb2_grpc.StorageStub)
    try:
        with tempfile.TemporaryDirectory() as d:
            db = Rdict(str(Path(d) / "db"), Options(raw_mode=True))
            try:
                addrs = [a for _, a in servers]
                used = bootstrap.copy_from(db, addrs, lambda: None, peers, heads={0: 7, 1: 3})
                assert used == servers[1][1]
                assert {bytes(k): bytes(v) for k, v in db.items()} == PEER
            finally:
                db.close()
    finally:
        peers.close()
        for server, _ in servers:
            server.stop(None)
    wait = bootstrap.HEADS_WAIT_MS
    assert asked == [("behind", [7, 3], wait), ("caught up", [7, 3], wait)]


def test_a_checkpoint_copy_does_not_see_later_writes(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """What a bootstrapping peer copies is the state at one moment: writes committed while
    the copy streams are not in it (rocksdict's snapshot iterators do see them: tried)."""
    import threading

    from rocksdict import WriteBatch

    from catalog.registry import KvTopology
    from storage_node.reads import Reads
    from storage_node.store import NodeStore

    store = NodeStore(str(tmp_path / "state.db"))
    try:
        store.db.put(b"a", b"1")
        kv = KvTopology(shards=4, storage_nodes=(0,), logs=1)
        reads = Reads(0, store, str(tmp_path), threading.Lock(), threading.Condition(), {0: (0, 0)},
                      lambda: kv, 1, lambda shard: True, lambda shard: Place(0))
        with reads.checkpoint() as pairs:
            wb = WriteBatch(raw_mode=True)
            wb.put(b"b", b"2")
            wb.put(b"a", b"changed")
            store.write(wb)
            copied = dict(pairs)
        assert copied == {b"a": b"1"}
        assert not [p for p in tmp_path.iterdir() if p.name.startswith("checkpoint-")], "left behind"
    finally:
        store.close()


def test_a_rebuild_takes_the_sets_shards_and_those_moving_in() -> None:
    sets = ReplicaSets(2, ((0, 1), (1, 2), (0, 2), (0, 1)))
    moves = {1: Move(1, 0, 2, TAILING, 40), 2: Move(2, 3, 0, COPYING), 3: Move(3, 2, 1, JOINED, 9),
             5: Move(5, 0, 1, COPYING)}
    # 5 too: a copy its lost store took in may be recorded by its mover after this read
    assert rebuild.wanted(0, sets, moves) == ([0, 2, 3], [1, 5])
    assert rebuild.wanted(2, sets, moves) == ([1, 2], [3])


def test_a_rebuilt_log_is_tailed_from_its_lowest_copy_each_shard_from_its_own() -> None:
    tail, marks = shard_copy.rebuild({4: 120, 7: 95, 9: 300})
    assert tail == 95 and marks == {4: 120, 7: 95, 9: 300}
    # A record of shard 4 at 100 is in its copy; at 120 it is not; shard 9's at 200 is in its.
    assert not shard_copy.applies(marks, 4, 100) and shard_copy.applies(marks, 4, 120)
    assert not shard_copy.applies(marks, 9, 200) and shard_copy.applies(marks, 7, 95)
    with pytest.raises(ValueError, match="copies"):
        shard_copy.rebuild({})


def test_a_rebuild_needs_the_head_of_every_log_its_shards_are_in() -> None:
    # Shards 0..5 over 3 logs (log = shard % 3): shards 1 and 4 are in log 1.
    three = log_map.first(6, 3)
    assert rebuild.known_heads([0, 4], {0: 10, 1: 20, 2: None}, three) == {0: 10, 1: 20}
    with pytest.raises(bootstrap.BootstrapFailed, match=r"head of logs \[1\]"):
        rebuild.known_heads([0, 4], {0: 10, 1: None, 2: 30}, three)
    # a shard handed over to another log (catalog/log_map.py): its new log's head is needed
    handed = LogMap(3, (0, 1, 2, 0, 2, 2), 0)
    assert rebuild.known_heads([0, 4], {0: 10, 1: None, 2: 30}, handed) == {0: 10, 2: 30}


def test_a_whole_copy_must_stand_at_or_past_every_head_the_bootstrap_began_with() -> None:
    """A node that lost its store published positions before, and those hold truncation
    back until it publishes again: a copy behind them (a peer restarted, or on a slow
    disk) could be truncated past before the node reads on. So a whole copy, as a
    rebuild's, stands at or past each head its logs had when the bootstrap began; the
    logs the node does not apply are not asked."""
    heads = {0: 11, 1: 34}
    assert bootstrap.behind({0: 11, 1: 40, 2: 3}, heads) == {}
    assert bootstrap.behind({0: 7, 1: 34}, heads) == {0: 7}
    assert bootstrap.behind({1: 35}, heads) == {0: 0}  # no position in log 0: from its start
    assert bootstrap.behind({0: 1, 1: 1}, {}) == {}


def test_a_rebuild_keeps_only_copies_in_their_shards_stint_now() -> None:
    """storage_node/rebuild.py in_current_stint: a copy taken before its shard's hand-off
    (in the old log, or awaiting the open record in the new one), or while a hand-off of it
    is under way, is taken again (the whole-cluster simulation's seed 88)."""
    first = log_map.first(4, 2)  # shard s in log s % 2, none handed over
    assert shard_copy.in_current_stint(None, 0, first)
    assert not shard_copy.in_current_stint(Place(1, 30, True, 5, 0, 1), 0, first)  # a stint never given
    handed = LogMap(2, (1, 1, 0, 1), 3, (log_map.Handoff(0, 0, 126, 1, 237, 1, -110, 0),), (0, 1, 0, 1))
    assert not shard_copy.in_current_stint(None, 0, handed)  # copied in log 0, before the hand-off
    assert not shard_copy.in_current_stint(Place(1, 237, False, -110, 0, 1), 0, handed)  # awaiting the open
    assert shard_copy.in_current_stint(Place(1, 237, True, -110, 0, 1), 0, handed)
    assert shard_copy.in_current_stint(None, 1, handed)  # never handed over
    under_way = LogMap(2, (0, 1, 0, 1), 4, (), (), (log_map.Handing(0, 0, 1, 120),))
    assert not shard_copy.in_current_stint(None, 0, under_way)
