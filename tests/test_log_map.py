"""The shard -> log map (catalog/log_map.py) is data: a cluster with none written routes
shard mod logs as before; a written map is read back with its version, its history kept,
and a write over a version another writer moved past is refused whole; a map no writer of
Midtown's made is refused naming its field; readers (the storage node's state, the
replica sets' truncation holders, the SDK's routes) follow the map, not the modulo."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kazoo.exceptions import BadVersionError, NodeExistsError

from catalog import log_map, registry, replica_sets
from catalog.log_map import Handoff, LogMap
from catalog.registry import KvTopology
from catalog.routing import log_of
from tests.sim.zookeeper import on_a_client

KV = KvTopology(shards=8, storage_nodes=(0, 1, 2), logs=2)


_zk = on_a_client  # the registry's real code on the simulated ZooKeeper


@given(st.integers(1, 300), st.integers(1, 16))
def test_the_first_map_is_shard_mod_logs(shards: int, logs: int) -> None:
    m = log_map.first(shards, logs)
    assert m.version == -1 and m.logs == logs and m.handoffs == ()
    assert [m.log_of(s) for s in range(shards)] == [log_of(s, logs) for s in range(shards)]
    for lg in range(logs):
        assert m.shards_of_log(lg) == tuple(s for s in range(shards) if s % logs == lg)


def test_a_cluster_with_no_map_written_reads_shard_mod_its_kv_logs() -> None:
    m = _zk(lambda zk: registry.read_log_map(zk, KV))
    assert m == log_map.first(8, 2)
    # at most the log service's logs, as the servers read it
    assert _zk(lambda zk: registry.read_log_map(zk, KV, log_count=1)) == log_map.first(8, 1)


def test_a_written_map_is_read_back_versioned_with_its_history() -> None:
    def body(zk: Any) -> tuple[LogMap, LogMap, list[dict[str, Any]]]:
        m0 = registry.read_log_map(zk, KV)
        moved = LogMap(3, (0, 1, 0, 1, 2, 1, 0, 1), m0.version, (Handoff(4, 0, 17, 2, 5),))
        registry.write_log_map(zk, moved, "shard 4 handed from log 0 to log 2")
        m1 = registry.read_log_map(zk, KV)
        again = LogMap(3, (2,) + m1.of[1:], m1.version, m1.handoffs + (Handoff(0, 0, 30, 2, 9),))
        registry.write_log_map(zk, again, "shard 0 handed from log 0 to log 2")
        return m1, registry.read_log_map(zk, KV), registry.log_map_history(zk)
    m1, m2, history = _zk(body)
    assert m1.version == 0 and m1.log_of(4) == 2 and m1.handoffs == (Handoff(4, 0, 17, 2, 5),)
    assert m2.version == 1 and m2.log_of(0) == 2 and m2.shards_of_log(2) == (0, 4)
    assert [h["version"] for h in history] == [0, 1]
    assert history[0]["why"] == "shard 4 handed from log 0 to log 2" and history[1]["of"] == list(m2.of)


def test_a_write_over_a_version_moved_past_is_refused_and_writes_nothing() -> None:
    def body(zk: Any) -> tuple[type, type, LogMap, int]:
        first = registry.read_log_map(zk, KV)  # none written: version -1
        registry.write_log_map(zk, LogMap(2, (1,) * 8, first.version), "one writer")
        errors = []
        for stale in (first, LogMap(2, (0,) * 8, 5)):  # created meanwhile; a version not held
            try:
                registry.write_log_map(zk, replace_of(stale, (0,) * 8), "another")
            except (NodeExistsError, BadVersionError) as e:
                errors.append(type(e))
        return errors[0], errors[1], registry.read_log_map(zk, KV), len(registry.log_map_history(zk))
    created, bad_version, now, entries = _zk(body)
    assert created is NodeExistsError and bad_version is BadVersionError
    assert now.of == (1,) * 8 and now.version == 0 and entries == 1


def replace_of(m: LogMap, of: tuple[int, ...]) -> LogMap:
    return LogMap(m.logs, of, m.version, m.handoffs)


@pytest.mark.parametrize("body,field", [
    ([], "not a JSON object"),
    ({"logs": 0, "of": [0]}, "logs: 0"),
    ({"logs": "2", "of": [0]}, "logs: '2'"),
    ({"logs": 2, "of": []}, "of: each shard's log must be one of 0..1"),
    ({"logs": 2, "of": [0, 2]}, "of: each shard's log must be one of 0..1"),
    ({"logs": 2, "of": [0, True]}, "of: "),
    ({"logs": 2, "of": [0, "1"]}, "of: "),
    ({"logs": 2, "of": [0, 1], "handoffs": [{"shard": 1}]}, "handoffs: "),
])
def test_a_map_no_writer_of_midtown_made_is_refused_naming_its_field(body: Any, field: str) -> None:
    with pytest.raises(ValueError, match=f"^log map: {field}"):
        log_map.from_json(body, 0)


def test_a_map_of_another_number_of_shards_is_refused() -> None:
    def body(zk: Any) -> str:
        registry.write_log_map(zk, LogMap(2, (0, 1, 0)), "three shards")
        try:
            registry.read_log_map(zk, KV)
        except ValueError as e:
            return str(e)
        return ""
    assert _zk(body) == "log map: of: names the logs of 3 shards, the cluster has 8"


@given(st.integers(1, 40), st.integers(1, 6), st.data())
def test_a_map_reads_back_as_written(shards: int, logs: int, data: st.DataObject) -> None:
    of = tuple(data.draw(st.lists(st.integers(0, logs - 1), min_size=shards, max_size=shards)))
    hands = tuple(Handoff(*data.draw(st.tuples(*(st.integers(0, 1 << 40),) * 5))) for _ in range(2))
    m = LogMap(logs, of, 3, hands)
    assert log_map.from_json(log_map.to_json(m), 3) == m


def test_truncation_holders_and_tailed_logs_follow_the_map() -> None:
    """A shard handed from log 0 to log 1: log 0's truncation no longer waits for the nodes
    that hold it alone, and they tail log 1 (catalog/replica_sets.py)."""
    sets = replica_sets.spread(2, range(6), 3)  # shard 0 on nodes 0-2, shard 1 on 3-5
    before, after = log_map.first(2, 2), LogMap(2, (1, 1), 0)
    assert sets.nodes_of_log(0, before) == (0, 1, 2) and sets.logs_of(0, before) == (0,)
    assert sets.nodes_of_log(0, after) == () and sets.nodes_of_log(1, after) == tuple(range(6))
    assert sets.logs_of(0, after) == (1,)


def test_logs_added_to_the_key_value_store_carry_no_shard_and_are_counted_everywhere() -> None:
    """`midtown log add N` (catalog/registry.py add_kv_logs): the map and the topology's
    count grow together, every shard stays on its log; more than the log service has, or
    none, is refused naming N and writes nothing."""
    def body(zk: Any) -> tuple[LogMap, KvTopology | None, list[str], int]:
        registry.create_kv(zk, 8, [0, 1, 2], logs=2)
        m = registry.add_kv_logs(zk, 3, service_logs=16)
        errors = []
        for n, service in ((12, 16), (0, 16), (1, 5)):
            try:
                registry.add_kv_logs(zk, n, service)
            except ValueError as e:
                errors.append(str(e))
        return m, registry.read_kv(zk), errors, len(registry.log_map_history(zk))
    m, kv, errors, entries = _zk(body)
    assert m.logs == 5 and m.of == log_map.first(8, 2).of and m.version == 0
    assert kv is not None and kv.logs == 5
    assert errors[0].startswith("N: the key-value store uses 5 of the log service's 16 logs, so at most 11")
    assert errors[1] == "N: 0, must be 1 or more" and errors[2].startswith("N: ")
    assert entries == 1


def test_the_key_value_logs_are_leased_by_the_logs_own_setting() -> None:
    """The log reads nothing of the key-value store: which logs keep a read lease and mark
    idle time is its topology's `leased_below` (log/zk.py). A cluster made with it set is
    left as it is by the key-value topology (no write); one made without gets it in the
    topology's own transaction, and `log add` raises it with the map, so neither is ever
    seen without the other."""
    from log import zk as zkpaths

    def body(zk: Any) -> list[int]:
        seen = []
        zkpaths.create_cluster(zk, 8, [], leased_below=2)
        _, before = zk.get(zkpaths.TOPOLOGY)
        registry.create_kv(zk, 8, [0, 1, 2], logs=2)
        _, after = zk.get(zkpaths.TOPOLOGY)
        seen.append(after.version - before.version)  # 0: nothing asked of the log
        registry.add_kv_logs(zk, 3, service_logs=8)
        seen.append(zkpaths.read_topology(zk).leased_below)
        return seen

    def made_without(zk: Any) -> tuple[int, int, int]:
        zkpaths.create_cluster(zk, 4, [])
        before = zkpaths.read_topology(zk).leased_below
        registry.create_kv(zk, 8, [0, 1, 2], logs=3)
        t = zkpaths.read_topology(zk)
        return before, t.leased_below, t.logs

    assert _zk(body) == [0, 5]
    assert _zk(made_without) == (0, 3, 4)


def test_a_dropped_dataset_is_done_with_once_the_logs_that_carry_shards_applied_its_drop() -> None:
    """A key-value log added and carrying no shard yet is applied by no node: a dataset's
    drop no longer waits for it (storage_node/bookkeeping.py _append_drops), where it would
    have been appended again to every log every round, for ever."""
    from types import SimpleNamespace

    from catalog import datasets
    from storage_node.bookkeeping import Bookkeeping

    appended: list[int] = []

    def body(zk: Any) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
        registry.create_kv(zk, 4, [0], logs=1)
        datasets.create(zk, "gone")
        datasets.drop(zk, "gone")
        dropped = datasets.dropped(zk)
        applied = {0: {dropped[0][0]}}  # log 0 (every shard) applied the drop; log 1 carries none
        state = SimpleNamespace(
            zk=zk, settings=SimpleNamespace(drop_delay_s=0), kv_logs=2, log_map=LogMap(2, (0, 0, 0, 0)),
            store=SimpleNamespace(drop_applied=lambda lg, d: d in applied.get(lg, ())),
            logs=SimpleNamespace(append=lambda lg, payloads, timeout_s: appended.append(lg)))
        keeper = Bookkeeping.__new__(Bookkeeping)
        keeper.state = state  # type: ignore[assignment]
        keeper._append_drops()
        return dropped, datasets.dropped(zk)
    before, after = _zk(body)
    assert len(before) == 1 and after == [] and appended == []


@given(st.integers(1, 5), st.data())
def test_rebalance_hands_over_as_few_shards_as_leave_every_log_within_one(logs: int,
                                                                           data: st.DataObject) -> None:
    """catalog/log_map.py spread (`cluster rebalance`): after its plan every log carries as
    many shards as the others to within one; hand-offs under way come first and are
    finished where they go; no shard is handed twice by the rest of the plan; each step
    starts where the shard is then; and no plan is shorter (the fewest: the shards above each log's share, the
    fullest logs keeping one more)."""
    shards = data.draw(st.integers(1, 24))
    of = tuple(data.draw(st.lists(st.integers(0, logs - 1), min_size=shards, max_size=shards)))
    under_way = data.draw(st.sets(st.integers(0, shards - 1), max_size=2)) if logs > 1 else set()
    others = [[lg for lg in range(logs) if lg != of[s]] for s in range(shards)]
    handing = tuple(log_map.Handing(s, of[s], data.draw(st.sampled_from(others[s])), 0)
                    for s in sorted(under_way))
    m = LogMap(logs, of, 3, handing=handing)
    plan = log_map.spread(m)
    assert [p[0] for p in plan[:len(handing)]] == [h.shard for h in handing]
    now = list(of)
    for shard, frm, to in plan:
        assert now[shard] == frm and frm != to
        now[shard] = to
    counts = [now.count(lg) for lg in range(logs)]
    assert max(counts) - min(counts) <= 1
    fresh = plan[len(handing):]
    assert len({p[0] for p in fresh}) == len(fresh)
    after_handing = list(of)
    for h in handing:
        after_handing[h.shard] = h.new
    have = sorted((after_handing.count(lg) for lg in range(logs)), reverse=True)
    q, r = divmod(shards, logs)
    fewest = sum(max(0, c - (q + 1 if i < r else q)) for i, c in enumerate(have))
    assert len(plan) - len(handing) == fewest
    assert log_map.spread(m, max_handoffs=1) == plan[:1]


def test_a_balanced_map_needs_no_hand_off() -> None:
    assert log_map.spread(log_map.first(8, 3)) == []
    assert log_map.spread(LogMap(3, (0,) * 7)) == [(6, 0, 1), (5, 0, 2), (4, 0, 1), (3, 0, 2)]
