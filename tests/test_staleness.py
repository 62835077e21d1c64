"""The bounded-staleness rule (record/staleness.py) against a model of a log: writers whose
clocks stand within MAX_CLOCK_OFFSET_MS of real time stamp entries never decreasing, each
acknowledged some time after its append; a replica has applied a prefix of what was
appended by the time it answers, its own clock off by up to the offset too. Whenever the
rule lets the replica answer a read bounded by N, every entry acknowledged more than N
before the read began is in that prefix."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from record import staleness

OFF = staleness.MAX_CLOCK_OFFSET_MS


@dataclass(frozen=True)
class Case:
    appends: list[tuple[int, int, int]]  # per entry: ms since the last append, ack delay, the writer's offset
    applied: int  # entries applied by the replica when it answers (of those appended by then)
    start: int  # when the read begins (real ms)
    answer_after: int  # how long after it the replica answers
    replica_offset: int
    bound: int


def cases(max_offset: int) -> st.SearchStrategy[Case]:
    offsets = st.integers(-max_offset, max_offset)
    return st.builds(
        Case,
        appends=st.lists(st.tuples(st.integers(0, 700), st.integers(0, 400), offsets), min_size=1,
                         max_size=30),
        applied=st.integers(0, 30), start=st.integers(0, 12_000), answer_after=st.integers(0, 300),
        replica_offset=offsets, bound=st.integers(1, 5_000))


def violation(c: Case, offset_ms: int = OFF) -> str | None:
    """What the rule (with `offset_ms`) let the replica serve that it must not: None if none."""
    t, last = 0, 0
    stamps, appended_at, acked_at = [], [], []
    for gap, delay, writer_offset in c.appends:
        t += gap
        last = max(t + writer_offset, last)  # log/writer.py: never backwards, across writers too
        stamps.append(last)
        appended_at.append(t)
        acked_at.append(t + delay)
    answer = c.start + c.answer_after
    k = min(c.applied, sum(1 for a in appended_at if a <= answer))  # applied only what was appended
    if k == 0:
        return None  # nothing applied: no log time to answer by (a replica starts at its copy's)
    if not staleness.fresh_enough(stamps[k - 1], answer + c.replica_offset, c.bound, offset_ms):
        return None
    missed = [i for i in range(k, len(stamps)) if acked_at[i] < c.start - c.bound]
    return f"entries {missed} acknowledged before the bound, not applied" if missed else None


@settings(max_examples=1000, deadline=None)
@given(cases(OFF))
def test_a_replica_the_rule_lets_answer_has_applied_everything_acknowledged_before_the_bound(c: Case) -> None:
    assert violation(c) is None


def test_the_rule_needs_twice_the_offset() -> None:
    """The model can fail: with the clocks' offset counted once, not twice, a replica whose
    clock is behind serves a read without an entry that a writer whose clock is ahead
    stamped and acknowledged before the read's bound."""
    c = Case(appends=[(999, 0, OFF), (1, 0, OFF)], applied=1, start=1000 + 1000 + 1, answer_after=0,
             replica_offset=-OFF, bound=1000)
    assert violation(c, offset_ms=OFF // 2) is not None
    assert violation(c) is None


@pytest.mark.parametrize("applied,now,bound,ok", [
    (10_000, 10_000, 1000, True),  # applied up to now
    (9_501, 10_000, 1000, True),  # 499 ms behind: within 1000 - 2 x 250
    (9_500, 10_000, 1000, False),  # exactly at the edge: an entry stamped there may stand after it
    (9_000, 10_000, 1000, False),
    (10_000, 10_000, 500, False),  # a bound within twice the offset: never served by a replica
    (10_000, 10_000, 0, False),
])
def test_the_edges(applied: int, now: int, bound: int, ok: bool) -> None:
    assert staleness.fresh_enough(applied, now, bound) is ok


def test_the_sdk_refuses_the_bounds_the_servers_refuse() -> None:
    from midtown import checks
    assert checks.MAX_STALENESS_MS == staleness.MAX_STALENESS_MS


@given(st.integers(-5_000, 5_000), st.integers(-5_000, 5_000), st.integers(0, 3_000), st.integers(0, 10**9))
def test_clocks_further_apart_than_the_rule_allows_are_seen_by_a_stamp_that_arrives_in_time(
        writer_off: int, replica_off: int, trip: int, t: int) -> None:
    """record/staleness.py ClockWatch: the rule holds while the writer's clock stands at most
    twice the offset ahead of the replica's. A stamp read at real time t (by the writer's
    clock) that reaches the replica `trip` ms later is seen to run ahead whenever the clocks
    stand further apart than that by more than the trip; clocks the rule allows (or the
    replica's ahead) are never doubted."""
    w = staleness.ClockWatch()
    ahead = w.note(0, t + writer_off, t + trip + replica_off, mono_s=0.0, checked=True)
    if writer_off - replica_off > 2 * OFF + trip:
        assert ahead is not None and w.doubt(0, 0.0) is not None
    if writer_off - replica_off <= 2 * OFF:
        assert ahead is None and w.doubt(0, 0.0) is None


def test_a_doubt_lasts_its_time_and_is_said_once() -> None:
    w = staleness.ClockWatch()
    assert "not been checked" in (w.doubt(1, 0.0) or "")  # no bounded read before a check
    assert w.note(1, 9_000, 9_000, mono_s=1.0) is None and w.doubt(1, 1.0) is not None  # an entry: no check
    assert w.note(1, 9_000, 9_000, mono_s=1.0, checked=True) is None and w.doubt(1, 1.0) is None
    assert w.doubt(1, 1.0 + staleness.CLOCK_TRUST_S) is not None  # a check lasts its time
    assert w.note(1, 10_000, 9_000, mono_s=5.0) == 1_000  # begins a doubt: said
    assert w.note(1, 10_500, 9_100, mono_s=6.0, checked=True) is None  # still in doubt: not said again
    assert "1400 ms ahead" in (w.doubt(1, 15.9) or "") and "not been checked" in (w.doubt(0, 6.0) or "")
    assert w.doubt(1, 16.0) is not None  # CLOCK_DOUBT_S after the last stamp ahead: not checked since
    assert w.note(1, 20_000, 19_500, mono_s=17.0, checked=True) is None  # 500 ahead: allowed
    assert w.doubt(1, 17.0) is None


def test_a_replicas_lag_in_log_time_is_the_writers_clock_past_its_last_stamp_while_behind() -> None:
    assert staleness.lag_ms(10_000, 9_200, missing=3) == 800
    assert staleness.lag_ms(10_000, 9_200, missing=0) == 0  # caught up: an idle log's last stamp is old
    assert staleness.lag_ms(10_000, 10_050, missing=1) == 0  # clocks apart: never below 0
