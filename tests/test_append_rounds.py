"""coordinator/append_rounds.py: what a write's appends decide, with nothing read and
nothing waited on: where each record goes, what an answer means for each record, when a
round is the last."""

from __future__ import annotations

import grpc
from hypothesis import given
from hypothesis import strategies as st

from catalog.log_map import Handing, Handoff, LogMap
from coordinator import append_rounds as rounds
from coordinator.appender import Placed, Sealed
from runtime.refusals import Refusal

# Shards 0-3 on two logs; shard 1 was handed from log 1 to log 0 (generation 2, versions
# from 100, log time from 5000); shard 3's hand-off to log 0 is under way.
MAP = LogMap(logs=2, of=(0, 0, 0, 1), version=3,
             handoffs=(Handoff(shard=1, old=1, at=10, new=0, start=20, generation=2, version_base=100,
                               ts_floor=5000),),
             handing=(Handing(shard=3, old=1, new=0, scan_from=30),))


def test_a_round_sends_each_record_to_its_shards_log_and_holds_a_shard_being_handed_over() -> None:
    shards = [0, 1, 2, 3, 1]
    r = rounds.route(MAP, shards, [0, 1, 2, 3, 4])
    assert r.by_log == {0: [0, 1, 2, 4]} and r.held == [3]
    # each record named with its shard's stint in that log: (generation, version base, time floor)
    assert r.stints[0] == [(0, 0, 0), (2, 100, 5000), (0, 0, 0), (2, 100, 5000)]
    assert rounds.route(MAP, shards, [3]) == rounds.Route({}, {}, [3])


@given(st.lists(st.integers(0, 3), min_size=1, max_size=12))
def test_every_record_of_a_round_is_sent_once_or_held(shards: list[int]) -> None:
    r = rounds.route(MAP, shards, list(range(len(shards))))
    sent = [i for idx in r.by_log.values() for i in idx]
    assert sorted(sent + r.held) == list(range(len(shards)))
    assert all(MAP.log_of(shards[i]) == lg for lg, idx in r.by_log.items() for i in idx)
    assert all(shards[i] == 3 for i in r.held)


def test_an_answer_decides_each_record_alone() -> None:
    stints = [(0, 0, 0), (2, 100, 5000)]
    waits = [True, False, False]
    placed = [Placed(7, 1000, False, 0), Placed(8, 1000, False, 0)]
    # placed: the record that waits for its storage nodes' answer is not decided yet; the
    # other is told where it stands, with its stint
    d = rounds.answered(placed, [0, 1], waits, stints, resent=set())
    assert d.again == [] and list(d.out) == [1]
    assert d.out[1] == Placed(8, 1000, False, 0, version_base=100, ts_floor=5000)
    # sent again after a sealed refusal: an earlier attempt may be in the log too
    d = rounds.answered([Placed(9, 1000, False, 0)], [2], waits, [(0, 0, 0)], resent={2})
    assert d.out[2].maybe_earlier_copy  # type: ignore[union-attr]
    # refused: each record fails with it; sealed: every record goes round again
    no = Refusal(grpc.StatusCode.UNAVAILABLE, "the log is unavailable")
    assert rounds.answered(no, [0, 1], waits, stints, set()).out == {0: no, 1: no}
    d = rounds.answered(Sealed("shard 1 was handed over"), [0, 1], waits, stints, set())
    assert (d.out, d.again) == ({}, [0, 1])


def test_a_round_ends_the_write_when_nothing_is_left_or_the_time_is_out() -> None:
    assert rounds.next_step([], 1.0) is rounds.Step.DONE
    assert rounds.next_step([], -1.0) is rounds.Step.DONE
    assert rounds.next_step([2], 0.5) is rounds.Step.AGAIN
    assert rounds.next_step([2], 0.0) is rounds.Step.GIVE_UP
    backoff, seen = rounds.BACKOFF_FIRST_S, []
    for _ in range(6):
        seen.append(backoff)
        backoff = rounds.next_backoff(backoff)
    assert seen == sorted(seen) and max(seen) == rounds.BACKOFF_MAX_S
    assert rounds.held_too_long(3).code == grpc.StatusCode.UNAVAILABLE
    assert "header.request_id" in rounds.no_answer().text
