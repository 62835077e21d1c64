"""Scopes (catalog/scopes.py): a local scope takes shards no dataset uses, on logs kept in
its data center; a dataset hashes over its scope's shards only, a range fixed at its
creation; a rebalance or a hand-off never puts shards of two scopes on one log; and a
scope laid out while a dataset is created never takes that dataset's shards (the catalog's
real code on the simulated ZooKeeper, tests/sim/zookeeper.py)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from catalog import datasets, log_map, registry, scopes
from catalog.datasets import Dataset, DatasetError
from catalog.log_map import LogMap
from catalog.scopes import GLOBAL, Scope, ScopeError
from midtown.routes import Table, route
from tests.sim.zookeeper import on_a_client

HOMES = {1: "east", 2: "east", 3: "west", 4: "west"}


_zk = on_a_client  # the registry's real code on the simulated ZooKeeper


def test_a_scope_takes_the_top_of_globals_shards_on_logs_kept_in_its_data_center() -> None:
    layout = scopes.add((), "east", 8, [2, 1], 64, 5, HOMES, [])
    assert layout == (Scope("east", 56, 8, (1, 2)),)
    layout = scopes.add(layout, "west", 16, [3], 64, 5, HOMES, [("g", 0, 40), ("e", 56, 8)])
    assert scopes.range_of(layout, GLOBAL, 64) == (0, 40)
    assert scopes.range_of(layout, "west", 64) == (40, 16)
    assert scopes.logs_of(layout, GLOBAL, 5) == (0, 4)
    assert [scopes.scope_of_shard(layout, s) for s in (0, 39, 40, 55, 56, 63)] == \
        [GLOBAL, GLOBAL, "west", "west", "east", "east"]
    assert scopes.from_json(scopes.to_json(layout)) == layout


@pytest.mark.parametrize("dc, count, logs, used, says", [
    ("global", 8, [1], [], "DC: 'global'"),
    ("east west", 8, [1], [], "DC: 'east west'"),
    ("east", 64, [1], [], "--shards: 64, must be between 1 and 63"),
    ("east", 0, [1], [], "--shards: 0"),
    ("east", 8, [], [], "--logs: name at least one"),
    ("east", 8, [7], [], "--logs: log 7 is not one of the key-value store's logs 0..4"),
    ("east", 8, [3], [], "--logs: log 3 is kept in 'west'; a scope's logs are kept in its data center"),
    ("east", 8, [0], [], "--logs: log 0 has no home"),
    ("east", 8, [1], [("old", 0, 0)], "--shards: dataset 'old' hashes its keys over shards 0..63"),
    ("east", 8, [1], [("g", 0, 60)], "--shards: dataset 'g' hashes its keys over shards 0..59"),
])
def test_a_scope_that_cannot_be_laid_out_is_refused_naming_the_argument(
        dc: str, count: int, logs: list[int], used: list[tuple[str, int, int]], says: str) -> None:
    with pytest.raises(ScopeError, match="^" + says.replace(".", r"\.").replace("(", r"\(")):
        scopes.add((), dc, count, logs, 64, 5, HOMES, used)


def test_a_scope_laid_out_twice_or_leaving_global_no_log_is_refused() -> None:
    layout = scopes.add((), "east", 8, [1], 64, 3, {1: "east", 2: "east", 0: "east"}, [])
    with pytest.raises(ScopeError, match="DC: scope 'east' exists already"):
        scopes.add(layout, "east", 8, [2], 64, 3, {2: "east"}, [])
    with pytest.raises(ScopeError, match="--logs: log 1 carries scope 'east' already"):
        scopes.add(layout, "north", 8, [1], 64, 3, {1: "north"}, [])
    with pytest.raises(ScopeError, match="global would keep none"):
        scopes.add((), "east", 8, [0, 1, 2], 64, 3, {0: "east", 1: "east", 2: "east"}, [])


@given(st.lists(st.tuples(st.integers(1, 6), st.integers(1, 2)), max_size=4), st.integers(20, 64))
def test_scopes_laid_out_one_after_another_cover_the_shards_once(asks: list[tuple[int, int]],
                                                                shards: int) -> None:
    """However many scopes are laid out, every shard is in exactly one scope (global or a
    local one), each local scope's range is what it asked for, and every log carries one."""
    layout: scopes.Layout = ()
    kv_logs, homes, nxt = 12, {}, 1
    for i, (count, n_logs) in enumerate(asks):
        dc = f"dc{i}"
        logs = list(range(nxt, nxt + n_logs))
        homes.update({lg: dc for lg in logs})
        nxt += n_logs
        if count >= scopes.global_count(layout, shards):  # global would keep none
            with pytest.raises(ScopeError, match="--shards"):
                scopes.add(layout, dc, count, logs, shards, kv_logs, homes, [])
            continue
        layout = scopes.add(layout, dc, count, logs, shards, kv_logs, homes, [])
    seen = []
    for name in [GLOBAL, *(s.dc for s in layout)]:
        first, count = scopes.range_of(layout, name, shards)
        seen += range(first, first + count)
        assert all(scopes.scope_of_shard(layout, s) == name for s in range(first, first + count))
        assert all(scopes.scope_of_log(layout, lg) == name for lg in scopes.logs_of(layout, name, kv_logs))
    assert sorted(seen) == list(range(shards))
    names = [GLOBAL, *(s.dc for s in layout)]
    assert sorted(lg for n in names for lg in scopes.logs_of(layout, n, kv_logs)) == list(range(kv_logs))


