"""Shard moves under the seeded simulation (tests/sim/moves.py): no replica ever answers
with a state that is not its log prefix, no node finds its log truncated past it, every
move finishes once failures stop; and broken variants of the protocol are caught."""

from __future__ import annotations

import logging
import os

import pytest

from tests.sim.moves import Config, MoveSim

RUNS = int(os.environ.get("MIDTOWN_SIM_MOVE_RUNS", "80"))


def test_moves_keep_every_replica_exact_across_seeds() -> None:
    failed = {}
    counts: dict[str, int] = {}
    for seed in range(RUNS):
        sim = MoveSim(seed)
        v = sim.run()
        for k, n in sim.counts.items():
            counts[k] = counts.get(k, 0) + n
        if v:
            failed[seed] = v[0]
    assert not failed, f"replay with: make sim MOVES=1 SEED=<seed> RUNS=1 -- {dict(list(failed.items())[:5])}"
    # The runs do what they are for: moves finish and are given up, copies are lost in
    # transit, and destinations bring copies forward to their tails.
    assert counts["finished"] > RUNS and counts["aborted"] > RUNS // 2, counts
    assert counts["lost"] > RUNS and counts["caught_up"] > RUNS, counts


def test_replay_is_deterministic() -> None:
    a, b = MoveSim(77), MoveSim(77)
    assert a.run() == b.run() and a.trace == b.trace and a.counts == b.counts


@pytest.mark.parametrize("broken", ["join-early", "no-hold", "no-catch-up", "no-digest"])
def test_broken_variants_are_caught(broken: str) -> None:
    quiet = logging.getLogger("midtown.coordinator")  # its Answers log every divergence they see
    quiet.disabled = True
    try:
        caught = sum(1 for seed in range(25) if MoveSim(seed, Config(broken=broken)).run())
    finally:
        quiet.disabled = False
    assert caught >= 3, f"{broken}: caught in {caught} of 25 seeds"
