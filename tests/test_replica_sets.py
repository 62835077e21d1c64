"""Replica sets (catalog/replica_sets.py): where each shard lives, and what follows from
it for a node (its shards, its logs) and for a log (whose positions its truncation waits
for)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from catalog import log_map, replica_sets
from catalog.routing import log_of
from record.model import Drop, Get, Position, Record
from storage_node.truncation import truncation_point


@settings(deadline=None)  # a loaded machine takes its time; the placement is what is checked
@given(shards=st.integers(1, 300), n=st.integers(1, 12), r=st.integers(1, 5), logs=st.integers(1, 5),
       offset=st.integers(0, 100))
def test_spread_places_every_shard_on_r_distinct_nodes_evenly(shards: int, n: int, r: int, logs: int,
                                                            offset: int) -> None:
    members = [offset + 3 * i for i in range(n)]  # ids need not be 0..n-1
    if r > n:
        with pytest.raises(ValueError, match="replicas"):
            replica_sets.spread(shards, members, r)
        return
    sets = replica_sets.spread(shards, members, r)
    assert len(sets.sets) == shards
    for nodes in sets.sets:
        assert len(set(nodes)) == r and set(nodes) <= set(members) and list(nodes) == sorted(nodes)
    counts = replica_sets.counts(sets)
    held = [counts.get(m, 0) for m in members]
    assert sum(held) == shards * r
    assert max(held) - min(held) <= 1  # even, give or take one
    first = log_map.first(shards, logs)
    for m in members:
        mine = sets.shards_of(m)
        assert all(sets.holds(m, s) for s in mine)
        assert set(sets.logs_of(m, first)) == {log_of(s, logs) for s in mine}
    for lg in range(logs):
        assert set(sets.nodes_of_log(lg, first)) == {m for s in range(shards) if log_of(s, logs) == lg
                                                    for m in sets.of(s)}
    assert replica_sets.from_json(replica_sets.to_json(sets), 7) == replica_sets.ReplicaSets(r, sets.sets, 7)


def test_six_nodes_three_replicas_each_node_holds_half() -> None:
    sets = replica_sets.spread(64, range(6), 3)
    counts = replica_sets.counts(sets)
    assert sorted(counts) == list(range(6))
    assert all(31 <= c <= 33 for c in counts.values()), counts


def test_everyone_holds_every_shard_without_replica_sets() -> None:
    sets = replica_sets.everyone(8, [2, 0, 1])
    assert sets.version == -1 and sets.of(5) == (0, 1, 2) and sets.shards_of(1) == tuple(range(8))


@pytest.mark.parametrize("replicas,members,ok", [(3, 6, True), (3, 3, True), (0, 6, False),
                                                 (10, 20, False), (4, 3, False)])
def test_replicas_out_of_range_are_refused_naming_the_field(replicas: int, members: int, ok: bool) -> None:
    if ok:
        replica_sets.check_replicas(replicas, members)
    else:
        with pytest.raises(ValueError, match="^replicas: "):
            replica_sets.check_replicas(replicas, members)


def test_truncation_waits_for_the_holders_of_the_logs_shards_only() -> None:
    sets = replica_sets.spread(2, range(6), 3)  # shard 0 (log 0) on nodes 0-2, shard 1 (log 1) on 3-5
    two = log_map.first(2, 2)
    assert sets.nodes_of_log(0, two) == (0, 1, 2) and sets.nodes_of_log(1, two) == (3, 4, 5)
    assert sets.logs_of(0, two) == (0,) and sets.logs_of(5, two) == (1,)
    assert replica_sets.spread(2, range(7), 3).logs_of(6, two) == ()  # a seventh node holds nothing
    # Nodes 3-5 never report a position in log 0: it is truncated all the same; log 1
    # waits for node 5.
    positions = {(0, 0): 5, (0, 1): 7, (0, 2): 9, (1, 3): 4, (1, 4): 6}
    assert truncation_point(positions, 0, sets.nodes_of_log(0, two)) == 5
    assert truncation_point(positions, 1, sets.nodes_of_log(1, two)) is None


def test_a_node_applies_its_shards_records_positions_and_its_part_of_drops() -> None:
    """ApplyLoop._mine: the part of a record a node applies. Node 0 holds shards 0 and 2 of
    four (replica sets), and a copy of shard 1 came in at position 50 (a mark)."""
    from catalog.registry import KvTopology
    from runtime.inprocess import Local
    from storage_node.apply_loop import ApplyLoop
    from storage_node.callbacks import Callbacks
    from storage_node.settings import Settings
    from storage_node.state import NodeState

    sets = replica_sets.ReplicaSets(1, ((0,), (1,), (0,), (1,)), version=3)
    state = NodeState(0, Settings(), None, None, KvTopology(4, (0, 1), 1), 1, log_map.first(4, 1), sets,  # type: ignore[arg-type]
                      marks={1: 50})
    loop = ApplyLoop(state, None, lambda code, why: None, Local(), Callbacks())  # type: ignore[arg-type]
    put = Record(b"r", "", "d", 0, b"k", (Get(b"x"),))
    assert loop._mine(put, 10) is put  # a shard it holds
    assert loop._mine(replace(put, shard=3), 10) is None  # another node's
    assert loop._mine(replace(put, shard=1), 49) is None  # in the copy already
    assert loop._mine(replace(put, shard=1), 50) is not None  # after it
    pos = Record(b"", "", "", 3, b"", (Position(1, 5),))
    assert loop._mine(pos, 10) is pos  # every node of the log keeps the positions
    drop = Record(b"", "", "d", 0, b"", (Drop((0, 1, 2, 3)),))
    mine = loop._mine(drop, 60)
    assert mine is not None and mine.ops == (Drop((0, 1, 2)),) and mine.shard == 0
    assert loop._mine(drop, 40).ops == (Drop((0, 2)),)  # type: ignore[union-attr]
    # A copy brought forward (only=1): that shard's records, held here or not.
    assert loop._mine(replace(put, shard=1), 10, only=1) is not None
    assert loop._mine(put, 10, only=1) is None and loop._mine(pos, 10, only=1) is None
    assert loop._mine(drop, 10, only=3).ops == (Drop((3,)),)  # type: ignore[union-attr]


def test_a_node_keeps_the_newest_sets_whichever_read_lands_last() -> None:
    """NodeState.learn_sets: the watch on the sets and the bookkeeping round's read race;
    an older version landing after a newer one does not undo it (a move's destination
    would stop answering for the shard it just took in)."""
    from catalog.registry import KvTopology
    from storage_node.settings import Settings
    from storage_node.state import NodeState

    old = replica_sets.ReplicaSets(1, ((0,), (1,)), version=3)
    new = replica_sets.ReplicaSets(1, ((0,), (0,)), version=4)
    state = NodeState(0, Settings(), None, None, KvTopology(2, (0, 1), 1), 1, log_map.first(2, 1), old)  # type: ignore[arg-type]
    assert not state.holds(1)
    state.learn_sets(new)
    assert state.holds(1)
    state.learn_sets(old)
    assert state.holds(1) and state.sets.version == 4
    state.learn_sets(replica_sets.ReplicaSets(1, ((1,), (0,)), version=4))  # the same version again
    assert not state.holds(0)


def test_a_published_position_leaves_no_trace_of_shard_0(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A position record names shard 0; a node that does not hold shard 0 keeps nothing of
    it (else it would find shard 0's data, drop it, and find it again at the next one)."""
    from storage_node.apply import apply
    from storage_node.store import BatchView, NodeStore

    store = NodeStore(str(tmp_path / "db"))
    try:
        view = BatchView(store)
        rec = Record(b"", "", "", 0, b"", (Position(1, 5),))
        view.add(apply(view, rec, 0, 10, 1000, 2), rec.shard, 1000, 0)
        view.commit({0: (11, 1000)})
        assert store.member_positions() == {(0, 1): 5}
        assert not store.has_shard_data(0)
    finally:
        store.close()