@given(st.integers(1, 4), st.integers(1, 3), st.data())
def test_a_rebalance_keeps_each_scope_on_its_logs_and_evens_them_within_it(
        global_logs: int, local_logs: int, data: st.DataObject) -> None:
    """catalog/log_map.py spread with the scopes' groups: after its plan every shard is on
    one of its scope's logs, every log of a scope carries as many of its shards as the
    others to within one, and each step starts where the shard is then."""
    kv_logs = global_logs + local_logs
    shards = data.draw(st.integers(2, 24))
    count = data.draw(st.integers(1, shards - 1))
    logs = list(range(global_logs, kv_logs))
    layout = scopes.add((), "east", count, logs, shards, kv_logs, {lg: "east" for lg in logs}, [])
    of = tuple(data.draw(st.lists(st.integers(0, kv_logs - 1), min_size=shards, max_size=shards)))
    m = LogMap(kv_logs, of, 3)
    plan = log_map.spread(m, None, scopes.groups(layout, shards, kv_logs))
    now = list(of)
    for shard, frm, to in plan:
        assert now[shard] == frm and frm != to
        now[shard] = to
    assert scopes.misplaced(layout, now) == []
    for members, group_logs in scopes.groups(layout, shards, kv_logs):
        counts = [sum(1 for s in members if now[s] == lg) for lg in group_logs]
        assert max(counts) - min(counts) <= 1


def test_a_scope_grows_onto_more_of_globals_logs_kept_where_it_is_and_its_shards_spread() -> None:
    """`midtown scope grow east --logs 2` (catalog/scopes.py more_logs): the scope's range
    stays, its logs grow, and the hand-offs spread its shards over them, global's off them."""
    layout = scopes.add((), "east", 8, [1], 64, 4, {1: "east", 2: "east", 3: "west"}, [])
    grown = scopes.more_logs(layout, "east", [2], 4, {1: "east", 2: "east", 3: "west"})
    (east,) = grown
    assert (east.first, east.count, east.logs) == (56, 8, (1, 2))
    assert scopes.logs_of(grown, scopes.GLOBAL, 4) == (0, 3)
    of = tuple([0, 1, 2, 3] * 16)  # every log carrying shards of both scopes
    plan = log_map.spread(LogMap(4, of, 3), None, scopes.groups(grown, 64, 4))
    now = list(of)
    for shard, _, to in plan:
        now[shard] = to
    assert scopes.misplaced(grown, now) == []
    assert sorted(now[s] for s in east.shards()) == [1, 1, 1, 1, 2, 2, 2, 2]
    # Failed over to west, it grows onto logs kept in west
    west = scopes.moved(layout, "east", "west")
    assert scopes.more_logs(west, "east", [3], 4, {3: "west"})[0].logs == (1, 3)


