"""A local scope failed over (catalog/failover.py, log/metadata.py cut): each log is cut at
the highest position the new home's replicas hold every shard at, everything past it is
reported (what a surviving replica applied, for sure), every replica not standing exactly
at the cut takes a copy, and the cut log goes on from the cut under a new epoch."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from catalog import failover, scopes
from catalog.failover import FailoverError, Replica
from catalog.scopes import Scope
from log.metadata import LogMetadata, Segment
from runtime.world import sleep as world_sleep

EAST = Scope("east", 12, 4, (1,))
SHARDS = {12, 13, 14, 15}


# Log 1: a sealed segment 0..9, then east's open one (its servers 0, 1, 2) from 10.
META = LogMetadata(1, 3, (Segment(1, 0, (3, 4, 5), 0, 9, 9), Segment(3, 10, (0, 1, 2), 9)), writer=0)


def _plan(replicas: dict[int, Replica], shards_of: dict[int, set[int]] | None = None,
          to: str = "west") -> failover.Plan:
    shards_of = shards_of or {n: SHARDS for n in replicas}
    return failover.plan(EAST, to, {1: {n: shards_of[n] for n in replicas}}, replicas, {1: META})


def test_a_log_is_cut_where_the_new_home_stands_and_everything_else_takes_a_copy() -> None:
    p = _plan({0: Replica("east", None),  # the lost home: no answer
               1: Replica("west", {1: (41, 700)}),  # applied 0..40
               2: Replica("west", {1: (38, 650)}),  # behind
               3: Replica("north", {1: (45, 760)})})  # heard more than the new home applied
    (cut,) = p.cuts
    assert (cut.end, cut.last_ts, cut.sources) == (40, 700, (1,))
    assert (cut.segment, cut.servers) == (3, (0, 1, 2))  # east's open segment: what it keeps is read there
    assert (cut.heard, cut.lost_for_sure) == (44, 4)  # north applied 41..44: acknowledged, lost
    assert p.condemned == (0, 2, 3)
    assert (p.origin, p.to) == ("east", "west")


@pytest.mark.parametrize("at", [0, 10])
def test_what_the_home_kept_past_a_cut_is_read_from_its_last_segment(at: int) -> None:
    """A cut below the log's first position (the new home applied nothing of it) or at an
    earlier segment's end: what the home kept past it is on its last segment's servers
    (the whole-cluster simulation's seed 18: a cut at -1 named no segment, and the report
    said nothing was kept aside while 24 positions were)."""
    (cut,) = _plan({1: Replica("west", {1: (at, 500)}), 2: Replica("north", {1: (22, 600)})}).cuts
    assert (cut.end, cut.segment, cut.servers, cut.heard) == (at - 1, 3, (0, 1, 2), 21)


def test_a_cut_needs_every_shard_at_one_position() -> None:
    # Node 1 is ahead but holds two shards; nodes 1 and 2 together hold all four only at 30.
    halves = {1: {12, 13}, 2: {14, 15}, 4: {12, 13}}
    p = _plan({1: Replica("west", {1: (41, 700)}), 2: Replica("west", {1: (31, 600)}),
               4: Replica("west", {1: (31, 600)})}, halves)
    assert (p.cuts[0].end, p.cuts[0].sources, p.condemned) == (30, (2, 4), (1,))
    with pytest.raises(FailoverError, match="--to: the new home's replicas of log 1 .* different positions"):
        _plan({1: Replica("west", {1: (41, 700)}), 2: Replica("west", {1: (31, 600)})}, halves)


@pytest.mark.parametrize("scope, to, says", [
    ("global", "west", "NAME: dataset 'd' is global"),
    ("east", "south", "--to: 'south' is not a data center of this cluster (data centers: east, west)"),
    ("east", "east", "--to: scope 'east' (dataset 'd') is kept in 'east' already"),
    ("nowhere", "west", "NAME: dataset 'd' is in scope 'nowhere'"),
])
def test_a_fail_over_that_makes_no_sense_is_refused_naming_the_argument(scope: str, to: str,
                                                                       says: str) -> None:
    with pytest.raises(FailoverError, match=says.replace("(", r"\(").replace(")", r"\)")):
        failover.check((EAST,), "d", scope, to, ["east", "west", ""])


def test_a_new_home_without_a_replica_that_answers_is_refused() -> None:
    with pytest.raises(FailoverError, match="--to: no storage node in 'west' that answers holds a shard"):
        _plan({0: Replica("east", {1: (9, 1)}), 1: Replica("west", None)})


def test_a_home_with_log_servers_registered_is_reachable_and_says_what_forcing_loses() -> None:
    assert failover.reachable_home(EAST, ["west", "west"]) is None
    why = failover.reachable_home(EAST, ["east", "west"])
    assert why is not None and "1 of its log servers are registered" in why and "--force" in why


def test_a_failed_over_scope_is_kept_in_its_new_home_and_its_shards_answered_there() -> None:
    layout = scopes.moved((EAST,), "east", "west")
    assert layout[0].where == "west" and scopes.home_of_shard(layout, 13) == "west"
    assert scopes.answering(layout, 13, [0, 1, 2], {0: "east", 1: "west", 2: "east"}) == (1,)
    assert scopes.from_json(scopes.to_json(layout)) == layout
    assert scopes.moved(layout, "east", "east") == (EAST,)  # back home: no home of its own


def test_the_condemned_are_taken_off_the_record_once_they_took_their_copy() -> None:
    rec = [failover.record(_plan({1: Replica("west", {1: (5, 1)}), 2: Replica("east", None)}), 0)]
    assert failover.condemned(rec) == {2}
    assert failover.condemned(failover.pardoned(rec, 2)) == set()


def test_a_node_is_condemned_for_the_cut_logs_shards_alone() -> None:
    """Only its copies of the cut logs' shards are wrong: for a copy of another log's shard
    (a global one) a condemned node is a source like any other, and it takes again only
    its shards of the logs that condemned it (storage_node/rebuild.py retake)."""
    east = failover.record(_plan({1: Replica("west", {1: (5, 1)}), 2: Replica("east", None)}), 0)
    north = {"scope": "north", "logs": [{"log": 3}], "condemned": [4]}  # a second fail-over, of log 3
    rec = [east, north]
    assert failover.condemned(rec) == {2, 4}
    assert failover.condemned(rec, 1) == {2} and failover.condemned(rec, 3) == {4}
    assert failover.condemned(rec, 0) == set()  # log 0, global: no node condemned for it
    assert failover.cut_logs(rec, 2) == {1} and failover.cut_logs(rec, 4) == {3}
    assert failover.cut_logs(rec, 1) == set()  # a source: nothing to take again
    assert failover.cut_logs(failover.pardoned(rec, 2), 2) == set()


@st.composite
def _logs(draw: st.DrawFn) -> LogMetadata:
    """A log of a few segments, the last open or sealed."""
    first = draw(st.integers(0, 5))
    segs = []
    for i in range(draw(st.integers(1, 4))):
        n = draw(st.integers(0, 6))
        segs.append(Segment(i + 1, first, (1, 2, 3), base_ts=first, end=first + n - 1, last_ts=first + n))
        first += n
    if draw(st.booleans()):
        last = segs[-1]
        segs[-1] = Segment(last.epoch, last.first, last.replicas, last.base_ts)
    return LogMetadata(7, len(segs) + draw(st.integers(0, 2)), tuple(segs), writer=2)


@given(_logs(), st.data())
def test_a_cut_log_keeps_every_position_up_to_the_cut_where_it_was_and_goes_on_after_it(
        meta: LogMetadata, data: st.DataObject) -> None:
    low = meta.segments[0].first - 1
    high = max(s.end if s.end is not None else s.first + 6 for s in meta.segments)
    end = data.draw(st.integers(low, high))
    cut = meta.cut(end, 99)
    assert cut.epoch == meta.epoch + 1 and cut.writer is None  # no writer of before changes it again
    assert cut.last_segment is not None and cut.last_segment.sealed and cut.last_segment.end == end
    for p in range(meta.segments[0].first, end + 1):  # kept where it was
        was, now = meta.segment_of(p), cut.segment_of(p)
        assert was is not None and now is not None and now.epoch == was.epoch
    assert cut.segment_of(end + 1) is None  # nothing past the cut is read from before it
    nxt = cut.bump(5).seal_and_open(end, 99, cut.epoch + 1, (4, 5, 6))
    opened = nxt.last_segment
    assert opened is not None and opened.first == end + 1 and opened.base_ts == 99
    assert LogMetadata.from_json(cut.to_json()) == cut


@given(st.dictionaries(st.integers(0, 7), st.tuples(st.sampled_from(["east", "west", "north"]),
                                                    st.none() | st.integers(0, 50)), min_size=1))
def test_a_fail_over_reports_every_position_a_survivor_applied_past_the_cut(
        nodes: dict[int, tuple[str, int | None]]) -> None:
    replicas = {n: Replica(dc, None if at is None else {1: (at, at * 10)}) for n, (dc, at) in nodes.items()}
    try:
        p = _plan(replicas)
    except FailoverError:
        assert not any(dc == "west" and at is not None for dc, at in nodes.values())
        return
    (cut,) = p.cuts
    applied = [at - 1 for _, at in nodes.values() if at is not None]
    assert cut.end == max(at - 1 for dc, at in nodes.values() if dc == "west" and at is not None)
    assert all(a <= cut.heard for a in applied) and cut.lost_for_sure == cut.heard - cut.end
    assert set(p.condemned) | set(cut.sources) == set(nodes) and not set(p.condemned) & set(cut.sources)
    assert all(nodes[n][1] == cut.end + 1 for n in cut.sources)


def test_what_a_node_that_holds_none_of_the_scopes_shards_applied_is_lost_for_sure_too() -> None:
    """A node tails a log whose shards it no longer holds: what it applied past the cut was
    acknowledged, and the report counts it (the whole-cluster simulation's seed 194: the
    new home's replica at 24, a node holding none of the scope's shards at 27, 25..27 were
    reported as nothing lost)."""
    holders = {1: Replica("west", {1: (25, 250)}), 2: Replica("east", {1: (17, 170)})}
    replicas = {**holders, 3: Replica("east", {1: (28, 280)})}  # node 3: none of the scope's shards
    p = failover.plan(EAST, "west", {1: {n: SHARDS for n in holders}}, replicas, {1: META})
    (cut,) = p.cuts
    assert (cut.end, cut.heard, cut.lost_for_sure) == (24, 27, 3)
    assert p.condemned == (2,)  # a node holding none of the log's shards takes no copy of them


def test_a_coordinator_takes_neither_reads_nor_answers_from_a_condemned_node() -> None:
    """The coordinator's replicas (coordinator/replicas.py) leave the nodes a fail-over
    condemned out of the members, from the next read of the replica sets on: no read is
    sent to one, and no answer of one is taken (coordinator/answers.py asks the members),
    before it learns it and stops (the catalog's real code on the simulated ZooKeeper)."""
    import json

    from catalog import registry
    from coordinator.replicas import Replicas
    from tests.sim.zookeeper import on_a_client

    def body(zk: Any) -> tuple[dict[int, str], dict[int, str]]:
        registry.create_kv(zk, 16, [0, 1, 2])
        for n in range(3):
            registry.register(zk, registry.STORAGE_NODES, n, f"127.0.0.1:{7000 + n}")
        r = Replicas(zk)
        r.sets()
        before = r.members()
        data, _ = zk.get(registry.KV)
        rec = failover.record(_plan({1: Replica("west", {1: (5, 1)}), 0: Replica("east", None),
                                     2: Replica("east", None)}), 0)
        zk.set(registry.KV, json.dumps({**json.loads(data), "failovers": [rec]}).encode())
        world_sleep(2.0)  # past the members' cache
        r.sets()
        return before, r.members_or_last()
    before, after = on_a_client(body)
    assert sorted(before) == [0, 1, 2] and sorted(after) == [1]


def test_each_log_of_a_scope_is_cut_by_the_shards_it_carries_alone() -> None:
    """Scope east on logs 1 and 2: node 5 holds shard 12 of log 1 and shard 14 of log 2,
    behind node 4 on log 1. Log 1 is cut where node 4 stands, holding 12 and 13: shard 14
    is log 2's business."""
    two = Scope("east", 12, 4, (1, 2))
    metas = {lg: LogMetadata(lg, 1, (Segment(1, 0, (0, 1, 2), 0),)) for lg in (1, 2)}
    holders = {1: {4: {12, 13}, 5: {12}}, 2: {5: {14, 15}}}
    replicas = {4: Replica("west", {1: (41, 700), 2: (1, 0)}),
                5: Replica("west", {1: (30, 600), 2: (20, 300)})}
    p = failover.plan(two, "west", holders, replicas, metas)
    assert [(c.log, c.end, c.sources) for c in p.cuts] == [(1, 40, (4,)), (2, 19, (5,))]
    assert p.condemned == (5,)  # behind the cut of log 1


def test_an_entry_past_a_cut_written_before_it_is_never_applied() -> None:
    """The cut of log 1 at 40 (its last segment then at epoch 3): an entry past 40 of epoch
    3 or less is the old home's, which a Read stream opened before the fail-over may still
    bring; one of a later writer, or at or below the cut, is the log's."""
    rec = failover.record(_plan({1: Replica("west", {1: (41, 700)})}), 0, "/h/hold-1")
    cuts = failover.cuts_of([rec], 1)
    assert cuts == [(40, 3)] and failover.cuts_of([rec], 2) == []
    assert failover.before_cut(cuts, 41, 3) and failover.before_cut(cuts, 45, 1)
    assert not failover.before_cut(cuts, 41, 4)  # the new home's writer, at a higher epoch
    assert not failover.before_cut(cuts, 40, 3)  # kept: the cut's state holds it
    assert failover.written([rec], "/h/hold-1") and not failover.written([rec], "/h/hold-2")


def test_a_fail_over_is_written_only_while_its_hold_stands() -> None:
    """The driver's hold (catalog/registry.py hold_replicas) is listed for the nodes that
    start while it stands, taken away by the fail-over's transaction (whose record names it),
    and a transaction whose hold is gone (the driver's session ended: a replica may have
    moved on since it answered) writes nothing (the catalog's real code on the simulated
    ZooKeeper)."""
    import json

    from kazoo.exceptions import NoNodeError

    from catalog import registry
    from tests.sim.zookeeper import on_a_client

    plan = _plan({1: Replica("west", {1: (41, 700)})})

    def body(zk: Any) -> tuple[dict, bool, list, bool]:
        registry.create_kv(zk, 16, [0, 1, 2])
        hold = registry.hold_replicas(zk, [1])
        listed = registry.holds(zk)
        _, version = registry.read_kv_versioned(zk) or (None, -1)
        registry.fail_over(zk, version, plan, 5, [], hold)
        records = json.loads(zk.get(registry.KV)[0])["failovers"]
        gone = registry.hold_stands(zk, hold)
        other = registry.hold_replicas(zk, [1])
        registry.release_hold(zk, other)  # a driver that gives up
        _, version = registry.read_kv_versioned(zk) or (None, -1)
        try:
            registry.fail_over(zk, version, plan, 6, [], other)
            refused = False
        except NoNodeError:
            refused = json.loads(zk.get(registry.KV)[0])["failovers"] == records
        return {k.rsplit("/", 1)[1][:5]: v for k, v in listed.items()}, gone, records, refused
    listed, stands, records, refused = on_a_client(body)
    assert listed == {"hold-": [1]} and not stands
    assert [r["hold"] for r in records] == [f"{registry.HOLDS}/hold-0000000000"]
    assert refused


def test_a_node_held_by_a_fail_over_goes_on_once_its_hold_is_gone() -> None:
    """storage_node/holds.py on the simulated ZooKeeper: a held log stays held while the
    hold stands; given up (its node deleted, no record), the log goes on; written (a record
    names it), the node learns the record before its logs go on."""
    import json
    import threading
    from types import SimpleNamespace

    from catalog import registry
    from storage_node.holds import Holds
    from tests.sim.zookeeper import on_a_client

    def body(zk: Any) -> list[Any]:
        registry.create_kv(zk, 16, [0, 1, 2])
        stopped = threading.Event()
        stopped.set()  # (its own task stops at once: the rounds are the test's)
        state = SimpleNamespace(zk=zk, kv_logs=3, positions={lg: (10, 0) for lg in range(3)}, stop=stopped)
        holds = Holds(state, threading.Lock())  # type: ignore[arg-type]
        learned: list[Any] = []
        holds.written = learned.append
        seen = []
        first = registry.hold_replicas(zk, [1, 2])
        holds.hold([1, 2], first)
        holds.round()
        seen.append((holds.held(1), holds.held(2), holds.held(0)))
        registry.release_hold(zk, first)
        holds.round()
        seen.append((holds.held(1), len(learned)))
        second = registry.hold_replicas(zk, [1])
        holds.at_start()  # a node that starts while it stands
        seen.append(holds.held(1))
        data, _ = zk.get(registry.KV)
        tx = zk.transaction()
        tx.delete(second)
        tx.set_data(registry.KV, json.dumps({**json.loads(data), "failovers": [{"hold": second}]}).encode())
        registry.commit(tx)
        holds.written = lambda kv: learned.append((kv.failovers, holds.held(1)))
        holds.round()
        seen.append((holds.held(1), learned))
        return seen
    seen = on_a_client(body)
    assert seen[0] == (True, True, False)
    assert seen[1] == (False, 0)  # given up: it goes on, nothing learned
    assert seen[2] is True
    held_after, learned = seen[3]
    assert held_after is False and learned[0][1] is True  # learned while still held
    assert [r["hold"] for r in learned[0][0]] == [f"{registry.HOLDS}/hold-0000000001"]


@given(st.text(max_size=60), st.lists(st.integers(-3, 9), max_size=4))
def test_a_status_request_with_a_hold_that_is_not_a_fail_overs_is_refused_naming_the_field(
        hold: str, logs: list[int]) -> None:
    """A Status request's hold (storage_node/holds.py check): a fail-over's ZooKeeper node
    and logs of the cluster, else INVALID_ARGUMENT naming `hold` or `hold_logs` (a node
    must never hold its logs on a path no fail-over made: nothing would let them go)."""
    from catalog import registry
    from runtime.refusals import BadRequest
    from storage_node import holds

    good = f"{registry.HOLDS}/hold-0000000042"
    with pytest.raises(BadRequest, match="^hold: "):
        if registry.is_hold(hold):  # (one a fail-over could have made: made not one)
            hold += "x"
        holds.check(hold, [1], 3)
    if any(not 0 <= lg < 3 for lg in logs):
        with pytest.raises(BadRequest, match="^hold_logs: "):
            holds.check(good, logs, 3)
    else:
        holds.check(good, logs, 3)


def test_a_hold_that_cannot_be_let_go_ends_with_the_drivers_session_without_masking_its_error() -> None:
    """A fail-over that gives up while ZooKeeper is out of reach cannot delete its hold: the
    driver says so in one line and goes on to report what ended it; the hold stands until its
    session ends (the driver's real hold on the simulated ZooKeeper)."""
    from catalog import registry
    from drivers.failover import _Hold
    from tests.sim.zookeeper import on_a_client

    said: list[str] = []

    def body(zk: Any) -> tuple[bool, bool, bool]:
        hold = _Hold(zk, said.append)
        path = hold.on((1,))
        zk.ens.partition(zk, 1.0)  # shorter than the session: it survives, and its hold
        hold.release()
        world_sleep(2.0)
        stands = registry.hold_stands(zk, path)
        zk.ens.expire(zk)
        world_sleep(1.0)
        return stands, registry.hold_stands(zk, path), hold.path == ""
    stood, after, forgotten = on_a_client(body)
    assert stood and not after and forgotten
    assert len(said) == 1 and "ends with this ZooKeeper session" in said[0] and "ConnectionLoss" in said[0]


def test_a_node_taking_its_shards_again_forgets_the_members_positions_of_the_cut_logs(tmp_path) -> None:
    """A condemned node applied entries past the cut, members' published positions among
    them, which the logs no longer have: taking its shards of the cut logs again, it forgets
    every member's position of those logs (its next truncation waits for them to publish
    anew) and keeps the other logs' (the whole-cluster simulation's seed 18 with a fail-over:
    node 2 retook its shards of log 1 at 9 and met the log truncated to 13 by nodes that
    still counted its position 17, published past the cut). The real store and rebuild, on
    the simulated ZooKeeper."""
    from types import SimpleNamespace

    from catalog import log_map
    from catalog.registry import KvTopology
    from catalog.replica_sets import everyone, with_set
    from storage_node import rebuild
    from storage_node.settings import Settings
    from storage_node.state import NodeState
    from storage_node.store import BatchView, NodeStore
    from tests.sim.zookeeper import on_a_client

    store = NodeStore(str(tmp_path / "state.db"))
    try:
        view = BatchView(store)
        view.member_positions.update({(0, 0): 5, (0, 1): 6, (1, 0): 17, (1, 1): 22})
        view.commit({})

        def body(zk: Any) -> tuple[dict, dict]:
            sets = with_set(everyone(2, (0, 1)), 1, (1,))  # node 0 holds shard 0 (log 0) alone
            s = NodeState(0, Settings(), SimpleNamespace(zk=zk), store, KvTopology(2, (0, 1), 2), 2,  # type: ignore[arg-type]
                          log_map.first(2, 2), sets)
            s.reload_positions()
            assert rebuild.retake(s, {1}, {0: 7, 1: 30}, lambda *a: (0, 0, 0, 0), 60.0) == []
            in_memory = dict(s.member_positions)
            s.reload_positions()
            return in_memory, dict(s.member_positions)
        in_memory, stored = on_a_client(body)
        assert in_memory == stored == {(0, 0): 5, (0, 1): 6}
    finally:
        store.close()
