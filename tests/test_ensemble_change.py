"""When a writer moves its open segment off a copy (log/ensemble_change.py): a copy is lost
once a message to it has gone unanswered for LOST_S, or at once when it is gone from
ZooKeeper; never within SETTLE_S of the segment opening; and a writer that was paused does
not blame its copies for its own silence."""

from __future__ import annotations

import pytest

from log.ensemble_change import Copies, enabled_from_env


def test_a_copy_silent_for_lost_s_is_lost_and_one_that_answers_is_not() -> None:
    c = Copies(lost_s=1.0, settle_s=1.0, pause_s=0.5)
    c.open((0, 1, 2), now=0.0)
    for t in (0.1, 0.4, 0.7):
        c.sent(1, t)
        c.sent(2, t)
        c.answered(2)
        assert c.lost(t, me=0) == set()
    assert c.lost(1.05, me=0) == set()  # 0.95 s since its first unanswered message
    assert c.lost(1.15, me=0) == {1}
    c.answered(1)
    assert c.lost(1.2, me=0) == set()
    c.sent(0, 1.2)  # the writer's own copy is never lost
    assert c.lost(1.6, me=0) == set() and c.lost(2.0, me=0) == set() and c.lost(2.3, me=0) == set()


def test_none_within_the_settle_time_and_gone_ones_at_once() -> None:
    c = Copies(lost_s=1.0, settle_s=1.0, pause_s=0.5)
    c.open((3, 4, 5), now=10.0)
    c.sent(4, 10.0)
    assert c.lost(10.4, me=3, gone=frozenset({5})) == set()  # a new segment settles first
    assert c.lost(10.8, me=3, gone=frozenset({5})) == set()
    assert c.lost(11.0, me=3, gone=frozenset({5})) == {4, 5}
    c.sent(9, 11.0)  # not a copy of this segment: never counted
    assert 9 not in c.lost(13.0, me=3)


def test_a_paused_writer_gives_its_copies_time_to_answer() -> None:
    c = Copies(lost_s=1.0, settle_s=1.0, pause_s=0.5)
    c.open((0, 1, 2), now=0.0)
    c.sent(1, 0.9)
    assert c.lost(1.2, me=0) == set()
    # The writer's process stops for 5 s: the answer waiting for it is not read yet.
    assert c.lost(6.2, me=0) == set()
    c.answered(1)
    assert c.lost(6.3, me=0) == set()
    c.sent(1, 6.3)
    assert c.lost(6.7, me=0) == set() and c.lost(7.1, me=0) == set() and c.lost(7.4, me=0) == {1}


def test_the_switch() -> None:
    assert enabled_from_env({}) and enabled_from_env({"MIDTOWN_ENSEMBLE_CHANGE": "on"})
    assert not enabled_from_env({"MIDTOWN_ENSEMBLE_CHANGE": "off"})
    with pytest.raises(ValueError, match="MIDTOWN_ENSEMBLE_CHANGE: 'maybe'; say on or off"):
        enabled_from_env({"MIDTOWN_ENSEMBLE_CHANGE": "maybe"})