@pytest.mark.parametrize("dc,logs,homes,says", [
    ("north", [2], {2: "north"}, "DC: no scope 'north'"),
    ("east", [], {}, "--logs: name at least one"),
    ("east", [9], {}, "--logs: log 9 is not one of the key-value store's logs 0..3"),
    ("east", [1], {1: "east"}, "--logs: log 1 carries scope 'east' already"),
    ("east", [3], {3: "west"}, "--logs: log 3 is kept in 'west'; a scope's logs are kept in its data center "
                               "(midtown log home 3 east)"),
    ("east", [2], {}, "--logs: log 2 has no home"),
    ("east", [0, 2, 3], {0: "east", 2: "east", 3: "east"}, "--logs: global would keep none"),
])
def test_a_scope_that_cannot_grow_is_refused_naming_the_argument(dc: str, logs: list[int],
                                                                 homes: dict[int, str], says: str) -> None:
    layout = scopes.add((), "east", 8, [1], 64, 4, {1: "east"}, [])
    with pytest.raises(scopes.ScopeError, match=re.escape(says)):
        scopes.more_logs(layout, dc, logs, 4, homes)


@given(st.binary(max_size=30), st.integers(0, 50), st.integers(1, 20))
def test_a_datasets_keys_hash_over_its_scopes_shards_and_route_to_their_logs(
        pkey: bytes, first: int, count: int) -> None:
    d = Dataset("d", incarnation=7, scope="east", shard_first=first, shard_count=count)
    shards = first + count + 3
    shard = d.shard_of(pkey, shards)
    assert first <= shard < first + count and shard in d.shards(shards)
    of = tuple(range(shards))  # shard s on log s
    t = Table(shards, of, {"d": (d.id, first, count)}, {lg: f"c{lg}" for lg in range(shards)})
    assert route(t, "d", pkey) == f"c{shard}"
    legacy = Dataset("d", incarnation=7)  # made before scopes: every shard
    assert legacy.shard_of(pkey, shards) in range(shards)
    assert legacy.shards(shards) == range(shards)


def _cluster(zk: Any, logs: int = 3) -> None:
    registry.create_kv(zk, 16, [0, 1, 2], logs=logs)


def test_a_local_dataset_is_created_once_its_scopes_shards_are_on_its_logs() -> None:
    def body(zk: Any) -> tuple[Dataset, Dataset]:
        _cluster(zk)
        registry.add_scope(zk, "east", 4, [2], {2: "east"}, lambda: datasets.used_shards(zk))
        with pytest.raises(DatasetError, match="scope: 3 of the shards of scope 'east' are not on its logs"):
            datasets.create(zk, "early", scope="east")
        kv = registry.read_kv(zk)
        assert kv is not None
        m = registry.read_log_map(zk, kv)
        placed = [2 if s >= 12 else s % 2 for s in range(16)]  # (as the hand-offs leave them)
        registry.write_log_map(zk, LogMap(m.logs, tuple(placed), m.version), "test")
        with pytest.raises(DatasetError, match="scope: 'north' is not one of this cluster's scopes"):
            datasets.create(zk, "x", scope="north")
        with pytest.raises(DatasetError, match="scope: 'east'; an eventual dataset"):
            datasets.create(zk, "x", "eventual", scope="east")
        e, g = datasets.create(zk, "e", scope="east"), datasets.create(zk, "g")
        with pytest.raises(DatasetError, match="name: dataset 'e' already exists$"):
            datasets.create(zk, "e", scope="east")
        # A scope change is refused, saying what to do instead.
        changed = "scope: dataset 'e' already exists, in scope 'east'; a dataset's scope is fixed"
        with pytest.raises(DatasetError, match=changed + " .* create another with --scope global"):
            datasets.create(zk, "e")
        return e, g
    e, g = _zk(body)
    assert (e.scope, e.shard_first, e.shard_count) == ("east", 12, 4)
    assert (g.scope, g.shard_first, g.shard_count) == (GLOBAL, 0, 12)
    assert datasets.describe(e)["shards"] == "12..15" and datasets.describe(e)["scope"] == "east"


