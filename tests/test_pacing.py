"""Which replicas get a writer's entries at once (log/pacing.py): the writer's own replica
and enough others for an ack quorum, stalled and slow replicas passed over, and a choice
that stays put while the replicas are alike."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from log import limits
from log.pacing import SLOW_FACTOR, Health, eager, moved_average

LINGER = limits.LAZY_LINGER_S


def test_the_writers_own_replica_and_one_other_for_a_quorum_of_two() -> None:
    assert eager(1, (0, 1, 2), 2, {}) == {1, 0}
    assert eager(0, (0, 1, 2), 2, {}) == {0, 1}
    assert eager(2, (0, 1, 2), 3, {}) == {0, 1, 2}


def test_a_writer_outside_the_ensemble_needs_a_whole_quorum_of_others() -> None:
    assert eager(9, (3, 4, 5), 2, {}) == {3, 4}


def test_a_failed_or_long_busy_replica_is_passed_over() -> None:
    assert eager(0, (0, 1, 2), 2, {1: Health(failed=True)}) == {0, 2}
    assert eager(0, (0, 1, 2), 2, {1: Health(busy_s=LINGER * 2)}) == {0, 2}
    assert eager(0, (0, 1, 2), 2, {1: Health(busy_s=LINGER * 2), 2: Health(busy_s=LINGER / 2)}) == {0, 2}
    # both stalled: the quorum still needs one of them
    assert eager(0, (0, 1, 2), 2, {1: Health(failed=True), 2: Health(failed=True)}) == {0, 1}


def test_a_replica_with_a_call_in_flight_yields_to_an_idle_one() -> None:
    # Under load the followers carry the appends in turn: a commit goes out at once to one
    # that is free instead of queueing behind the other's call.
    assert eager(0, (0, 1, 2), 2, {1: Health(busy_s=LINGER / 2)}) == {0, 2}
    assert eager(0, (0, 1, 2), 2, {1: Health(busy_s=LINGER / 2), 2: Health(busy_s=LINGER / 4)}) == {0, 1}


def test_a_replica_much_slower_than_the_fastest_is_passed_over() -> None:
    slow = {1: Health(latency_s=0.010), 2: Health(latency_s=0.010 / SLOW_FACTOR / 1.5)}
    assert eager(0, (0, 1, 2), 2, slow) == {0, 2}


def test_the_choice_stays_put_while_the_replicas_are_alike() -> None:
    # Averages that cross each other from one call to the next do not move it.
    for a, b in [(0.0010, 0.0012), (0.0012, 0.0010), (0.0008, 0.0015)]:
        assert eager(0, (0, 1, 2), 2, {1: Health(latency_s=a), 2: Health(latency_s=b)}) == {0, 1}


def test_moved_average() -> None:
    assert moved_average(0.0, 0.004) == 0.004
    assert abs(moved_average(0.004, 0.014, 0.2) - 0.006) < 1e-12


health = st.builds(Health, failed=st.booleans(), busy_s=st.floats(0, 1), latency_s=st.floats(0, 1))


@given(me=st.integers(0, 6), replicas=st.lists(st.integers(0, 6), min_size=1, max_size=5, unique=True),
       ack_quorum=st.integers(1, 5), known=st.dictionaries(st.integers(0, 6), health))
def test_eager_is_a_quorum_of_the_replicas_with_the_writers_own_first(
        me: int, replicas: list[int], ack_quorum: int, known: dict[int, Health]) -> None:
    got = eager(me, tuple(replicas), ack_quorum, known)
    assert got <= set(replicas)
    assert len(got) == min(ack_quorum, len(replicas))
    if me in replicas:
        assert me in got
    # Never a stalled replica while one that is not stalled is left out.
    stalled = {r for r in replicas if r != me and known.get(r, Health()).stalled(LINGER)}
    left_out = set(replicas) - got
    if got & stalled:
        assert not (left_out - stalled)
