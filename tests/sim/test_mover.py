"""catalog/mover.py on the simulated ZooKeeper: a move another mover finished meanwhile
ends the move quietly (it once raised NoNodeError out of `midtown shard move` when the
move's record was gone at its next versioned write; the whole-cluster simulation's movers,
killed and paused mid-move, found it)."""

from __future__ import annotations

from typing import Any

from catalog import mover, registry
from midtown_pb import kv_pb2 as pb
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
        return mover.move(zk, kv, shard, 3, leaving, 0, 30, lambda _: None, _FinishedElsewhere(zk))

    s = Scheduler(1)
    out = s.run(lambda: body(Ensemble()))
    assert s.failures == []
    assert out["to"] == 3 and 3 not in out["replicas"]  # this mover's copy was never recorded