def test_a_scope_laid_out_while_a_dataset_is_created_never_takes_its_shards() -> None:
    """The race the transactions close: a global dataset created after the scope's layout
    read the datasets but before it was written. The layout's write fails its check, it
    reads again, and is refused: the new dataset hashes over the shards it would take."""
    def body(zk: Any) -> str:
        _cluster(zk)
        calls = []

        def used() -> tuple[list[tuple[str, int, int]], int]:
            out = datasets.used_shards(zk)
            if not calls:
                datasets.create(zk, "sneaked-in")  # between the read and the write
            calls.append(1)
            return out
        with pytest.raises(ScopeError, match="dataset 'sneaked-in' hashes its keys over shards 0..15") as e:
            registry.add_scope(zk, "east", 4, [2], {2: "east"}, used)
        assert len(calls) == 2
        kv = registry.read_kv(zk)
        assert kv is not None and kv.scopes == ()
        return str(e.value)
    _zk(body)


def test_a_dataset_created_against_an_old_layout_is_created_again_against_the_new() -> None:
    """The other side: a dataset whose creation read the layout before a scope was written
    commits against the new one (its transaction checks the topology's version)."""
    def body(zk: Any) -> Dataset:
        _cluster(zk)
        real = registry.read_kv_versioned
        calls = []

        def stale(zk_: Any) -> Any:
            got = real(zk_)
            if not calls:
                registry.add_scope(zk, "east", 4, [2], {2: "east"}, lambda: datasets.used_shards(zk))
            calls.append(1)
            return got
        registry.read_kv_versioned = stale  # type: ignore[assignment]
        try:
            return datasets.create(zk, "g")
        finally:
            registry.read_kv_versioned = real  # type: ignore[assignment]
    g = _zk(body)
    assert (g.shard_first, g.shard_count) == (0, 12)


def test_a_local_scopes_shards_are_answered_for_by_its_data_centers_replicas_alone() -> None:
    layout = (Scope("east", 12, 4, (1,)),)
    dc_of = {0: "east", 1: "west", 2: "east", 3: "north"}
    assert scopes.answering(layout, 12, [0, 1, 2], dc_of) == (0, 2)
    assert scopes.answering(layout, 3, [0, 1, 2], dc_of) == (0, 1, 2)  # global: every replica
    assert scopes.answering((), 3, [0, 1, 2], dc_of) == ()  # no scopes: the rule as before
    # none of its replicas in east: all answer as before, never none
    assert scopes.answering(layout, 13, [1, 3], dc_of) == ()
    assert scopes.answering(layout, 13, [1, 3], {}) == ()  # data centers not read yet
    assert scopes.home_of_shard(layout, 15) == "east" and scopes.home_of_shard(layout, 11) == ""


@pytest.mark.parametrize("dcs,refused", [
    (("east", "west", "east"), True),  # two: one holds two of each segment's copies
    (("east", "west", "north"), False),
    (("", "", ""), False),  # none named: one data center, global is all of it
    (("east", "east", "east"), False),
])
def test_a_global_dataset_on_two_data_centers_is_refused_unless_it_survives_a_zone_only(
        dcs: tuple[str, ...], refused: bool) -> None:
    """A strong global dataset is to keep its writes through the loss of any one data
    center, which takes log servers in three (docs/operations.md, "Data centers"): on two,
    `dataset create` refuses it naming the field and what to do instead (a third data
    center, --scope, --survive zone); an eventual one, a local one and one created with
    --survive zone are made; nothing is created by a refusal."""
    from fleet import machines
    from fleet.failure_domains import Domain

    def body(zk: Any) -> tuple[list[str], str]:
        for s, dc in enumerate(dcs):
            machines.record(zk, machines.LOG_SERVERS, s, Domain(f"m{s}", (("dc", dc),) if dc else ()))
        _cluster(zk)
        said = ""
        try:
            datasets.create(zk, "g")
        except DatasetError as e:
            said = str(e)
        with pytest.raises(DatasetError, match="^survive: 'region', must be one of dc, zone"):
            datasets.create(zk, "x", survive="region")
        datasets.create(zk, "z", survive="zone")
        datasets.create(zk, "ev", "eventual")
        return sorted(datasets.names(zk)), said
    names, said = on_a_client(body)
    if refused:
        assert said.startswith("scope: a global dataset is to survive the loss of a data center") and \
            "(east, west)" in said and "--scope east" in said and "--survive zone" in said, said
        assert names == ["ev", "z"]
    else:
        assert said == "" and names == ["ev", "g", "z"]


