"""tests/sim/writers.py: the real writer driver (log/driver.py) on the seeded scheduler with
the simulated ZooKeeper and the real peers (log/peers.py) over a lossy network, its writers
crashed and the log claimed again: every acknowledged append survives, a seed replays
exactly, and a broken recovery is caught."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import replace as dc_replace
from typing import Any

import grpc
import pytest

from log import zk as zkpaths
from log.client import LogClient
from log.client_link import Answered
from runtime import world
from runtime.refusals import Refusal
from tests.sim import seeds, writers
from tests.sim.scheduler import Scheduler
from tests.sim.zookeeper import Ensemble


@pytest.fixture(autouse=True)
def _quiet() -> object:
    logging.disable(logging.CRITICAL)  # crashed writers log their end at length
    yield
    logging.disable(logging.NOTSET)


def test_acknowledged_appends_survive_writer_crashes() -> None:
    for seed in range(3):
        r = writers.run(seed, writers.Config(seconds=8))
        assert r.failures == [] and r.violations == []
        assert r.writers == 4 and r.acked > 20  # three crashes, and appends acknowledged across them
        # The appends went through the servers' real outlets (log/peers.py), which batch
        # what queued while a call was in flight: more appends than calls.
        assert r.replicated > r.replicate_calls > 0


def test_whole_log_servers_keep_acknowledged_appends_through_crashes_and_pauses() -> None:
    """log/node.py's Node whole (the election with membership, watches and takeover probes,
    the peers, the replica side's epoch check, catch-up, re-replication); servers crash
    (their sessions expire, they restart from their stores) or pause past their session
    timeout or not; clients append through the real log client and read ReadIndex rounds.
    (What tests/integration/test_takeover.py checked with real processes.)"""
    takeovers = fired = changes = acked = 0
    # (seeds with takeovers since writers go on through a suspended session: 7, 10 and 2 on five)
    for seed, servers in ((0, 3), (3, 3), (7, 3), (10, 3), (0, 5), (2, 5)):
        r = writers.run(seed, writers.Config(seconds=10, elections=True, servers=servers))
        assert r.failures == [] and r.violations == []
        assert r.writers >= 2 and r.acked > 0  # the log changed writers, and appends were acknowledged
        acked += r.acked  # (a seed whose writers were down or paused most of the time acks few)
        assert r.replicated > r.replicate_calls > 0
        assert r.read_indexes > 0  # ReadIndex rounds through the log client answered, and checked
        assert r.followed >= r.acked  # a follow through the log client delivered every acked entry
        takeovers += r.takeovers
        fired += sum(r.buggified.values())  # fault points (world.buggify): slow peers, stalls...
        changes += r.ensemble_changes  # with five servers, open segments move off lost copies
    # Followers took the log over from a writer whose server was dead or paused but still
    # registered (log/takeover.py: before ZooKeeper expired its session); and the check
    # covers that every older writer that woke up stopped.
    assert takeovers > 0 and fired > 0 and changes > 0 and acked > 120


@pytest.mark.parametrize("whole", [False, True])
def test_a_seed_replays_exactly(whole: bool) -> None:
    cfg = writers.Config(seconds=5, elections=whole, wipes=whole, crashes=4 if whole else 3)
    a, b = (writers.run(11, cfg) for _ in range(2))
    assert (a.acked, a.switches, a.simulated_s, a.violations, a.wiped, a.refused, a.buggified) == \
        (b.acked, b.switches, b.simulated_s, b.violations, b.wiped, b.refused, b.buggified)


# What a lost acknowledged or committed entry shows as, whichever check sees it first: its
# position holds another payload at the end, a ReadIndex round missed it, or a follow (a
# storage node's tail) delivered it and the log later holds another entry there.
LOST = ("acked position", "acknowledged before it", "the follow delivered")


@pytest.mark.parametrize("elections", [False, True])
def test_a_recovery_that_seals_at_the_last_lac_is_caught(elections: bool) -> None:
    """The check's power, with writers claimed by the simulation and with whole servers."""
    cfg = writers.Config(seconds=8, broken="ends-at-lac", elections=elections)
    _, found = seeds.first(_caught(cfg), 0, "a seed that catches ends-at-lac")
    assert any(w in found[0] for w in LOST), found[:1]


def test_a_server_that_lost_its_disk_refuses_to_start_and_without_the_check_appends_are_lost() -> None:
    """A crashed server restarts now and then on an empty store (its disk lost): it refuses
    to start (log/store_identity.py) and the log goes on without it. Started all the same
    (broken), it answers recoveries as if it had never held what it acknowledged: an
    acknowledged append is lost (a bug none of the simulations of models could reach), or
    first a ReadIndex round misses it (the empty store's tail is believed)."""
    ok = [writers.run(seed, writers.Config(seconds=10, crashes=6, elections=True, wipes=True))
          for seed in range(3)]
    assert all(r.failures == [] and r.violations == [] for r in ok)
    assert sum(r.refused for r in ok) > 0
    cfg = writers.Config(seconds=10, crashes=6, elections=True, wipes=True, broken="no-store-check")
    _, found = seeds.first(_caught(cfg), 16, "a seed that catches no-store-check")
    assert any(w in found[0] for w in LOST + ("committed position",)), found[:1]


