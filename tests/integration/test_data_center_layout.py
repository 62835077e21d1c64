"""Data centers laid out through the `midtown` command against a real ZooKeeper alone (no
servers: what is checked is what is placed, recorded and planned): the cluster's copies per
data center (`--copies-per-dc`, catalog/replica_sets.py; a planned copy added is made by the
same `shard move` with no --from that tests/integration/test_replica_sets.py runs), on
storage nodes that say they run on machines in east and west; and a local scope removed
(`scope remove`, catalog/scopes.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from catalog import registry
from fleet import machines
from fleet.failure_domains import Domain
from tests.integration.conftest import zk_session

pytestmark = pytest.mark.integration
SHARDS = 8


def _at(machine: str, dc: str) -> Domain:
    return Domain(machine, (("dc", dc), ("zone", machine)))


def mt(hosts: str, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    p = subprocess.run([sys.executable, "-m", "cli", *args, "--zk", hosts], capture_output=True, text=True,
                       timeout=60)
    assert (p.returncode == 0) == ok, p.stdout + p.stderr
    assert "Traceback" not in p.stderr, p.stderr
    return p


def _per_dc(nodes: list[int], where: dict[int, str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for n in nodes:
        out[where[n]] = out.get(where[n], 0) + 1
    return out


def _after(listed: dict[str, Any], moves: list[dict[str, Any]]) -> list[list[int]]:
    sets = [set(s["replicas"]) for s in listed["shards"]]
    for m in moves:
        sets[m["shard"]] = (sets[m["shard"]] - {m["from"]}) | {m["to"]}
    return [sorted(s) for s in sets]


def _record(hosts: str, where: dict[int, str]) -> None:
    """Record each storage node's machine (m<id>, a zone of its own) in its data center."""
    with zk_session(hosts) as zk:
        for n, dc in where.items():
            machines.record(zk, machines.STORAGE_NODES, n, _at(f"m{n}", dc))


def test_copies_per_dc_placed_raised_and_given_to_a_data_center_added_later(zk_hosts: str) -> None:
    where = {0: "east", 1: "east", 2: "east", 3: "west", 4: "west"}
    _record(zk_hosts, where)
    with zk_session(zk_hosts) as zk:
        # A count no data center can hold is refused before anything is written
        p = mt(zk_hosts, "cluster", "init", "--log-servers", "0,1,2", "--storage-nodes", "0,1,2,3,4",
               "--copies-per-dc", "10", ok=False)
        assert "--copies-per-dc: 10, must be between 1 and 9" in p.stderr
        assert registry.read_kv(zk) is None
        out = json.loads(mt(zk_hosts, "cluster", "init", "--log-servers", "0,1,2", "--storage-nodes",
                            "0,1,2,3,4", "--shards", str(SHARDS), "--kv-logs", "1", "--copies-per-dc", "1",
                            "--json").stdout)
        assert out["copies_per_dc"] == 1
        listed = json.loads(mt(zk_hosts, "shard", "list", "--json").stdout)
        assert listed["copies_per_dc"] == 1
        assert all(_per_dc(s["replicas"], where) == {"east": 1, "west": 1} for s in listed["shards"])

        # Raised to two, planned: one copy more in each data center, added (no copy leaves)
        dry = json.loads(mt(zk_hosts, "cluster", "rebalance", "--dry-run", "--copies-per-dc", "2",
                            "--json").stdout)
        added = [m for m in dry["moves"] if m["from"] is None]
        assert dry["copies_per_dc"] == 2 and len(added) == 2 * SHARDS
        assert all(_per_dc(s, where) == {"east": 2, "west": 2} for s in _after(listed, dry["moves"]))
        # ... a dry run records nothing
        assert json.loads(mt(zk_hosts, "shard", "list", "--json").stdout)["copies_per_dc"] == 1
        p = mt(zk_hosts, "cluster", "rebalance", "--dry-run", "--copies-per-dc", "3", ok=False)
        assert "--copies-per-dc: 3 copies in data center west need 3 machines there; it has 2" in p.stderr

        # A data center that joins later is given its copies by the next rebalance, as set
        north = {5: "north", 6: "north"}
        for n, dc in north.items():
            machines.record(zk, machines.STORAGE_NODES, n, _at(f"m{n}", dc))
            registry.add_storage_node(zk, n)
        where.update(north)
        dry = json.loads(mt(zk_hosts, "cluster", "rebalance", "--dry-run", "--json").stdout)
        added = [m for m in dry["moves"] if m["from"] is None]
        assert len(added) == SHARDS and {m["to"] for m in added} == set(north)
        assert all(_per_dc(s, where) == {"east": 1, "west": 1, "north": 1}
                   for s in _after(listed, dry["moves"]))
        table = mt(zk_hosts, "cluster", "rebalance", "--dry-run").stdout
        assert f"{len(dry['moves'])} moves planned (dry run: nothing moved)" in table
        listed = mt(zk_hosts, "shard", "list").stdout
        assert (f"copies per data center: 1 (cluster setting); {SHARDS} of {SHARDS} shards have fewer in "
                "some data center (midtown cluster rebalance adds them)") in listed


