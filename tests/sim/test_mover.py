"""drivers/moves.py on the simulated ZooKeeper: a move another mover finished meanwhile
ends the move quietly (it once raised NoNodeError out of `midtown shard move` when the
move's record was gone at its next versioned write; the whole-cluster simulation's movers,
killed and paused mid-move, found it)."""

from __future__ import annotations

from typing import Any

import grpc

from catalog import registry, replica_sets, shard_moves
from drivers import moves
from midtown_pb import kv_pb2 as pb
from runtime import world
from runtime.stubs import CallFailed
from tests.sim.scheduler import Scheduler
from tests.sim.zookeeper import Ensemble


class _FinishedElsewhere:
    """The destination takes the copy in, and meanwhile another mover finishes the move:
    the move's record is gone when this mover records the copy."""

    def __init__(self, zk: Any) -> None:
        self.zk = zk

    def call(self, addr: str, method: str, req: Any, timeout_s: float) -> Any:
        assert method == "CopyShard"
        (_, version), = registry.read_moves(self.zk).values()
        registry.drop_move(self.zk, req.shard, version)
        return pb.CopyShardResponse(position=10, keys=1, bytes=1, source="n:1")

    def stream(self, addr: str, method: str, req: Any, timeout_s: float) -> Any:
        raise AssertionError("no stream")


def test_a_move_finished_by_another_mover_ends_quietly() -> None:
    def body(ens: Ensemble) -> dict[str, Any]:
        zk = ens.client()
        zk.start()
        kv = registry.create_kv(zk, 4, [0, 1, 2, 3], logs=1, replicas=3)
        registry.register(zk, registry.STORAGE_NODES, 3, "n:3")
        shard = next(s for s in range(4) if 3 not in registry.read_replica_sets(zk, kv).of(s))
        leaving = registry.read_replica_sets(zk, kv).of(shard)[0]
        return moves.move(zk, kv, shard, 3, leaving, 0, 30, lambda _: None, _FinishedElsewhere(zk))

    s = Scheduler(1)
    out = s.run(lambda: body(Ensemble()))
    assert s.failures == []
    assert out["to"] == 3 and 3 not in out["replicas"]  # this mover's copy was never recorded


class _JoinedElsewhere:
    """While this mover asks for the copy, another mover takes the move on to its end: the
    destination, now a replica, refuses the copy (FAILED_PRECONDITION)."""

    def __init__(self, zk: Any, kv: Any) -> None:
        self.zk, self.kv = zk, kv

    def call(self, addr: str, method: str, req: Any, timeout_s: float) -> Any:
        if method == "Status":  # the positions a finish waits for: nobody answers here
            raise CallFailed(grpc.StatusCode.UNAVAILABLE, "down")
        assert method == "CopyShard"
        (m, version), = registry.read_moves(self.zk).values()
        registry.update_move(self.zk, shard_moves.copied(m, 10), version)
        (m, version), = registry.read_moves(self.zk).values()
        sets = registry.read_replica_sets(self.zk, self.kv)
        registry.change_sets(self.zk, replica_sets.with_set(sets, m.shard, shard_moves.joined_sets(
            sets.of(m.shard), m)), "joins", (shard_moves.joined(m), version))
        raise CallFailed(grpc.StatusCode.FAILED_PRECONDITION,
                         f"storage node {m.dest} holds shard {m.shard} already")

    def stream(self, addr: str, method: str, req: Any, timeout_s: float) -> Any:
        raise AssertionError("no stream")


def _cluster(zk: Any) -> tuple[Any, int, int]:
    kv = registry.create_kv(zk, 4, [0, 1, 2, 3], logs=1, replicas=3)
    registry.register(zk, registry.STORAGE_NODES, 3, "n:3")
    shard = next(s for s in range(4) if 3 not in registry.read_replica_sets(zk, kv).of(s))
    return kv, shard, registry.read_replica_sets(zk, kv).of(shard)[0]


def test_a_copy_refused_because_another_mover_moved_on_is_not_an_error() -> None:
    """Two movers of one move (an operator ran the command again while the first was
    paused): the destination refuses this one's copy because the other has had it join.
    The mover looks again and goes on with the move where it stands (it once reported
    "refused the copy" and gave up)."""
    def body(ens: Ensemble) -> tuple[Any, Any]:
        zk = ens.client()
        zk.start()
        kv, shard, leaving = _cluster(zk)
        try:
            moves.move(zk, kv, shard, 3, leaving, 0, 2, lambda _: None, _JoinedElsewhere(zk, kv))
        except moves.MoveError as e:
            return str(e), registry.read_moves(zk)
        return None, registry.read_moves(zk)

    s = Scheduler(2)
    err, recorded = s.run(lambda: body(Ensemble()))
    assert s.failures == []
    # It took the move up from JOINED: only its last step (the leaving replica's positions,
    # which nobody answers here) is left when its 2 s run out; no refusal.
    assert err is not None and "did not end within" in err and "joined" in err
    assert [m.phase for m, _ in recorded.values()] == [shard_moves.JOINED]