def _caught(cfg: writers.Config) -> Callable[[int], list[str] | None]:
    """A seed's run with `cfg` (a broken variant): what its checks found (None: nothing),
    its tasks failing none (tests/sim/seeds.py searches the seeds with it)."""
    def caught(seed: int) -> list[str] | None:
        r = writers.run(seed, cfg)
        assert r.failures == [], (seed, r.failures[:1])
        return r.violations or None
    return caught


class _Unanswered:
    """A log link whose every Append ends UNAVAILABLE (an unknown outcome: retried) after
    `after_s`, as from a writer that keeps failing mid-append."""

    def __init__(self, after_s: float) -> None:
        self.after_s = after_s

    def append(self, addr: str, log_id: int, payloads: list[bytes], timeout_s: float,
               tags: Any = None) -> Any:
        world.sleep(min(self.after_s, timeout_s))
        return Answered(Refusal(grpc.StatusCode.UNAVAILABLE, "outcome unknown"))

    def tail(self, addr: str, log_id: int) -> Any:
        raise AssertionError("not asked")


@pytest.mark.parametrize("seed", range(5))
def test_a_retried_append_ends_by_its_deadline(seed: int) -> None:
    """LogClient.append retries unknown outcomes with a growing backoff; the last sleep is
    cut to the time left after the attempt (the whole-server simulation found appends
    ending up to a second late when the time left before the attempt was used)."""
    def main() -> float:
        ens = Ensemble()
        admin = ens.client()
        admin.start()
        zkpaths.create_cluster(admin, 1, [0, 1, 2])
        admin.create(zkpaths.writer_path(0), json.dumps({"server": 0, "addr": "sim:0"}).encode())
        zk = ens.client()
        zk.start()
        client = LogClient(zk=zk, link=_Unanswered(0.3))
        start = world.monotonic()
        with pytest.raises(Refusal):
            client.append(0, [b"x"], timeout_s=3)
        return world.monotonic() - start
    took = Scheduler(seed).run(main)
    assert 3 <= took <= 3.05


# What a log that lost or mixed up entries shows as, whichever check sees it first.
BROKEN_LOG = LOST + ("committed position", "answered a strong read")


# Searched from the first seed that caught each when last calibrated (tests/sim/seeds.py).
@pytest.mark.parametrize("broken,servers,start,finding", [
    # a writer that acknowledges once one replica holds an append, not an ack quorum
    ("ack-before-quorum", 3, 1, BROKEN_LOG),
    # a new writer that fences and recovers the ensemble it is about to open, not the last
    # segment's replicas (harmless with every server in every ensemble: five here)
    ("fences-own-ensemble", 5, 7, BROKEN_LOG),
    # a new writer that seals the last segment where its own replica's LAC says, unfenced
    ("skip-fence", 3, 2, BROKEN_LOG),
    # ReadIndex rounds that trust cached metadata, or take any fence quorum of the pool
    ("trust-cache", 5, 1, ("acknowledged before it",)),
    ("any-servers", 5, 1, ("acknowledged before it",)),
    # ensemble changes that close the segment at the last entry sent, or append in the new
    # segment without fencing the old one's replicas
    ("past-lac", 5, 3, BROKEN_LOG),
    ("no-fence", 5, 24, ("acknowledged before it",)),
    # a re-replication recorded before the new server holds the whole segment
    ("record-first", 5, 12, ("re-replicated there",)),
    # ensembles and re-replication placed by load alone, blind to the servers' machines
    ("by-load", 6, 1, ("share a machine",)),
    # a writer that answers strong reads by its lease after the lease ran out (a read
    # waiting in a stopped server is served when it runs again, before it hears that the
    # log was taken over meanwhile)
    ("expired", 3, 1, ("answered a strong read",)),
])
def test_a_broken_rule_of_the_log_servers_is_caught(broken: str, servers: int, start: int,
                                                    finding: tuple[str, ...]) -> None:
    """The broken variants of the log's retired model (tests/sim/harness.py), on whole
    log servers (what the model caught, the real servers' run catches)."""
    machines = 3 if broken == "by-load" else 0
    cfg = writers.Config(elections=True, servers=servers, broken=broken, machines=machines)
    _, found = seeds.first(_caught(cfg), start, f"a seed that catches {broken}")
    assert any(f in found[0] for f in finding), found[:1]


def test_no_segment_has_two_servers_on_one_machine() -> None:
    """Six servers on three machines (fleet/machines.py records them): the election's
    ensembles, its ensemble changes and re-replication keep every segment's servers on
    distinct machines, through crashes and pauses (by load alone they are not: above)."""
    changed = 0
    for seed in range(3):
        r = writers.run(seed, writers.Config(elections=True, servers=6, machines=3, seconds=10))
        assert r.failures == [] and r.violations == [], (seed, r.violations[:1])
        changed += r.ensemble_changes + r.writers - 1  # segments placed after the first
    assert changed > 0


