"""A log's home (log/homes.py): which servers may write a log and hold its new segments,
the preferred order among them, and what the operator's command refuses."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from fleet.failure_domains import Domain, lookup
from log import homes, rereplicate
from log.metadata import LogMetadata, Segment

# Servers 0-2 in east on three machines, 3-5 in west on three, 6-7 in north on one machine.
WHERE = {**{s: Domain(f"e{s}", (("dc", "east"), ("zone", "abc"[s]))) for s in range(3)},
         **{s: Domain(f"w{s}", (("dc", "west"),)) for s in range(3, 6)},
         **{s: Domain("n", (("dc", "north"),)) for s in (6, 7)}}
DOMAIN = lookup(WHERE)
POOL = list(range(8))


def test_a_log_without_a_home_goes_anywhere() -> None:
    assert homes.in_home(POOL, 1, {}, DOMAIN) == POOL
    assert all(homes.may_write(s, 1, {0: "east"}, DOMAIN) for s in POOL)
    assert homes.outside([0, 3, 6], 1, {0: "east"}, DOMAIN) == []


def test_a_log_with_a_home_stays_in_it() -> None:
    h = {1: "west"}
    assert homes.in_home(POOL, 1, h, DOMAIN) == [3, 4, 5]
    assert [s for s in POOL if homes.may_write(s, 1, h, DOMAIN)] == [3, 4, 5]
    assert homes.outside([0, 3, 6], 1, h, DOMAIN) == [0, 6]
    assert homes.home_of(h, 1) == "west" and homes.home_of(h, 0) == ""


@given(st.integers(0, 40), st.sampled_from(["", "east", "west"]))
def test_the_preferred_order_ranks_each_server_of_the_home_once(log_id: int, dc: str) -> None:
    """Every server that may write the log has a rank of its own, 0 to n-1: one of them
    claims first, and no two wait as long (log/election.py)."""
    h = {log_id: dc} if dc else {}
    eligible = homes.in_home(POOL, log_id, h, DOMAIN)
    ranks = sorted(homes.rank(POOL, log_id, s, h, DOMAIN) for s in eligible)
    assert ranks == list(range(len(eligible)))


def test_the_operators_command_is_refused_naming_the_argument() -> None:
    check = homes.check_home
    assert check(0, "east", 2, POOL, DOMAIN) is None
    assert check(0, "", 2, POOL, DOMAIN) is None  # clearing it
    assert "LOG: 2" in (check(2, "east", 2, POOL, DOMAIN) or "")
    wrong = check(0, "south", 2, POOL, DOMAIN) or ""
    assert wrong.startswith("DC: 'south'") and "east, north, west" in wrong
    assert "holds 2" in (check(0, "north", 2, POOL, DOMAIN) or "")  # fewer servers than an ensemble
    north_on_one = [*POOL, 8]
    where = lookup({**WHERE, 8: Domain("n", (("dc", "north"),))})
    assert "on 1 machine" in (check(0, "north", 2, north_on_one, where) or "")  # three, one machine
    assert check(0, "north", 2, north_on_one, where, one_machine=True) is None
    assert "DC: 'east' holds 2" in (check(0, "east", 2, [1, 2, 3, 4, 5], DOMAIN) or "")  # 0 left the pool


def sealed(*replicas: int) -> LogMetadata:
    """A log of one sealed segment, positions 0-9, on `replicas`."""
    return LogMetadata(0, epoch=2, segments=(Segment(epoch=1, first=0, replicas=replicas, base_ts=0, end=9,
                                                     last_ts=5),))


def test_a_lost_copy_of_a_sealed_segment_is_replaced_in_the_logs_home() -> None:
    """Re-replication (log/rereplicate.py plan) moves a copy of a server that is gone to a
    server of the log's home only, even when one outside it holds fewer segments."""
    meta = sealed(3, 4, 5)
    live = {0, 1, 2, 4, 5}  # 3 gone
    load = {0: 0, 1: 0, 2: 0, 4: 5, 5: 5}
    anywhere = rereplicate.plan(meta, live, load, DOMAIN)
    assert [m.target for m in anywhere] and anywhere[0].target in (0, 1, 2)
    west = homes.in_home(live, 0, {0: "west"}, DOMAIN)
    assert rereplicate.plan(meta, live, load, DOMAIN, targets=west) == []  # no third west server
    live_w = live | {6, 7} | {3}
    meta2 = sealed(3, 4, 0)
    moved = rereplicate.plan(meta2, live_w - {0}, load, DOMAIN,
                             targets=homes.in_home(live_w - {0}, 0, {0: "west"}, DOMAIN))
    assert [(m.dead, m.target) for m in moved] == [(0, 5)]


@given(st.integers(0, 40), st.sampled_from(["east", "west", "north"]), st.sampled_from(["", "east"]))
def test_a_preferred_data_centers_servers_rank_first_each_once(log_id: int, pref: str, home: str) -> None:
    """log/homes.py rank with a preference: every server that may write the log has a rank
    of its own, and those of the preferred data center come before the others (they
    claim it first: log/election.py)."""
    h = {log_id: home} if home else {}
    eligible = homes.in_home(POOL, log_id, h, DOMAIN)
    ranks = {s: homes.rank(POOL, log_id, s, h, DOMAIN, {log_id: pref}) for s in eligible}
    assert sorted(ranks.values()) == list(range(len(eligible)))
    there = [r for s, r in ranks.items() if DOMAIN(s).dc == pref]
    elsewhere = [r for s, r in ranks.items() if DOMAIN(s).dc != pref]
    assert not there or not elsewhere or max(there) < min(elsewhere)
    # no preference for this log: the order as before
    assert {s: homes.rank(POOL, log_id, s, h, DOMAIN, {log_id + 1: pref}) for s in eligible} == \
        {s: homes.rank(POOL, log_id, s, h, DOMAIN) for s in eligible}


def test_a_writer_outside_its_preferred_data_center_gives_it_up_while_one_there_is_up() -> None:
    prefers = {1: "west"}
    assert homes.yields(0, 1, prefers, DOMAIN, [0, 3, 6])  # east writes, west's 3 is up
    assert not homes.yields(0, 1, prefers, DOMAIN, [0, 1, 6])  # none of west's up: it stays
    assert not homes.yields(3, 1, prefers, DOMAIN, [0, 3, 4])  # in west already
    assert not homes.yields(0, 2, prefers, DOMAIN, [3])  # log 2 prefers nothing


def test_a_preference_that_cannot_be_is_refused_naming_the_argument() -> None:
    check = homes.check_prefer
    assert check(0, "west", 2, POOL, DOMAIN, {}) is None
    assert check(0, "", 2, POOL, DOMAIN, {0: "east"}) is None
    assert "LOG: 2" in (check(2, "west", 2, POOL, DOMAIN, {}) or "")
    assert (check(0, "south", 2, POOL, DOMAIN, {}) or "").startswith("DC: 'south' holds none")
    assert "LOG: log 0 is kept in 'east'" in (check(0, "west", 2, POOL, DOMAIN, {0: "east"}) or "")
    assert check(0, "east", 2, POOL, DOMAIN, {0: "east"}) is None
