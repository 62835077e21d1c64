"""Failure domains in real processes: six hosts that say they run on three machines, two
each, in three zones (fleet/failure_domains.py; the network is loopback: what is
tested here is placement; tests/integration/test_netns.py plays machines with network
namespaces). Every shard's and every open segment's copies land on three machines; moves
that would put two on one are refused; copies laid out before the rule are moved apart;
a process that comes back on another machine than its data's, or under an id that a live
process holds, is refused with a message saying why."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from catalog import registry
from cluster import Cluster
from cluster.ports import free_ports
from fleet import failure_domains, machines
from fleet.failure_domains import Domain
from log import zk as zkpaths
from midtown import Client
from runtime.process import EXIT_CONFIG
from tests.integration import traced
from tests.integration.conftest import started, wait_for

pytestmark = pytest.mark.integration
SHARDS = 16
WHERE = {f"host-{i}": (f"m{i // 2}", f"zone={'abc'[i // 2]}") for i in range(6)}


@pytest.fixture(scope="module")
def six(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    d = Path(tmp_path_factory.mktemp("machines"))
    env = {"MIDTOWN_POSITION_INTERVAL_S": "0.5", "MIDTOWN_USAGE_INTERVAL_S": "1",
           **traced.env(d / "spans.jsonl")}
    with started(d / "c", env, layout="host", log_server_count=6,
                 replicas=3, shards=SHARDS, kv_logs=3, where=WHERE) as c:
        c.create_dataset("t")
        c.trace_file = d / "spans.jsonl"  # type: ignore[attr-defined]
        yield c


def mt(c: Cluster, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    p = subprocess.run([sys.executable, "-m", "cli", *args, "--zk", c.zk_hosts], capture_output=True,
                       text=True, timeout=300)
    if ok:
        assert p.returncode == 0, p.stdout + p.stderr
    return p


def check(c: Cluster) -> dict[str, Any]:
    p = mt(c, "cluster", "check", "--json", ok=False)
    assert p.returncode in (0, 1), p.stderr
    out = json.loads(p.stdout)
    assert p.returncode == (0 if out["ok"] else 1)
    return out


def sets(c: Cluster) -> registry.ReplicaSets:
    zk = zkpaths.connect(c.zk_hosts)
    try:
        kv = registry.read_kv(zk)
        assert kv is not None
        return registry.read_replica_sets(zk, kv)
    finally:
        zk.stop()
        zk.close()


def relabel(c: Cluster, server: int, machine: str, locality: str) -> None:
    """Say in ZooKeeper that `server` (both roles) runs on `machine`: a cluster whose
    copies were placed before its machines were known, as after an upgrade."""
    zk = zkpaths.connect(c.zk_hosts)
    try:
        for role in machines.ROLES:
            machines.forget(zk, role, server)
            machines.record(zk, role, server, Domain(machine, failure_domains.parse_locality(locality)))
    finally:
        zk.stop()
        zk.close()


def test_copies_land_on_distinct_machines_and_zones(six: Cluster) -> None:
    out = check(six)
    assert out["ok"] and not out["one_machine"]
    assert [(m["machine"], m["locality"], m["log_servers"], m["storage_nodes"]) for m in out["machines"]] == [
        ("m0", "zone=a", [0, 1], [0, 1]), ("m1", "zone=b", [2, 3], [2, 3]), ("m2", "zone=c", [4, 5], [4, 5])]
    assert out["shards_sharing_a_machine"] == 0 and out["open_segments"] == six.logs
    assert out["open_segments_sharing_a_machine"] == 0
    for copies in sets(six).sets:  # one copy per zone
        assert sorted(n // 2 for n in copies) == [0, 1, 2]
    # shard list shows each copy's machine and the count.
    listed = json.loads(mt(six, "shard", "list", "--json").stdout)
    assert listed["shards_sharing_a_machine"] == 0
    assert listed["shards"][0]["machines"] == [f"m{n // 2} (zone={'abc'[n // 2]})"
                                               for n in listed["shards"][0]["replicas"]]
    with Client(zk=six.zk_hosts, timeout=15) as db:
        db.put("t", "p", "k", b"v")
        assert db.get("t", "p", "k").value == b"v"  # type: ignore[union-attr]


def test_an_operation_is_traced_through_every_host_it_crosses(six: Cluster) -> None:
    """Host layout: a put, a CAS and a bulk write reach the host whose coordinator takes
    them (beside the log's writer) and at least two hosts storing the entry (the ack
    quorum, on distinct machines); a strong get and a watch a host's coordinator."""
    def expect(op: str, ss: list[dict[str, object]]) -> bool:
        coordinator = traced.services(ss, {"Put": "put", "CheckAndSet": "check_and_set",
                                           "WriteMany": "write_many", "Get": "get", "Watch": "watch"}[op])
        if op in ("Put", "CheckAndSet", "WriteMany"):
            return bool(coordinator) and len(traced.services(ss, "log store")) >= 2
        return bool(coordinator)
    got = traced.check_operations(six.coordinator_addrs, "t", six.trace_file, expect)  # type: ignore[attr-defined]
    assert {s["name"] for s in got["CheckAndSet"]} >= {"admission", "append", "log append", "log quorum",
                                                       "log store", "storage answer"}