def test_a_transaction_that_fails_raises_its_cause_and_a_move_starts_on_the_sets_it_read() -> None:
    """ZooKeeper answers a failed multi with RolledBackError for the ops before the one
    that failed: a change of the sets whose move record another mover changed raises
    BadVersionError (which movers catch), not RolledBackError; a move planned on sets that
    changed since is not recorded."""
    def body(ens: Ensemble) -> list[str]:
        zk = ens.client()
        zk.start()
        kv, shard, leaving = _cluster(zk)
        sets = registry.read_replica_sets(zk, kv)
        m = shard_moves.start(sets.of(shard), shard, 3, leaving)
        registry.start_move(zk, m, sets.version)
        (m, version), = registry.read_moves(zk).values()
        registry.update_move(zk, shard_moves.copied(m, 10), version)  # another mover's step
        out = []
        try:
            joined = replica_sets.with_set(sets, shard, shard_moves.joined_sets(sets.of(shard), m))
            stale = (shard_moves.joined(shard_moves.copied(m, 10)), version)
            registry.change_sets(zk, joined, "joins", stale)
        except Exception as e:
            out.append(type(e).__name__)
        registry._write_sets(zk, sets, sets.version, "another change")  # the sets move on
        registry.drop_move(zk, shard, registry.read_moves(zk)[shard][1])
        try:
            registry.start_move(zk, m, sets.version)  # planned on the sets before
        except Exception as e:
            out.append(type(e).__name__)
        return out

    s = Scheduler(3)
    assert s.run(lambda: body(Ensemble())) == ["BadVersionError", "BadVersionError"]
    assert s.failures == []


def test_a_stale_version_of_an_ended_move_does_not_write_over_the_next_move() -> None:
    """A mover paused past its session wakes with the version it read of a move that ended
    since, while the shard's next move is under way. Its write must fail: the record of a
    shard's moves stays (marked ENDED), so its version only grows. (When an ended move's
    record was deleted, the next one's started again at version 0; the stale write landed
    on it, and the ended move's destination joined again while its leaving replica went:
    the whole-cluster simulation's seed 1014 ended with a shard on two replicas.)"""
    def body(ens: Ensemble) -> list[str]:
        zk = ens.client()
        zk.start()
        kv, shard, leaving = _cluster(zk)
        sets = registry.read_replica_sets(zk, kv)
        first = shard_moves.start(sets.of(shard), shard, 3, leaving)
        registry.start_move(zk, first, sets.version)
        (_, stale), = registry.read_moves(zk).values()  # the paused mover's read
        registry.update_move(zk, shard_moves.copied(first, 10), stale)
        (m, version), = registry.read_moves(zk).values()
        joined = replica_sets.with_set(sets, shard, shard_moves.joined_sets(sets.of(shard), m))
        registry.change_sets(zk, joined, "joins", (shard_moves.joined(m), version))
        (m, version), = registry.read_moves(zk).values()
        sets = registry.read_replica_sets(zk, kv)
        done = replica_sets.with_set(sets, shard, shard_moves.finished_sets(sets.of(shard), m))
        registry.change_sets(zk, done, "done", (shard_moves.finished(m), version))
        assert registry.read_moves(zk) == {}
        sets = registry.read_replica_sets(zk, kv)
        back = shard_moves.start(sets.of(shard), shard, leaving, 3)  # the shard's next move
        registry.start_move(zk, back, sets.version)
        out = []
        try:
            registry.update_move(zk, shard_moves.copied(first, 10), stale)
        except Exception as e:
            out.append(type(e).__name__)
        (now, _), = registry.read_moves(zk).values()
        assert now == back  # untouched
        return out

    s = Scheduler(4)
    assert s.run(lambda: body(Ensemble())) == ["BadVersionError"]
    assert s.failures == []


class _SilentNodes(_JoinedElsewhere):
    """As _JoinedElsewhere, but the nodes' Status calls get no answer: each fails
    DEADLINE_EXCEEDED when its timeout runs out, as a gRPC call to a paused node does."""

    def call(self, addr: str, method: str, req: Any, timeout_s: float) -> Any:
        if method == "Status":
            world.sleep(timeout_s)
            raise CallFailed(grpc.StatusCode.DEADLINE_EXCEEDED, "no answer")
        return super().call(addr, method, req, timeout_s)


def test_a_move_ends_by_its_timeout_when_the_nodes_do_not_answer() -> None:
    """`midtown shard move --timeout 2` whose nodes do not answer their Status calls ends
    within its 2 s (it asked each for 5 s whatever was left, and a copy for at least 1 s;
    the whole-cluster simulation saw movers end a second past their --timeout)."""
    def body(ens: Ensemble) -> tuple[str, float]:
        zk = ens.client()
        zk.start()
        kv, shard, leaving = _cluster(zk)
        t0 = world.monotonic()
        try:
            moves.move(zk, kv, shard, 3, leaving, 0, 2, lambda _: None, _SilentNodes(zk, kv))
        except moves.MoveError as e:
            return str(e), world.monotonic() - t0
        return "", world.monotonic() - t0

    s = Scheduler(5)
    err, took = s.run(lambda: body(Ensemble()))
    assert s.failures == []
    assert "did not end within --timeout 2" in err and took <= 2.05, (err, took)
