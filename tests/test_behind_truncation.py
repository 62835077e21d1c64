"""storage_node/apply_loop.py ApplyLoop._behind_truncation: the decision of a node whose
tail of a log found its position truncated, between stopping (it holds a shard of the
log, or takes one in by a move under way: it must bootstrap) and going on from the log's
first position (it holds none). Its ZooKeeper reads (the sets, the moves) and its store
are stand-ins: the decision is what is tested."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import pytest

from catalog import log_map
from catalog.replica_sets import ReplicaSets
from catalog.shard_moves import Move
from storage_node import apply_loop
from storage_node.apply_loop import ApplyLoop
from storage_node.handoff import Place
from storage_node.state import NodeState

# Six shards over two logs (shard s on log s % 2): log 0 carries shards 0, 2 and 4.
LEFT = ReplicaSets(3, ((1, 2, 3), (0, 1, 2), (1, 2, 3), (0, 1, 2), (1, 2, 3), (0, 1, 2)), version=14)
HELD = ReplicaSets(3, ((0, 1, 2), (0, 1, 2), (1, 2, 3), (0, 1, 2), (1, 2, 3), (0, 1, 2)), version=12)
STALE = ReplicaSets(3, ((1, 2, 3), (0, 1, 2), (0, 1, 2), (0, 1, 2), (1, 2, 3), (0, 1, 2)), version=13)


class _State:
    """The fields of storage_node/state.py NodeState the decision reads, for node 0."""

    def __init__(self, view: ReplicaSets, in_zk: ReplicaSets, marks: dict[int, int],
                 places: dict[int, Place] | None = None) -> None:
        self.node_id, self.kv, self.log_count = 0, SimpleNamespace(shards=6), 2
        self.log_map = log_map.first(6, 2)
        self.places = places or {}
        self.zk = None
        self.sets, self._in_zk, self.marks = view, in_zk, marks
        self.positions = {0: (58, 5), 1: (78, 5)}
        self.store = None
        self.commit_lock = threading.Lock()
        self.logs = SimpleNamespace(status=lambda: [{"log": 0, "first": 67}, {"log": 1, "first": 0}])

    def read_sets(self) -> None:
        self.sets = self._in_zk

    def holds(self, shard: int) -> bool:
        return self.sets.holds(self.node_id, shard)

    def learn_log_map(self, m: log_map.LogMap) -> None:
        self.log_map = m

    place_of = NodeState.place_of  # the real ones, over these fields
    log_of = NodeState.log_of
    shards_in_log = NodeState.shards_in_log
    condemned = NodeState.condemned


def _decide(view: ReplicaSets, in_zk: ReplicaSets, marks: dict[int, int], moves: dict[int, Move],
            monkeypatch: pytest.MonkeyPatch, in_zk_map: log_map.LogMap | None = None,
            places: dict[int, Place] | None = None,
            failovers: tuple[dict, ...] = ()) -> tuple[list[str], dict[int, tuple[int, int]]]:
    committed: dict[int, tuple[int, int]] = {}
    monkeypatch.setattr(apply_loop.registry, "read_kv", lambda zk: SimpleNamespace(failovers=failovers))
    monkeypatch.setattr(apply_loop.registry, "read_moves", lambda zk: {s: (m, 0) for s, m in moves.items()})
    monkeypatch.setattr(apply_loop.registry, "read_log_map",
                        lambda zk, kv, count: in_zk_map or log_map.first(6, 2))
    monkeypatch.setattr(apply_loop, "BatchView", lambda store: SimpleNamespace(commit=committed.update))
    fatal: list[str] = []
    node: Any = SimpleNamespace(state=_State(view, in_zk, marks, places), _mutex=threading.Lock(),
                                _fatal=lambda code, why: fatal.append(why),
                                condemned=lambda why: fatal.append(f"condemned: {why}"))
    ApplyLoop._behind_truncation(node, 0, "position 58 was truncated")
    return fatal, committed


def test_a_node_that_has_just_left_the_logs_last_shard_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its view still names it for shard 2 (a move of shard 2 away from it ended while it
    restarted), and the copy of shard 2 it once took in is not dropped yet: it holds none
    of the log's shards, so it goes on from the log's first position. (It stopped, and had
    to bootstrap, when it decided by the view it had and counted that copy: seed 8 of the
    whole-cluster simulation once the log client asked the servers' Status at once.)"""
    fatal, committed = _decide(STALE, LEFT, {2: 12}, {}, monkeypatch)
    assert fatal == [] and committed == {0: (67, 5)}