def test_a_scope_removed_gives_its_shards_back_to_global_the_last_laid_out_first() -> None:
    east = scopes.add((), "east", 8, [1], 64, 5, HOMES, [])
    both = scopes.add(east, "west", 16, [3], 64, 5, HOMES, [("g", 0, 40), ("e", 56, 8)])
    with pytest.raises(ScopeError, match="^DC: scope 'east' was laid out before scope 'west'.*remove 'west' "
                                         "first"):
        scopes.remove(both, "east", 64, [])
    with pytest.raises(ScopeError, match="^DC: no scope 'north'"):
        scopes.remove(both, "north", 64, [])
    with pytest.raises(ScopeError, match=r"^DC: dataset 'w' is in scope 'west' \(its keys hash over shards "
                                         r"40\.\.55\)"):
        scopes.remove(both, "west", 64, [("g", 0, 40), ("w", 40, 16)])
    with pytest.raises(ScopeError, match="^DC: dataset 'old' is in scope 'west'"):  # (made before scopes)
        scopes.remove(both, "west", 64, [("old", 0, 0)])
    assert scopes.remove(both, "west", 64, [("g", 0, 40), ("e", 56, 8)]) == east
    assert scopes.range_of(east, GLOBAL, 64) == (0, 56) and scopes.logs_of(east, GLOBAL, 5) == (0, 2, 3, 4)
    assert scopes.remove(east, "east", 64, []) == ()


def _with_home(zk: Any, log: int, dc: str) -> None:
    from log import zk as zkpaths
    path, body, version = zkpaths.homes_moved(zk, [log], dc)
    zk.set(path, body, version=version)


def _homes(zk: Any) -> dict[int, str]:
    from log import zk as zkpaths
    topo = zkpaths.read_topology(zk)
    assert topo is not None
    return topo.home_map


def test_a_scope_removed_clears_its_logs_homes_and_a_dataset_made_meanwhile_stops_it() -> None:
    """The removal's transaction: the layout without the scope and its logs' homes cleared
    (they carry global's shards from now on) together; a dataset created in the scope after
    the removal read the datasets fails its check, and the removal, read again, is refused."""
    from log import zk as zkpaths

    def body(zk: Any) -> None:
        zkpaths.create_cluster(zk, 4, [0, 1, 2], leased_below=3)
        _cluster(zk)
        _with_home(zk, 2, "east")
        registry.add_scope(zk, "east", 4, [2], {2: "east"}, lambda: datasets.used_shards(zk))
        kv = registry.read_kv(zk)
        assert kv is not None
        m = registry.read_log_map(zk, kv)
        placed = tuple(2 if s >= 12 else s % 2 for s in range(16))
        registry.write_log_map(zk, LogMap(m.logs, placed, m.version), "test")
        calls = []

        def used() -> tuple[list[tuple[str, int, int]], int]:
            out = datasets.used_shards(zk)
            if not calls:
                datasets.create(zk, "sneaked-in", scope="east")  # between the read and the write
            calls.append(1)
            return out
        with pytest.raises(ScopeError, match="DC: dataset 'sneaked-in' is in scope 'east'"):
            registry.remove_scope(zk, "east", used)
        assert len(calls) == 2 and _homes(zk).get(2) == "east"
        kv = registry.read_kv(zk)
        assert kv is not None and [s.dc for s in kv.scopes] == ["east"]
        datasets.drop(zk, "sneaked-in")
        kv, gone = registry.remove_scope(zk, "east", lambda: datasets.used_shards(zk))
        assert kv.scopes == () and gone == Scope("east", 12, 4, (2,))
        assert registry.read_kv(zk) == kv and not _homes(zk).get(2)
        assert scopes.range_of(kv.scopes, GLOBAL, 16) == (0, 16)
        assert (datasets.create(zk, "g").shard_first, datasets.create(zk, "h").shard_count) == (0, 16)
    _zk(body)
