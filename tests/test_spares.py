"""Spare replicas (log/spares.py, log/peers.py): which followers a writer's entries go to at
once, and a spare follower's outlet letting copies wait to travel together."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from log import limits, spares
from log.entry import Entry
from log.linger import LINGER_ENTRIES_MAX
from log.messages import AddEntries
from log.peers import Outlet, Peers
from log.replica_link import OwnReplica

LONG_S = 60.0  # a linger nothing should let run out in these tests


def test_the_first_round_trip_stands_alone_then_it_is_smoothed() -> None:
    assert spares.smoothed(None, 0.004) == 0.004
    s = 0.004
    for _ in range(100):
        s = spares.smoothed(s, 0.001)
    assert s == pytest.approx(0.001, rel=1e-3)


def test_an_unanswered_call_ranks_a_follower_by_how_long_it_waits() -> None:
    assert spares.rank(None, None, now=5.0) == 0.0  # never measured: tried first
    assert spares.rank(0.002, None, now=5.0) == 0.002
    assert spares.rank(0.002, 4.0, now=5.0) == pytest.approx(1.0)
    assert spares.rank(0.002, 4.9995, now=5.0) == 0.002


def test_the_fastest_followers_are_eager() -> None:
    rtt = {1: 0.003, 2: 0.001, 3: 0.002}
    assert spares.eager([1, 2, 3], 1, rtt, {}, now=0.0) == {2}
    assert spares.eager([1, 2, 3], 2, rtt, {}, now=0.0) == {2, 3}
    assert spares.eager([1, 2], 0, rtt, {}, now=0.0) == frozenset()
    assert spares.eager([1, 2], 1, {}, {}, now=0.0) == {1}  # ties go to the lower id


def test_a_follower_that_stops_answering_drops_out_within_a_few_round_trips() -> None:
    rtt = {1: 0.001, 2: 0.005}
    assert spares.eager([1, 2], 1, rtt, {1: 10.0}, now=10.0001, current=frozenset({1})) == {1}
    # Its call has waited STICKINESS times longer than the other's round trip: replaced.
    assert spares.eager([1, 2], 1, rtt, {1: 10.0}, now=10.011, current=frozenset({1})) == {2}


def test_an_eager_follower_keeps_its_place_against_one_about_as_fast() -> None:
    rtt = {1: 0.0012, 2: 0.001}
    assert spares.eager([1, 2], 1, rtt, {}, now=0.0) == {2}
    assert spares.eager([1, 2], 1, rtt, {}, now=0.0, current=frozenset({1})) == {1}
    rtt[2] = 0.0005  # more than STICKINESS times faster
    assert spares.eager([1, 2], 1, rtt, {}, now=0.0, current=frozenset({1})) == {2}


@given(rtt=st.dictionaries(st.integers(0, 6), st.floats(0, 10)),
       since=st.dictionaries(st.integers(0, 6), st.floats(0, 100)),
       followers=st.sets(st.integers(0, 6)), need=st.integers(0, 7), current=st.frozensets(st.integers(0, 6)))
def test_eager_ones_rank_no_slower_than_any_spare(rtt: dict[int, float], since: dict[int, float],
                                                  followers: set[int], need: int,
                                                  current: frozenset[int]) -> None:
    now = 100.0
    got = spares.eager(followers, need, rtt, since, now, current)
    assert got <= followers and len(got) == min(need, len(followers))
    def r(f: int) -> float:  # an incumbent counts STICKINESS times faster
        return spares.rank(rtt.get(f), since.get(f), now) / (spares.STICKINESS if f in current else 1)
    for e in got:
        assert all(r(e) <= r(s) for s in followers - got)


def test_a_commit_waits_for_the_quorum_less_the_writers_own_copy() -> None:
    assert spares.followers_needed((0, 1, 2), me=0, ack_quorum=2) == 1
    assert spares.followers_needed((1, 2, 3), me=0, ack_quorum=2) == 2


def test_the_spare_linger_comes_from_the_environment_or_is_refused_naming_it() -> None:
    assert spares.linger_s_from_env({}) == spares.SPARE_LINGER_S
    assert spares.linger_s_from_env({"MIDTOWN_SPARE_LINGER_S": "0"}) == 0.0
    assert spares.linger_s_from_env({"MIDTOWN_SPARE_LINGER_S": "0.005"}) == 0.005
    for bad in ("soon", "-1", "nan", str(spares.SPARE_LINGER_MAX_S * 2)):
        with pytest.raises(ValueError, match="MIDTOWN_SPARE_LINGER_S"):
            spares.linger_s_from_env({"MIDTOWN_SPARE_LINGER_S": bad})
    # Never as long as the writer's resend interval: a lingering copy is not a lost one.
    assert spares.SPARE_LINGER_MAX_S * 1000 < limits.RESEND_INTERVAL_MS


# ------------------------------------------------------------------ the peers' choice
def _driver(replicas: tuple[int, ...]) -> Any:
    """A writer's driver as the peers see it: its segment's replicas, and where replies go."""
    return SimpleNamespace(core=SimpleNamespace(replicas=replicas, ack_quorum=2), reply=lambda *_: None)


def _peers(linger_s: float, local_batch: Any = None) -> tuple[Peers, threading.Event]:
    stop = threading.Event()
    p = Peers(0, OwnReplica(local_batch or (lambda msgs: [None] * len(msgs))), lambda s: None,
              stop, spare_linger_s=linger_s)
    return p, stop


def test_peers_send_at_once_to_the_fastest_follower_and_their_own_copy() -> None:
    p, stop = _peers(0.02)
    try:
        d = _driver((0, 1, 2))
        p.answered(1, 0.001)
        p.answered(2, 0.004)
        assert p._eager(d, 0) and p._eager(d, 1) and not p._eager(d, 2)
        p.answered(1, None)  # a failed call: the other follower takes its place
        assert p._eager(d, 2) and not p._eager(d, 1)
        assert p._eager(_driver((1, 2, 3)), 3)  # the writer holds no copy: both followers count
        assert p._eager(d, 5)  # not the segment's replica (a recovering one's): at once
    finally:
        stop.set()


def test_without_a_spare_linger_every_copy_goes_at_once() -> None:
    p, stop = _peers(0.0)
    try:
        p.answered(1, 0.001)
        p.answered(2, 0.004)
        assert p._eager(_driver((0, 1, 2)), 2)
    finally:
        stop.set()


# ------------------------------------------------------------------ the outlet
def _recording_outlet(linger_s: float) -> tuple[Outlet, list[list[AddEntries]], threading.Event]:
    """An outlet to this server's own replica (written by `local_batch`), recording each call."""
    calls: list[list[AddEntries]] = []
    got = threading.Event()

    def local_batch(msgs: list[AddEntries]) -> list[None]:
        calls.append(list(msgs))
        got.set()
        return [None] * len(msgs)

    p, stop = _peers(linger_s, local_batch)
    outlet = Outlet(p, 0)
    return outlet, calls, got