@pytest.mark.parametrize("case", ["holds", "moving here"])
def test_a_node_that_holds_or_takes_in_a_shard_of_the_log_stops(case: str,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    if case == "holds":  # the sets in ZooKeeper name it for shard 0, whatever its view
        fatal, committed = _decide(LEFT, HELD, {}, {}, monkeypatch)
    else:  # a copy of shard 4 installed here, its move to this node under way
        fatal, committed = _decide(LEFT, LEFT, {4: 60}, {4: Move(4, 0, 1, "tailing", 60)}, monkeypatch)
    assert len(fatal) == 1 and "behind a truncation" in fatal[0] and committed == {}


def test_a_node_whose_shard_was_handed_away_since_it_started_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """It holds shard 0, which log 0 carried when it started; shard 0 has since been handed
    to log 1 (its copy here, a rebuild's, came with that place): it decides by the map in
    ZooKeeper, which no longer has shard 0 on log 0, so it goes on. (By the map it started
    with it stopped: the hand-off simulation's seed 22.)"""
    handed = log_map.LogMap(2, (1, 1, 0, 1, 0, 1), version=3)
    fatal, committed = _decide(HELD, HELD, {}, {}, monkeypatch, handed, {0: Place(1)})
    assert fatal == [] and committed == {0: (67, 5)}
    fatal, _ = _decide(HELD, HELD, {}, {}, monkeypatch)  # the map unchanged: shard 0 is here
    assert len(fatal) == 1


def test_a_node_a_fail_over_condemned_stops_to_take_a_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    """A node started just before a fail-over cut its log past it (its topology watch has
    not told it yet) meets the truncation the cut raised: it stops to take a copy (exit 76,
    EXIT_FAILED_OVER), whatever it holds, rather than "behind a truncation" (the
    whole-cluster simulation with a data center lost: seeds 231 and 293)."""
    fatal, committed = _decide(HELD, HELD, {}, {}, monkeypatch, failovers=({"condemned": [0, 3]},))
    assert committed == {} and len(fatal) == 1 and fatal[0].startswith("condemned: log 0: position 58")
    fatal, _ = _decide(HELD, HELD, {}, {}, monkeypatch, failovers=({"condemned": [3]},))
    assert len(fatal) == 1 and "behind a truncation" in fatal[0]  # (another node condemned: as before)


def test_a_node_whose_shards_records_in_the_log_all_stand_past_the_truncation_goes_on(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Make soak, seed 101607: node 0 holds shard 2, which started in log 0 and went to log
    1 (a hand-off it applied, its tail of log 0 at 58 then), and has come back to log 0 at
    70 (generation 2), past the log's first position 67: none of its records there is
    truncated. And a copy of shard 4, taken in this log at 68, is installed here by a move
    under way: its records before 68 are in the copy. It goes on; it stopped when it took
    every shard that had had a stint in the log for one with records below the truncation,
    and counted the copy of a move under way whatever position it was taken at."""
    back = log_map.LogMap(2, (0, 1, 0, 1, 0, 1), version=5, origins=(0, 1, 0, 1, 0, 1),
                          handoffs=(log_map.Handoff(2, old=1, at=90, new=0, start=70, generation=2),))
    in_log_1 = {2: Place(1, since=3, generation=1)}
    holds_2 = ReplicaSets(3, ((1, 2, 3), (0, 1, 2), (0, 1, 2), (0, 1, 2), (1, 2, 3), (0, 1, 2)), version=14)
    moving_4 = {4: Move(4, 0, 1, "tailing", 68)}
    fatal, committed = _decide(holds_2, holds_2, {4: 68}, moving_4, monkeypatch, back, in_log_1)
    assert fatal == [] and committed == {0: (67, 5)}
    # its place still in log 0's first stint: a stint may lie between, the node stops
    fatal, _ = _decide(holds_2, holds_2, {4: 68}, moving_4, monkeypatch, back, {2: Place(0)})
    assert len(fatal) == 1 and "behind a truncation" in fatal[0]
    # the copy of shard 4 taken below the log's first position: it stops
    fatal, _ = _decide(holds_2, holds_2, {4: 60}, moving_4, monkeypatch, back, in_log_1)
    assert len(fatal) == 1 and "behind a truncation" in fatal[0]


def test_a_shard_is_in_a_log_by_the_map_and_by_the_nodes_own_place() -> None:
    """storage_node/state.py shards_in_log, which the truncation decision and a copy's
    install (storage_node/apply_loop.py install: whether the node holds another shard of
    the log) count by. Make soak, seed 101256: node 3, behind in log 0, still took shard 2
    from log 0 (it had not applied the shard's hand-off to log 1 there) when it installed
    a copy of shard 5; counting the map's shards of log 0 alone, it held no other, its tail
    jumped to the copy's position past shard 2's hand-off record, and it waited in log 1
    for good."""
    handed = log_map.LogMap(2, (0, 1, 1, 1, 0, 1), version=3)
    st = _State(HELD, HELD, {}, {2: Place(0)})
    st.log_map = handed
    assert NodeState.shards_in_log(st, 0) == {0, 2, 4}  # type: ignore[arg-type]
    assert NodeState.shards_in_log(st, 1) == {1, 2, 3, 5}  # type: ignore[arg-type]  # (the map)
    st.places = {2: Place(1, since=9, opened=False, generation=1)}  # the hand-off applied
    assert NodeState.shards_in_log(st, 0) == {0, 4}  # type: ignore[arg-type]