@given(shards=st.integers(1, 80), n=st.integers(3, 9), r=st.integers(1, 3), extra=st.integers(0, 3),
       drain=st.integers(0, 2))
def test_the_planned_moves_drain_and_even_out(shards: int, n: int, r: int, extra: int, drain: int) -> None:
    """From a placement over n nodes, with `extra` new members holding nothing and `drain`
    nodes to empty: after the planned moves no shard is on a drained node, every shard
    has r distinct replicas, and the members hold shards evenly (to within one)."""
    sets = replica_sets.spread(shards, range(n), r)
    members = list(range(n + extra))
    drained = list(range(drain)) if n - drain + extra >= r else []
    moves = replica_sets.plan_moves(sets, members, drained)
    cur = [set(s) for s in sets.sets]
    for shard, to, frm in moves:
        assert frm in cur[shard] and to not in cur[shard] and to not in drained
        cur[shard] = (cur[shard] - {frm}) | {to}
    held = {m: sum(1 for c in cur if m in c) for m in members if m not in drained}
    assert all(len(c) == r and not c & set(drained) for c in cur)
    assert max(held.values()) - min(held.values()) <= 1, held
    assert replica_sets.plan_moves(replica_sets.ReplicaSets(r, tuple(tuple(sorted(c)) for c in cur)),
                                   members, drained) == []  # nothing left to do
    assert len(replica_sets.plan_moves(sets, members, drained, max_moves=2)) == min(2, len(moves))