def test_a_lower_count_than_a_data_center_holds_is_refused_naming_it(zk_hosts: str) -> None:
    where = {0: "east", 1: "east", 2: "east", 3: "west", 4: "west"}
    _record(zk_hosts, where)
    mt(zk_hosts, "cluster", "init", "--log-servers", "0,1,2", "--storage-nodes", "0,1,2,3,4", "--shards", "4",
       "--kv-logs", "1", "--replicas", "4", "--json")
    listed = json.loads(mt(zk_hosts, "shard", "list", "--json").stdout)
    assert listed["copies_per_dc"] is None
    assert all(_per_dc(s["replicas"], where) == {"east": 2, "west": 2} for s in listed["shards"])
    p = mt(zk_hosts, "cluster", "rebalance", "--dry-run", "--copies-per-dc", "1", ok=False)
    assert "--copies-per-dc: 1, but data center" in p.stderr
    assert "copies are added, never taken away" in p.stderr


def test_a_scope_removed_gives_global_its_shards_and_logs_back_with_no_home(zk_hosts: str) -> None:
    """A scope of half the shards laid out (here by its transaction alone, its shards put on
    its log as its hand-offs would: global's then spread over both logs evenly as they
    are, so the removal makes no hand-off, which would need log servers), then removed by
    the command: global has every shard and both logs again, the scope's log has no home,
    and a global dataset created then hashes over every shard. A scope with a dataset in
    it is refused first."""
    from catalog import datasets
    from log import zk as zkpaths

    mt(zk_hosts, "cluster", "init", "--log-servers", "0,1,2", "--storage-nodes", "0,1,2", "--shards",
       str(SHARDS), "--kv-logs", "2", "--json")
    with zk_session(zk_hosts) as zk:
        path, body, version = zkpaths.homes_moved(zk, [1], "east")
        zk.set(path, body, version=version)
        registry.add_scope(zk, "east", SHARDS // 2, [1], {1: "east"}, lambda: datasets.used_shards(zk))
        kv = registry.read_kv(zk)
        assert kv is not None
        m = registry.read_log_map(zk, kv)
        placed = tuple(1 if s >= SHARDS // 2 else 0 for s in range(SHARDS))
        registry.write_log_map(zk, registry.LogMap(m.logs, placed, m.version), "as its hand-offs leave it")
        datasets.create(zk, "e", scope="east")
    p = mt(zk_hosts, "scope", "remove", "east", ok=False)
    assert "DC: dataset 'e' is in scope 'east' (its keys hash over shards 4..7)" in p.stderr
    with zk_session(zk_hosts) as zk:
        datasets.drop(zk, "e")
    out = json.loads(mt(zk_hosts, "scope", "remove", "east", "--json").stdout)
    assert out["removed"] == "east" and out["shards"] == "4..7" and out["logs"] == [1]
    assert out["global_shards"] == f"0..{SHARDS - 1}"
    rows = json.loads(mt(zk_hosts, "scope", "list", "--json").stdout)
    assert [(r["scope"], r["shards"], r["logs"], r["homes"]) for r in rows] == \
        [("global", f"0..{SHARDS - 1}", [0, 1], ["-"])]
    with zk_session(zk_hosts) as zk:
        g = datasets.create(zk, "g")
    assert (g.shard_first, g.shard_count) == (0, SHARDS)
    p = mt(zk_hosts, "scope", "remove", "east", ok=False)
    assert "DC: no scope 'east'" in p.stderr