def _msg(position: int, n: int = 1) -> AddEntries:
    return AddEntries(0, 1, 1, tuple(Entry(position + i, 1, 0, b"x") for i in range(n)), -1)


def test_spare_copies_wait_and_go_with_the_next_eager_message() -> None:
    outlet, calls, got = _recording_outlet(LONG_S)
    try:
        d = _driver((0, 1, 2))
        for i in range(3):
            outlet.put(d, _msg(i), eager=False)
        assert not got.wait(0.3)  # only spare copies: they linger
        outlet.put(d, _msg(3), eager=True)
        assert got.wait(LONG_S)
        assert [[m.entries[0].position for m in c] for c in calls] == [[0, 1, 2, 3]]
    finally:
        outlet.peers.stop.set()


def test_a_full_batch_of_spare_copies_goes_without_waiting_out_the_linger() -> None:
    outlet, calls, got = _recording_outlet(LONG_S)
    try:
        d = _driver((0, 1, 2))
        outlet.put(d, _msg(0, LINGER_ENTRIES_MAX - 1), eager=False)
        assert not got.wait(0.3)
        outlet.put(d, _msg(LINGER_ENTRIES_MAX - 1), eager=False)
        assert got.wait(LONG_S)
        assert sum(len(m.entries) for m in calls[0]) == LINGER_ENTRIES_MAX
    finally:
        outlet.peers.stop.set()


def test_spare_copies_go_once_the_linger_is_out() -> None:
    outlet, calls, got = _recording_outlet(0.05)
    try:
        t0 = time.monotonic()
        outlet.put(_driver((0, 1, 2)), _msg(0), eager=False)
        assert got.wait(LONG_S)
        assert time.monotonic() - t0 >= 0.05  # no sooner than the linger (it may be later)
        assert len(calls) == 1
    finally:
        outlet.peers.stop.set()
