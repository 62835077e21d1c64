"""The log's six invariants under a deterministic simulation (tests/sim/harness.py), and
proof that the checker catches broken variants of the protocol."""

from __future__ import annotations

import os
from dataclasses import replace

from log import fencing
from log.quorum import AckTracker
from log.replica import ReplicaCore
from log.writer import State, Writer
from tests.sim.harness import Config, Sim, run

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
    bad = _caught(Config(replica_factory=lambda sid, st: _NoFencing(sid, st, log_count=1)), 100, want=11)
    assert len(bad) > 10


def test_checker_catches_ack_before_quorum() -> None:
    bad = _caught(Config(writer_factory=_AckBeforeQuorum), 300, want=4)
    assert len(bad) > 3


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


class _FencesItsOwnEnsemble(Writer):
    """Broken: fences and recovers from the ensemble it is about to open rather than the
    last segment's replicas (a fence quorum computed from the wrong servers)."""

    @property
    def recovering_segment(self):  # type: ignore[no-untyped-def]
        seg = self.metadata.last_segment
        if seg is None or seg.sealed:
            return None
        return replace(seg, replicas=self.replicas)


def test_checker_catches_fencing_the_wrong_ensemble() -> None:
    bad = []
    for seed in range(300):  # stops at the fourth failing seed
        if Sim(seed, Config(servers=5, writer_factory=_FencesItsOwnEnsemble)).run():
            bad.append(seed)
            if len(bad) > 3:
                break
    assert len(bad) > 3, bad
    # With every server in every ensemble (three servers), the same mistake is harmless.
    assert not _failing_seeds(lambda: Config(writer_factory=_FencesItsOwnEnsemble), 50)


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
    acknowledged before it. Its two broken variants are caught: trusting the cache without
    the epoch check, and asking any fence quorum of the pool (the rule of a pool where every
    segment is on every server, harmless with three servers)."""
    probes = 0
    for seed in range(50):
        sim = Sim(seed, Config(servers=5))
        assert sim.run() == [], seed
        probes += sim.probes
    assert probes > 500
    assert len(_caught(Config(servers=5, read_index="trust-cache"))) >= 4
    assert len(_caught(Config(servers=5, read_index="any-servers"))) >= 4
    assert not _caught(Config(read_index="any-servers"), runs=30)


def test_checker_catches_a_move_recorded_before_its_copy() -> None:
    """Re-replication (log/rereplicate.py) records a sealed segment's new replica only once
    it holds every committed entry; recording it first leaves the segment short of copies."""
    assert len(_caught(Config(servers=5, rereplicate="record-first"))) >= 4


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


def test_checker_catches_a_takeover_that_skips_the_fence() -> None:
    """Broken: the follower takes the next epoch but seals the last segment where its own
    replica's LAC says, without fencing it: the old writer goes on acknowledging."""
    bad = _caught(Config(takeover=True, takeover_claim="skip-fence"), 80, want=3)
    assert len(bad) >= 3, bad


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


def test_checker_catches_an_ensemble_change_past_the_lac() -> None:
    """Broken: the segment closed at the last entry sent, as if every one were acknowledged:
    a position the log then calls committed may be on no replica."""
    assert len(_caught(Config(servers=5, ensemble_change="past-lac"), 300, want=3)) >= 3


def test_checker_catches_an_ensemble_change_without_its_fence() -> None:
    """Broken: appends in the new segment at once, without fencing the old segment's
    replicas at the new epoch: a ReadIndex round from a stale cache, answered by old copies
    that never heard of the new epoch (one thought lost but only slow), misses entries."""
    assert len(_caught(Config(servers=5, takeover=True, ensemble_change="no-fence"), 400, want=2)) >= 2


def test_no_segment_has_two_servers_on_one_machine_and_placement_by_load_is_caught() -> None:
    """Six servers on three machines (catalog/failure_domains.py): ensembles, ensemble
    changes and re-replication keep every segment's servers on distinct machines after
    every step, through crashes; placing by load alone puts two on one machine."""
    for seed in range(15):
        assert run(seed, Config(servers=6, machines=3, steps=600)) == [], seed
    caught = sum(any("share a machine" in v for v in run(seed, Config(servers=6, machines=3, steps=600,
                                                                      placement="by-load")))
                 for seed in range(15))
    assert caught >= 10, caught


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


def test_checker_catches_a_writer_that_answers_after_its_lease_ran_out() -> None:
    assert len(_caught(_lease_cfg("expired"), 30, want=5)) >= 5
