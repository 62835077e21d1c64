"""Pure rules the storage nodes' shell follows: who answers for a shard, when to publish
a position, how far a log may be truncated."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from catalog.routing import answers_for, log_of, shard_of
from storage_node.truncation import behind, needs_log, needs_publish, stint_below, truncation_point


@given(st.integers(0, 10_000), st.integers(1, 6))
def test_exactly_two_members_answer_each_shard(shard: int, n: int) -> None:
    members = list(range(10, 10 + n))
    answering = [m for m in members if answers_for(m, shard, members, 2)]
    assert len(answering) == min(2, n)
    assert not answers_for(99, shard, members, 2), "a non-member never answers"


def test_routing_is_stable_and_spread() -> None:
    assert shard_of("d#1", b"k", 64) == shard_of("d#1", b"k", 64)
    shards = {shard_of("d#1", str(i).encode(), 64) for i in range(2000)}
    assert shards == set(range(64))
    assert {log_of(s, 3) for s in range(64)} == {0, 1, 2}


def test_publish_only_after_key_value_records() -> None:
    assert not needs_publish(None, None)
    assert needs_publish(5, None)
    assert needs_publish(5, 5) and not needs_publish(4, 5)


def test_truncation_waits_for_every_member() -> None:
    pos = {(3, 0): 40, (3, 1): 25}
    assert truncation_point(pos, 3, [0, 1]) == 25
    assert truncation_point(pos, 3, [0, 1, 2]) is None, "member 2 has not reported"
    assert truncation_point(pos, 4, [0, 1]) is None
    assert truncation_point(pos, 3, []) is None


def test_every_shard_travels_in_exactly_one_log() -> None:
    from catalog.log_map import first

    per_log = [first(64, 3).shards_of_log(lg) for lg in range(3)]
    assert sorted(s for ss in per_log for s in ss) == list(range(64))
    assert all(log_of(s, 3) == lg for lg, ss in enumerate(per_log) for s in ss)


def test_a_node_behind_a_truncation_stops_only_if_it_needs_the_log() -> None:
    """storage_node/apply_loop.py _behind_truncation's decision: a node holding one of the
    log's shards, or taking one in by a move whose copy it has, stops (it bootstraps when
    started again); one that needs nothing of the log goes on from its first position
    still held, or from its own if that is further."""
    held = {3}.__contains__
    assert needs_log([1, 3], held, incoming=(), marked=())
    assert not needs_log([1, 2], held, incoming=(), marked=())
    assert needs_log([1, 2], held, incoming={2}, marked={2})  # a move's copy taken in
    assert not needs_log([1, 2], held, incoming={2}, marked=())  # no copy of it here yet
    # a copy taken in this log at or past its first position held: its records before are in it
    assert not needs_log([1, 2], held, incoming={2}, marked={2}, copied_past={2})
    assert not needs_log([1, 3], held, incoming=(), marked={3}, copied_past={3})
    assert needs_log([2, 3], held, incoming=(), marked={2}, copied_past={2})
    assert behind(True, first=40, position=10) is None
    assert behind(False, first=40, position=10) == 40
    assert behind(False, first=40, position=55) == 55


def test_a_shard_handed_to_a_log_once_has_no_records_there_before_its_start() -> None:
    """storage_node/truncation.py stint_below: a shard whose one stint in a log began by its
    first hand-off, at or past the log's first position still held, lost nothing to the
    truncation; one that started in the log, was handed more than once, or whose stint
    starts below the truncation may have."""
    from catalog.log_map import Handoff, LogMap

    m = LogMap(logs=2, of=(0, 0, 0), handoffs=(Handoff(1, old=1, at=34, new=0, start=59, generation=1),
                                                Handoff(2, old=1, at=5, new=0, start=80, generation=2)),
               origins=(0, 1, 1))
    assert not stint_below(m, 1, 0, first=14)  # handed in at 59, the log held from 14
    assert stint_below(m, 1, 0, first=60)  # ... truncated past its start
    assert stint_below(m, 0, 0, first=14)  # never handed: it started in log 0
    assert stint_below(m, 2, 0, first=14)  # handed twice: an earlier stint in log 0 may be there


def test_a_node_needs_no_record_below_a_truncation_of_a_stint_that_begins_after_its_own() -> None:
    """stint_below by the node's own state of the shard (its Place): make soak, seed 101607.
    Shard 2 started in log 0 and went to log 1 (generation 1) at 1; a node applied that
    hand-off (its tail of log 0 then at 9) and stopped; log 0 was truncated to 12; the
    shard came back to log 0 at 41 (generation 2). Its records there all stand past the
    truncation, whether the node has applied the second hand-off (it awaits the open
    record from 41) or not (the map names it); it stopped for nothing."""
    from catalog.log_map import Handoff, LogMap
    from storage_node.handoff import Place

    back = LogMap(logs=2, of=(0, 0, 0), handoffs=(Handoff(2, old=1, at=69, new=0, start=41, generation=2),),
                  origins=(0, 0, 0))
    in_log_1 = Place(1, since=1, opened=True, version_base=1, generation=1)
    assert not stint_below(back, 2, 0, first=12, place=in_log_1)
    assert stint_below(back, 2, 0, first=50, place=in_log_1)  # truncated past the new stint's start
    awaiting = Place(0, since=41, opened=False, version_base=31, generation=2)
    assert not stint_below(back, 2, 0, first=12, place=awaiting)
    assert stint_below(back, 2, 0, first=42, place=awaiting)  # its open record may be below 42
    assert stint_below(back, 2, 0, first=12, place=Place(0, since=41, opened=True, generation=2))
    # a node a hand-off behind (its state in log 0's first stint): a stint between may hold records
    assert stint_below(back, 2, 0, first=12, place=Place(0))
