"""The log simulation with real storage nodes beside it (tests/sim/cluster.py): every answer
is the outcome of the request's first append, each write counts once, no node restarts
(after a crash, or a power loss that takes what it had not synced) behind what it
published or finds its log truncated past it, a strong read sees every write answered
before it began, and every replica ends equal to the model; broken variants are caught."""

from __future__ import annotations

import logging
import os

import pytest

from tests.sim.cluster import ClusterSim

RUNS = int(os.environ.get("MIDTOWN_SIM_CLUSTER_RUNS", "8"))


@pytest.fixture(autouse=True)
def quiet() -> object:
    logging.disable(logging.CRITICAL)  # the storage nodes log every chunk they skip
    yield None
    logging.disable(logging.NOTSET)


def test_storage_nodes_beside_the_log_keep_every_guarantee_across_seeds() -> None:
    failed = {}
    counts: dict[str, int] = {}
    for seed in range(RUNS):
        sim = ClusterSim(seed)
        v = sim.run()
        for k, n in sim.counts.items():
            counts[k] = counts.get(k, 0) + n
        if v:
            failed[seed] = v[0]
    assert not failed, (f"replay with: make sim CLUSTER=1 SEED=<seed> RUNS=1 -- "
                        f"{dict(list(failed.items())[:5])}")
    # The runs do what they are for: nodes crash and restart, machines lose power and with
    # it batches not yet synced, retries append a request again, nodes publish positions
    # and the log is truncated below them, writes are answered, strong reads are answered.
    assert counts["node crashes"] > RUNS // 2 and counts["retries"] > RUNS, counts
    assert counts["power losses"] > RUNS // 2 and counts["batches lost"] > 0, counts
    assert counts["published"] > 5 * RUNS and counts["truncations"] >= RUNS // 2, counts
    assert counts["answered"] > 0.6 * counts["writes"] and counts["strong reads"] > 3 * RUNS, counts


def test_replay_is_deterministic() -> None:
    a, b = ClusterSim(7), ClusterSim(7)
    assert a.run() == b.run() and a.trace == b.trace and a.counts == b.counts


@pytest.mark.parametrize("broken", ["truncate-ahead", "retry-new-id", "read-anywhere", "publish-unsynced"])
def test_broken_variants_are_caught(broken: str) -> None:
    caught = tried = 0
    for seed in range(20):  # until it is caught three times
        tried += 1
        caught += bool(ClusterSim(seed, broken=broken).run())
        if caught == 3:
            break
    assert caught >= 3, f"{broken}: caught in {caught} of {tried} seeds"
