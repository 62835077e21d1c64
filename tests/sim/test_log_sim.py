"""The log's six invariants under a deterministic simulation (tests/sim/harness.py), and
proof that the checker catches broken variants of the protocol that the whole log
servers' simulation (tests/sim/test_writers.py, which catches the others) does not reach
yet: a new writer that does not wait out the old one's read lease."""

from __future__ import annotations

import os

from tests.sim.harness import Config, Sim

RUNS = int(os.environ.get("MIDTOWN_SIM_RUNS", "200"))  # make soak runs 20,000


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


ENSEMBLE_RUNS = int(os.environ.get("MIDTOWN_SIM_ENSEMBLE_RUNS", "120"))


def test_invariants_hold_with_ensembles_of_three_among_five() -> None:
    """Issue 32's pool of log servers: each segment opens on 3 of 5 servers
    (log/ensemble.py), so ensembles change from writer to writer and a dead server drops
    out at the next segment; fencing and recovery use the last segment's own replicas."""
    failed, ensembles, moves = {}, set(), 0
    for seed in range(ENSEMBLE_RUNS):
        sim = Sim(seed, Config(servers=5))
        v = sim.run()
        ensembles |= {line.split("ensemble ")[1] for line in sim.trace if "ensemble" in line}
        moves += len(sim.moved_in)
        if v:
            failed[seed] = v[0]
    assert moves > ENSEMBLE_RUNS // 2, "sealed segments that lost a replica are re-replicated"
    assert not failed, f"replay: make sim SEED=<seed> RUNS=1 SERVERS=5 -- {dict(list(failed.items())[:5])}"
    assert len(ensembles) > 20, "the runs must change ensembles"


def _caught(cfg: Config, runs: int = 300, want: int = 4) -> list[int]:
    """Seeds whose run the checker fails, stopping at `want` of them."""
    bad = []
    for seed in range(runs):
        if Sim(seed, cfg).run():
            bad.append(seed)
            if len(bad) >= want:
                break
    return bad


def test_the_read_index_covers_every_acknowledged_entry_with_ensembles() -> None:
    """Every run probes coordinators' ReadIndex rounds with cached, possibly stale metadata
    (log/read_index.py); over the ensemble runs the index must cover every entry
    acknowledged before it. (Its broken variants are caught on whole log servers:
    tests/sim/test_writers.py.)"""
    probes = 0
    for seed in range(50):
        sim = Sim(seed, Config(servers=5))
        assert sim.run() == [], seed
        probes += sim.probes
    assert probes > 500


TAKEOVER_RUNS = int(os.environ.get("MIDTOWN_SIM_TAKEOVER_RUNS", "120"))


def test_invariants_hold_when_followers_take_the_log_over() -> None:
    """Followers run log/takeover.py on the writer (quiet writers probed, streams of
    crashed writers closed, probes of live ones failing now and then) and claim the log
    after two failed probes; writers pause and wake up later with what waited for them."""
    failed, takeovers, pauses = {}, 0, 0
    for seed in range(TAKEOVER_RUNS):
        sim = Sim(seed, Config(takeover=True))
        v = sim.run()
        takeovers += sim.taken_over
        pauses += sum("pause writer" in t for t in sim.trace)
        if v:
            failed[seed] = v[0]
    assert not failed, f"replay: make sim TAKEOVER=1 SEED=<seed> RUNS=1 -- {dict(list(failed.items())[:5])}"
    assert takeovers > TAKEOVER_RUNS / 2 and pauses > TAKEOVER_RUNS


def test_writers_move_their_segments_off_lost_copies() -> None:
    """Issue 48's ensemble changes (Writer.change_ensemble; log/ensemble_change.py says
    when): a writer whose open segment has a copy down closes the segment at its LAC and
    opens the next on live servers (now and then on a false alarm, a copy only slow),
    fencing the old segment's replicas at the new epoch before it appends. Every run of the
    invariant tests above makes them; here, that they happen and the invariants hold, with
    three servers (the same three again) and with five (live ones in place of the dead)."""
    changes = {3: 0, 5: 0}
    moved_off = 0
    for servers in (3, 5):
        for seed in range(40):
            sim = Sim(seed, Config(servers=servers))
            assert sim.run() == [], (servers, seed)
            changes[servers] += sim.ensemble_changes
            moved_off += sum("changes ensemble" in t and "(down: [])" not in t for t in sim.trace)
    assert changes[3] > 20 and changes[5] > 20 and moved_off > 20, (changes, moved_off)


LEASE_RUNS = int(os.environ.get("MIDTOWN_SIM_LEASE_RUNS", "30"))


def _lease_cfg(how: str) -> Config:
    return Config(lease=how, takeover=True, steps=4000)


def test_a_writer_answers_by_its_lease_only_while_no_other_writer_can_have_acknowledged() -> None:
    """Read leases (log/lease.py) through writers isolated, paused, crashed and superseded,
    ensemble changes and takeovers, with every server's clock at an end of the drift
    allowed: a writer's lease index covers every entry acknowledged, and every entry made
    visible by a seal, before the read."""
    failed, reads, takeovers = {}, 0, 0
    for seed in range(LEASE_RUNS):
        sim = Sim(seed, _lease_cfg("rule"))
        v = sim.run()
        reads += sim.lease_reads
        takeovers += sim.taken_over
        if v:
            failed[seed] = v[0]
    assert not failed, ("replay: python -m tests.sim.run --lease rule --takeover --steps 4000 "
                        f"--seed <seed> -- {failed}")
    assert reads > 20 * LEASE_RUNS, "writers must answer by their lease"
    assert takeovers > LEASE_RUNS, "the runs must take logs over from isolated and paused writers"


def test_checker_catches_a_new_writer_that_does_not_wait_out_the_lease() -> None:
    assert len(_caught(_lease_cfg("no-wait"), 60, want=3)) >= 3