def test_a_move_onto_a_machine_that_holds_a_copy_is_refused(six: Cluster) -> None:
    before = sets(six)
    shard = next(s for s, copies in enumerate(before.sets) if 0 in copies)
    other = next(n for n in before.of(shard) if n // 2 != 0)
    p = mt(six, "shard", "move", str(shard), "--to", "1", "--from", str(other), ok=False)
    assert p.returncode == 2
    assert (f"--to: storage node 1 runs on machine 'm0', which holds shard {shard}'s copy on node 0 already"
            in p.stderr)
    assert sets(six).sets == before.sets


def test_copies_placed_before_the_rule_move_apart_and_a_decommission_that_cannot_keep_it_is_refused(
        six: Cluster) -> None:
    # One server of an open segment turns out to run on the machine of another of its
    # servers: that segment, and the shards with copies on both, share a machine; the
    # server's old machine has one server left.
    for _ in range(10):  # (a segment may move between the look and the relabel: then again)
        # From a settled cluster: a writer change by then may have opened a segment before
        # it read every machine; the writers move it apart by themselves (as below).
        wait_for(lambda: check(six)["open_segments_sharing_a_machine"] == 0, 60,
                 "open segments apart before the test", every_s=1.0)
        seg = check(six)["segments"][0]
        moved, beside = seg["servers"][1], seg["servers"][2]
        to_machine, to_locality = WHERE[f"host-{beside}"]
        relabel(six, moved, to_machine, to_locality)
        out = check(six)
        if out["open_segments_sharing_a_machine"] >= 1:
            break
        relabel(six, moved, *WHERE[f"host-{moved}"])
    assert not out["ok"] and out["open_segments_sharing_a_machine"] >= 1
    lone = moved ^ 1  # its old machine's other server (machines hold 2k and 2k + 1)
    # The writers move their open segments apart by themselves (an ensemble change).
    wait_for(lambda: check(six)["open_segments_sharing_a_machine"] == 0, 60,
             "open segments still share a machine", every_s=1.0)
    # Shards: `cluster rebalance` moves them apart.
    mt(six, "cluster", "rebalance", "--json")
    out = check(six)
    assert out["ok"] and out["shards_sharing_a_machine"] == 0
    assert all(lone in copies for copies in sets(six).sets)  # the only server left on its machine
    # Taking it out would leave each shard's copies on two machines: refused, nothing moved.
    before = sets(six)
    p = mt(six, "node", "decommission", str(lone), ok=False)
    assert p.returncode == 2
    assert f"ID: node {lone} cannot be decommissioned: shard " in p.stderr
    assert "has nowhere to go without two copies on one machine" in p.stderr
    assert sets(six).sets == before.sets and check(six)["ok"]
    with Client(zk=six.zk_hosts, timeout=15) as db:
        db.put("t", "p", "after", b"1")
        assert db.get("t", "p", "after").value == b"1"  # type: ignore[union-attr]
    # The moved server's host started as before (its old --machine) is refused: its copies
    # are placed as on the other machine now.
    name, (old_machine, _) = f"host-{moved}", WHERE[f"host-{moved}"]
    six.kill(name)
    six.start_process(name)
    assert six.wait_exit(name, 60)
    assert six.exit_code(name) == EXIT_CONFIG
    said = (six.dir / "logs" / f"{name}.log").read_text()
    assert (f"log server {moved} was placed on machine {to_machine!r}; this process says it runs on "
            f"{old_machine!r} (--machine)") in said
    six.procs[name].machine, six.procs[name].locality = to_machine, to_locality
    six.start_process(name)
    zk = zkpaths.connect(six.zk_hosts)
    try:
        wait_for(lambda: moved in zkpaths.servers(zk), 60, f"{name} did not come back on {to_machine}")
    finally:
        zk.stop()
        zk.close()


def test_a_second_process_under_a_live_id_is_refused(six: Cluster, tmp_path: Path) -> None:
    p = six.procs["host-0"]
    ports = free_ports(3)
    cmd = [sys.executable, "-m", "coordinator.host", "--id", "0", "--zk", six.zk_hosts, "--data",
           str(tmp_path / "second"), "--log-port", str(ports[0]), "--storage-port", str(ports[1]),
           "--coordinator-port", str(ports[2]), "--machine", p.machine, "--locality", p.locality]
    t0 = time.monotonic()
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert run.returncode == EXIT_CONFIG, run.stderr[-2000:]
    assert "/midtown/log_servers/0 is held by another process: pid " in run.stderr
    assert "two processes cannot share an id" in run.stderr
    assert time.monotonic() - t0 < 60
    assert six.running("host-0")  # the first goes on
    with Client(zk=six.zk_hosts, timeout=15) as db:
        db.put("t", "p", "second", b"1")


@pytest.mark.parametrize("flags, says", [
    (["--locality", "zone"], "--locality: 'zone' in 'zone' is not tier=value"),
    (["--machine", "a b"], "--machine: 'a b' is not a machine name"),
])
def test_a_malformed_machine_or_locality_is_refused_naming_the_flag(six: Cluster, tmp_path: Path,
                                                                     flags: list[str], says: str) -> None:
    ports = free_ports(3)
    run = subprocess.run([sys.executable, "-m", "coordinator.host", "--id", "9", "--zk", six.zk_hosts,
                          "--data", str(tmp_path / "bad"), "--log-port", str(ports[0]), "--storage-port",
                          str(ports[1]), "--coordinator-port", str(ports[2]), *flags],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and says in run.stderr, run.stderr