@pytest.mark.parametrize("seed,servers", [(0, 3), (1, 3), (0, 5)])
def test_acknowledged_appends_survive_zookeeper_notices_a_second_late(seed: int, servers: int) -> None:
    """Every process hears ZooKeeper's news (its session suspended or lost, the log's
    writer and metadata changed) up to a second late, so a writer that was paused or taken
    over goes on appending and answering reads by its lease meanwhile: fencing and the
    read lease alone keep the log right, never the notices' timing."""
    r = writers.run(seed, writers.Config(elections=True, servers=servers, late_notices_s=1.0))
    assert r.failures == [] and r.violations == []
    assert r.writers >= 2 and r.acked > 10  # (clients too hear late where the writer went)


def test_a_replica_without_fencing_is_caught_when_notices_are_late() -> None:
    """The retired log model's replica that takes requests from replaced writers, on whole
    log servers: with ZooKeeper's notices late, a writer taken over goes on appending, its
    old segment's replicas take the appends, and what it acknowledges is lost or read past
    (with notices on time the old writer hears of its successor before it appends again)."""
    cfg = writers.Config(elections=True, broken="no-fencing", late_notices_s=1.0)
    _, found = seeds.first(_caught(cfg), 1, "a seed that catches no-fencing")
    assert any(f in found[0] for f in BROKEN_LOG), found[:1]


BRIDGED = writers.Config(elections=True, late_notices_s=1.0, **writers.BRIDGES)


def test_a_follower_cut_off_from_a_running_writer_takes_the_log_over_and_leases_stay_right() -> None:
    """Servers cut off from one another in pairs, each still reaching the third (Jepsen's
    bridge): a follower that hears nothing from the writer takes the log over while the
    writer runs, still holding its read lease through the third server, and hears
    ZooKeeper's news late. The new writer makes nothing visible until that lease has run
    out: every read the old writer answers by it covers every append acknowledged and every
    segment sealed. (Such a seed failed while the simulated network handled a replica's
    messages on the sender's clock: the replica's lease promise came out short.)"""
    def live_takeover(seed: int) -> writers.Result | None:
        r = writers.run(seed, BRIDGED)
        assert r.failures == [] and r.violations == [], (seed, (r.failures + r.violations)[:1])
        return r if r.live_takeovers >= 1 else None
    _, r = seeds.first(live_takeover, 64, "a takeover from a writer still running")
    assert r.lease_reads > 100


def test_a_new_writer_that_does_not_wait_out_the_old_writers_lease_is_caught() -> None:
    """The retired log model's last broken variant, on whole log servers: a new writer that
    ignores its fence replies' lease promises seals the old segment while the old writer,
    cut off from it alone, still answers strong reads by its lease."""
    _, found = seeds.first(_caught(dc_replace(BRIDGED, broken="no-wait")), 31, "a seed that catches no-wait")
    assert "answered a strong read by its lease" in found[0], found[:1]


def test_writers_answer_strong_reads_by_their_lease() -> None:
    """The log is a key-value log: its writers hold read leases while strong reads ask
    (log/lease.py), each server's clock at an end of the drift allowed; each read a
    writer answered by its lease covered every append acknowledged, and every segment
    sealed, before it."""
    leased = 0
    for seed in range(3):
        r = writers.run(seed, writers.Config(elections=True, seconds=10))
        assert r.failures == [] and r.violations == []
        leased += r.lease_reads
    assert leased > 100


def test_nothing_of_a_shard_is_committed_outside_its_stint_across_takeovers() -> None:
    """Appends name shards and their generations (one in five an older one, as from a
    coordinator whose map is old); a hand-off's driver seals shards in the log (the log
    service's list, then the hand-off record) and opens them again at the next generation
    (an open record, the list, an open record again), while servers crash and pause and
    followers take the log over (log/seals.py, docs/log.md "Adding logs and handing shards
    over" step 3). Every committed entry of a shard stands in its stint of the generation
    it named, and appends outside one are refused whole, through the real log client."""
    refused = hand_offs = takeovers = 0
    for seed in range(1, 4):
        r = writers.run(seed, writers.Config(elections=True, seals=True))
        assert r.failures == [] and r.violations == [], (seed, r.violations[:1])
        refused += r.sealed_refusals
        hand_offs += r.hand_offs
        takeovers += r.takeovers + r.writers
    assert refused > 0 and hand_offs > 10 and takeovers > 6


@pytest.mark.parametrize("broken,seed,finding", [
    # a new writer that does not read the list of stints reopens every shard sealed before
    # it took over (caught in 29 of seeds 1-30)
    ("takeover-unseals", 2, "(its hand-off record)"),
    # a writer that admits a record whatever generation its sender named (20 of seeds 1-20)
    ("any-generation", 1, "in its stint of generation"),
])
def test_a_writer_that_admits_a_shard_outside_its_stint_is_caught(broken: str, seed: int,
                                                                  finding: str) -> None:
    cfg = writers.Config(elections=True, seals=True, broken=broken)
    _, found = seeds.first(_caught(cfg), seed, f"a seed that catches {broken}")
    assert finding in found[0], found[:1]
