"""Data centers in the topology (issue 70, step 1; docs/architecture.md "Data centers"): a
locality's widest tier may be `dc`; every server names one or none does; `cluster check`
and `shard list` say where each data center's machines, servers and copies are. (The
reports read ZooKeeper: here the simulated one, tests/sim/zookeeper.py.)"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from catalog import registry
from cli import machines as machines_cli
from cli import shards as shards_cli
from fleet import failure_domains as fd
from fleet import machines
from log import zk as zkpaths
from tests.sim.scheduler import Scheduler
from tests.sim.zookeeper import Ensemble


def test_the_data_center_is_the_widest_tier_or_refused_naming_the_field() -> None:
    d = fd.Domain("m1", fd.parse_locality("dc=east,zone=a,rack=r1"))
    assert d.dc == "east" and d.label() == "m1 (dc=east,zone=a,rack=r1)"
    assert fd.Domain("m2", fd.parse_locality("zone=a")).dc == ""
    with pytest.raises(ValueError, match=r"^locality: the data-center tier dc comes first.*dc=east,zone=a"):
        fd.parse_locality("zone=a,dc=east")


@given(st.lists(st.sampled_from(["", "east", "west", "north"]), min_size=1, max_size=8))
def test_servers_name_a_data_center_all_or_none(dcs: list[str]) -> None:
    where = fd.lookup({i: fd.Domain(f"m{i}", (("dc", dc),) if dc else ()) for i, dc in enumerate(dcs)})
    by_dc = fd.data_centers(range(len(dcs)), where)
    assert sorted(i for ids in by_dc.values() for i in ids) == list(range(len(dcs)))
    problem = fd.mixed_data_centers(range(len(dcs)), where, "storage nodes")
    named = [i for i, dc in enumerate(dcs) if dc]
    if named and len(named) < len(dcs):
        unnamed = [i for i, dc in enumerate(dcs) if not dc]
        said = f"storage nodes {', '.join(map(str, unnamed))} name no data center"
        assert problem is not None and problem.startswith(said)
    else:
        assert problem is None


def _report(place: dict[int, str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """`cluster check --json` and `shard list --json` of a cluster of three log servers and
    six storage nodes on six machines, each named in the data center `place` gives it."""
    def body(ens: Ensemble) -> tuple[dict[str, Any], dict[str, Any]]:
        zk = ens.client()
        zk.start()
        zkpaths.create_cluster(zk, 2, [0, 1, 2])
        for n in range(6):
            loc = f"dc={place[n]},zone=z{n % 2}" if place.get(n) else ""
            machines.record(zk, machines.STORAGE_NODES, n, fd.Domain(f"m{n}", fd.parse_locality(loc)))
            if n < 3:
                machines.record(zk, machines.LOG_SERVERS, n, fd.Domain(f"m{n}", fd.parse_locality(loc)))
        kv = registry.create_kv(zk, 6, list(range(6)), logs=2, replicas=3)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            shards_cli._list(argparse.Namespace(json=True), zk, kv)
        return machines_cli.check(zk), json.loads(out.getvalue())
    s = Scheduler(1)
    got = s.run(lambda: body(Ensemble()))
    assert s.failures == []
    return got  # type: ignore[no-any-return]


def test_cluster_check_and_shard_list_show_the_data_centers() -> None:
    place = {n: ("east", "west", "north")[n % 3] for n in range(6)}
    check, listed = _report(place)
    assert check["data_centers"] == {
        "east": {"machines": ["m0", "m3"], "log_servers": [0], "storage_nodes": [0, 3]},
        "north": {"machines": ["m2", "m5"], "log_servers": [2], "storage_nodes": [2, 5]},
        "west": {"machines": ["m1", "m4"], "log_servers": [1], "storage_nodes": [1, 4]}}
    assert [r["dc"] for r in check["machines"]] == ["east", "west", "north", "east", "west", "north"]
    assert check["data_center_problems"] == [] and check["ok"]
    for row in listed["shards"]:  # each shard's copies, and the data centers they are in
        assert row["data_centers"] == sorted({place[n] for n in row["replicas"]})


def test_cluster_check_fails_while_some_servers_name_no_data_center() -> None:
    check, _ = _report({0: "east", 1: "west", 3: "east", 4: "west"})
    assert not check["ok"]
    assert check["data_center_problems"] == [
        "log servers 2 name no data center while others do (east, west): give every one a dc= tier in "
        "its --locality",
        "storage nodes 2, 5 name no data center while others do (east, west): give every one a dc= tier "
        "in its --locality"]


def test_a_table_shows_the_data_center_column_once_one_is_named() -> None:
    from cli.output import unless_empty
    cols = ["node", "dc", "machine"]
    assert unless_empty([{"node": 0, "dc": "", "machine": "m0"}], cols, "dc") == ["node", "machine"]
    assert unless_empty([{"node": 0, "dc": ""}, {"node": 1, "dc": "east"}], cols, "dc") == cols


def test_bounded_reads_go_to_the_replicas_in_the_callers_data_center() -> None:
    """coordinator/replicas.py in_dc: of the replicas in reading order, those in the
    caller's data center, in that order; every one where no node names a data center; a
    data center no node names is refused naming the field."""
    from coordinator.replicas import in_dc
    from runtime.refusals import BadRequest

    holders = {1: "a1", 2: "a2", 3: "a3", 4: "a4"}
    dcs = {1: "east", 2: "west", 3: "east", 4: "south", 5: "north"}
    assert in_dc(["a3", "a2", "a1", "a4"], holders, dcs, "east") == ["a3", "a1"]
    assert in_dc(["a3", "a2", "a1", "a4"], holders, dcs, "north") == []  # no replica there: the writer serves
    assert in_dc(["a2", "a1"], holders, {1: "", 2: ""}, "east") == ["a2", "a1"]
    with pytest.raises(BadRequest, match=r"header\.dc: no storage node in data center 'mars'.*east, north"):
        in_dc(["a1"], holders, dcs, "mars")