@given(shards=st.integers(1, 60), n=st.integers(3, 8), r=st.integers(1, 3), extra=st.integers(0, 2),
       drain=st.integers(0, 1), data=st.data())
def test_the_planned_moves_even_out_bytes_too(shards: int, n: int, r: int, extra: int, drain: int,
                                              data: st.DataObject) -> None:
    """Given each shard's bytes (skewed: some shards far larger than the rest), the plan
    drains and evens the counts to within one as without sizes, and leaves no two members
    whose byte gap one more move (where counts allow) or swap would narrow by more than
    the slack. On a placement where one member holds every large shard, it lowers the
    largest member's bytes."""
    sizes = {s: data.draw(st.one_of(st.integers(0, 10**5), st.integers(10**7, 10**9)), label=f"size{s}")
             for s in range(shards)}
    sets = replica_sets.spread(shards, range(n), r)
    members = list(range(n + extra))
    drained = list(range(drain)) if n - drain + extra >= r else []
    moves = replica_sets.plan_moves(sets, members, drained, sizes=sizes)
    cur = [set(s) for s in sets.sets]
    for shard, to, frm in moves:
        assert frm in cur[shard] and to not in cur[shard] and to not in drained
        cur[shard] = (cur[shard] - {frm}) | {to}
    targets = [m for m in members if m not in drained]
    held = {m: sum(1 for c in cur if m in c) for m in targets}
    load = {m: sum(sizes[s] for s, c in enumerate(cur) if m in c) for m in targets}
    assert all(len(c) == r and not c & set(drained) for c in cur)
    assert max(held.values()) - min(held.values()) <= 1, held
    slack = replica_sets.byte_slack(load.values())
    for hi in targets:
        for lo in targets:
            gap = load[hi] - load[lo]
            if gap <= slack:
                continue
            mine = [s for s, c in enumerate(cur) if hi in c and lo not in c]
            theirs = [s for s, c in enumerate(cur) if lo in c and hi not in c]
            transfers = [sizes[a] for a in mine] if held[hi] > held[lo] else []
            transfers += [sizes[a] - sizes[b] for a in mine for b in theirs]
            assert all(gap - abs(gap - 2 * d) <= slack for d in transfers), (hi, lo, gap)
    assert replica_sets.plan_moves(replica_sets.ReplicaSets(r, tuple(tuple(sorted(c)) for c in cur)),
                                   members, drained, sizes=sizes) == []  # nothing left to do


def test_a_node_holding_every_large_shard_gives_some_up() -> None:
    """Counts even (four shards each) but node 0 holds the four large shards: the plan swaps
    large for small until no node holds more than about half of them."""
    sets = replica_sets.ReplicaSets(1, tuple((s // 4,) for s in range(12)))
    sizes = {s: (10**9 if s < 4 else 10**5) for s in range(12)}
    assert replica_sets.plan_moves(sets, [0, 1, 2]) == []  # counts alone: nothing to do
    moves = replica_sets.plan_moves(sets, [0, 1, 2], sizes=sizes)
    cur = {s: n for s, (n,) in enumerate(sets.sets)}
    for shard, to, frm in moves:
        assert cur[shard] == frm
        cur[shard] = to
    large = [sum(1 for s in range(4) if cur[s] == n) for n in range(3)]
    assert sorted(large) == [1, 1, 2]
    assert [sum(1 for n in cur.values() if n == m) for m in range(3)] == [4, 4, 4]
