"""The log's six invariants under a deterministic simulation (tests/sim/harness.py), and
proof that the checker catches broken variants of the protocol."""

from __future__ import annotations

import os

from log import fencing
from log.quorum import AckTracker
from log.replica import ReplicaCore
from log.writer import State, Writer
from tests.sim.harness import Config, Sim

RUNS = int(os.environ.get("MIDTOWN_SIM_RUNS", "2000"))


def test_invariants_hold_across_seeds() -> None:
    failed = {}
    acked = 0
    for seed in range(RUNS):
        sim = Sim(seed)
        v = sim.run()
        acked += sum(len(a.payloads) for a in sim.acks)
        if v:
            failed[seed] = v[0]
    assert not failed, f"replay with: make sim SEED=<seed> RUNS=1 -- {dict(list(failed.items())[:5])}"
    assert acked > RUNS * 20, "the simulation must actually acknowledge appends"


def test_replay_is_deterministic() -> None:
    a, b = Sim(1234), Sim(1234)
    assert a.run() == b.run()
    assert a.trace == b.trace
    assert [(x.epoch, x.first, x.payloads) for x in a.acks] == [
        (x.epoch, x.first, x.payloads) for x in b.acks
    ]


def test_runs_exercise_failures() -> None:
    """The runs do contain what the invariants are about: several writers acknowledging,
    crashes and restarts, truncation, and reads."""
    trace: list[str] = []
    epochs = reads = 0
    for seed in range(30):
        sim = Sim(seed)
        assert sim.run() == []
        trace += sim.trace
        epochs += len({a.epoch for a in sim.acks})
        reads += len(sim.reads)
    text = "\n".join(trace)
    for needle in ("crash server", "restart server", "crash writer", "truncate before"):
        assert needle in text
    assert epochs > 30 * 2
    assert reads > 30 * 10


class _NoFencing(ReplicaCore):
    """Broken: replicas accept requests from replaced writers."""

    def _fence_rule(self, epoch: int, fenced_epoch: int) -> fencing.Admission:
        return fencing.Admission(True, max(epoch, fenced_epoch))


class _AckBeforeQuorum(Writer):
    """Broken: acknowledges once one replica has an entry, not an ack quorum."""

    def on_metadata_written(self, ok: bool, new_version: int = -1) -> None:
        super().on_metadata_written(ok, new_version)
        if self.state is State.WRITING:
            self._tracker = AckTracker(1, self.lac)


def _failing_seeds(cfg_factory, runs: int) -> list[int]:  # type: ignore[no-untyped-def]
    return [seed for seed in range(runs) if Sim(seed, cfg_factory()).run()]


def test_checker_catches_missing_fencing() -> None:
    bad = _failing_seeds(
        lambda: Config(replica_factory=lambda sid, st: _NoFencing(sid, st, log_count=1)), 100
    )
    assert len(bad) > 10


def test_checker_catches_ack_before_quorum() -> None:
    bad = _failing_seeds(lambda: Config(writer_factory=_AckBeforeQuorum), 300)
    assert len(bad) > 3
