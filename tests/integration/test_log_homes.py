"""A log kept in one data center (log/homes.py), in real processes: six log servers that say
they run on six machines, three in data center east and three in west (the network is
loopback: what is tested here is where a log's writer and copies go). `midtown log home`
moves a log's writer and open segment into its home; the writer killed, the next one is
there too; what the command cannot do is refused naming the argument. And a scope local to
east (catalog/scopes.py), laid out on key-value log 1 kept there before any dataset: its
dataset's keys travel only in that log, written and copied in east."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from catalog import datasets, registry
from cluster import Cluster
from log import zk as zkpaths
from midtown import Client, errors
from runtime.process import EXIT_FAILED_OVER
from tests.integration.conftest import metric, registered, started, storage_status, wait_for

pytestmark = pytest.mark.integration
EAST, WEST = {0, 1, 2}, {3, 4, 5}
WHERE = {**{f"log-{i}": (f"m{i}", f"dc={'east' if i in EAST else 'west'},zone=z{i}") for i in range(6)},
         **{f"storage-{i}": (f"m{m}", f"dc={'east' if m in EAST else 'west'},zone=z{m}")
            for i, m in enumerate((0, 3, 1))}}


SHARDS = 16
EAST_SHARDS = range(12, 16)  # scope east: the top 4 of the 16


@pytest.fixture(scope="module")
def two_dcs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Two key-value logs: log 1 kept in east carries scope east's shards, log 0 global's;
    datasets t (global) and e (east), made after the scope was laid out."""
    with started(Path(tmp_path_factory.mktemp("homes")) / "c", log_server_count=6, where=WHERE,
                 shards=SHARDS, kv_logs=2) as c:
        mt(c, "log", "home", "1", "east")
        wait_for(lambda: placed_in(c, 1, EAST), 60, "log 1's writer and open segment in east")
        out = json.loads(mt(c, "scope", "add", "east", "--shards", "4", "--logs", "1", "--json").stdout)
        assert out["shards"] == "12..15" and out["logs"] == [1]
        # every global shard on log 1 left it, every east shard on log 0 came to it (shard mod 2)
        assert sorted(r["shard"] for r in out["handoffs"]) == [*range(1, 12, 2), 12, 14]
        c.create_dataset("t", survive="zone")  # (two data centers: refused otherwise, below)
        c.create_dataset("e", scope="east")
        yield c


def mt(c: Cluster, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    p = subprocess.run([sys.executable, "-m", "cli", *args, "--zk", c.zk_hosts], capture_output=True,
                       text=True, timeout=120)
    assert (p.returncode == 0) == ok, p.stdout + p.stderr
    return p


def status(c: Cluster, log_id: int) -> dict[str, Any]:
    rows = json.loads(mt(c, "log", "status", "--json").stdout)
    return next(r for r in rows if r["log"] == log_id)


def placed_in(c: Cluster, log_id: int, servers: set[int]) -> dict[str, Any] | None:
    """The log's status once its writer and its open segment's servers are all of
    `servers` (None until then)."""
    r = status(c, log_id)
    return r if r["writer"] in servers and {int(s) for s in r["replicas"]} <= servers else None


def test_a_log_given_a_home_is_written_and_copied_there_and_stays_there(two_dcs: Cluster) -> None:
    c = two_dcs
    # Before: every log's open segment spread over both data centers (the widest tier first).
    assert all(len(status(c, log_id)["data_centers"]) == 2 for log_id in (0, 3))
    out = json.loads(mt(c, "log", "home", "0", "west", "--json").stdout)
    assert out["home"] == "west"
    row = wait_for(lambda: placed_in(c, 0, WEST), 60, "log 0's writer and open segment in west")
    assert row["home"] == "west" and row["data_centers"] == ["west"]
    # Log 3, written from west already (its preferred writer): its open segment moves there.
    mt(c, "log", "home", "3", "west")
    wait_for(lambda: placed_in(c, 3, WEST), 60, "log 3's open segment in west")
    assert "west" in mt(c, "log", "status").stdout  # the table's home column
    with Client(zk=c.zk_hosts, timeout=30) as db:
        for i in range(20):  # keys on every log, log 0 among them
            db.put("t", f"p{i}", "k", b"v")
        # Its writer killed, the next writer is in west too.
        writer = row["writer"]
        c.kill(f"log-{writer}")
        try:
            wait_for(lambda: status(c, 0)["writer"] in WEST - {writer}, 60, "a new writer in west")
            for i in range(20):
                db.put("t", f"p{i}", "k", b"w")
                assert db.get("t", f"p{i}", "k").value == b"w"  # type: ignore[union-attr]
        finally:
            c.restart(f"log-{writer}")
    assert all(int(s) in WEST for s in status(c, 0)["replicas"])
    cleared = json.loads(mt(c, "log", "home", "0", "--clear", "--json").stdout)
    assert cleared["home"] == "" and status(c, 0)["home"] == ""
    # With no home, its open segment is spread over both data centers again (an ensemble
    # change: a log without a home survives the loss of one), written on as before.
    wait_for(lambda: len(status(c, 0)["data_centers"]) == 2, 60, "log 0's open segment in both data centers")
    with Client(zk=c.zk_hosts, timeout=30) as db:
        for i in range(20):
            db.put("t", f"p{i}", "k", b"x")
            assert db.get("t", f"p{i}", "k").value == b"x"  # type: ignore[union-attr]


@pytest.mark.parametrize("args,says", [
    (("log", "home", "0", "north"), "DC: 'north' holds none of the pool's log servers (data centers: east, "
                                    "west)"),
    (("log", "home", "9", "west"), "LOG: 9"),
    (("log", "home", "0"), "DC: name a data center"),
    (("log", "home", "0", "west", "--clear"), "DC: give a data center or --clear"),
])
def test_a_home_that_cannot_be_is_refused_naming_the_argument(two_dcs: Cluster, args: tuple[str, ...],
                                                              says: str) -> None:
    p = mt(two_dcs, *args, ok=False)
    assert says in p.stderr and "Traceback" not in p.stderr
    assert status(two_dcs, 0)["home"] in ("", "west")  # nothing written by a refusal


def test_a_local_datasets_keys_travel_only_in_logs_kept_in_its_data_center(two_dcs: Cluster) -> None:
    c = two_dcs
    e = json.loads(mt(c, "dataset", "describe", "e", "--json").stdout)
    assert (e["scope"], e["shards"]) == ("east", "12..15")
    assert json.loads(mt(c, "dataset", "describe", "t", "--json").stdout)["shards"] == "0..11"
    rows = {r["scope"]: r for r in json.loads(mt(c, "scope", "list", "--json").stdout)}
    assert rows["east"] == {"scope": "east", "shards": "12..15", "logs": [1], "homes": ["east"],
                            "not_on_its_logs": 0, "datasets": 1}
    assert rows["global"]["logs"] == [0] and rows["global"]["datasets"] == 1
    shards = {r["shard"]: r for r in json.loads(mt(c, "shard", "list", "--json").stdout)["shards"]}
    assert all(shards[s]["log"] == 1 and shards[s]["scope"] == "east" for s in EAST_SHARDS)
    assert all(shards[s]["log"] == 0 for s in range(12))
    # A rebalance evens shards out within each scope: 12 global shards on log 0 and 4 of
    # east's on log 1 are even already (across both logs it would hand 4 of global's to 1)
    rebalanced = json.loads(mt(c, "cluster", "rebalance", "--json").stdout)
    assert rebalanced["handoffs"] == [] and rebalanced["shards_per_log"] == {"0": 12, "1": 4}
    wait_for(lambda: placed_in(c, 1, EAST), 60, "log 1's writer and open segment in east")
    with Client(zk=c.zk_hosts, timeout=30) as db:
        for i in range(30):
            db.put("e", f"p{i}", "k", str(i).encode())
        assert [db.get("e", f"p{i}", "k").value for i in range(30)] == \
            [str(i).encode() for i in range(30)]  # type: ignore[union-attr]
    # each key's shard is one of east's, all on log 1: its writer and every copy of its
    # open segment in east
    zk = zkpaths.connect(c.zk_hosts)
    try:
        got = datasets.get(zk, "e")
    finally:
        zk.stop()
        zk.close()
    assert got is not None and {got.shard_of(f"p{i}".encode(), SHARDS) for i in range(30)} <= set(EAST_SHARDS)
    assert placed_in(c, 1, EAST) is not None
    assert status(c, 1)["last"] >= 29


@pytest.mark.parametrize("args,says", [
    (("shard", "hand-off", "12", "--to", "0"),
     "--to: log 0 carries the shards of scope 'global', and shard 12 is in scope 'east'"),
    (("shard", "hand-off", "3", "--to", "1"), "--to: log 1 carries the shards of scope 'east'"),
    (("log", "home", "1", "--clear"), "LOG: log 1 carries scope 'east'"),
    (("log", "home", "1", "west"), "LOG: log 1 carries scope 'east'"),
    (("scope", "add", "west", "--shards", "2", "--logs", "0"), "--logs: log 0"),
    (("scope", "add", "east", "--shards", "2", "--logs", "0"), "DC: scope 'east' exists already"),
    (("scope", "add", "west", "--shards", "2", "--logs", "x"), "--logs: 'x'"),
    (("scope", "add", "west", "--shards", "0", "--logs", "3"), "--shards: 0, must be between 1 and"),
    (("dataset", "create", "n", "--scope", "north"), "scope: 'north' is not one of this cluster's scopes"),
    (("dataset", "create", "n", "--scope", "east", "--consistency", "eventual"),
     "scope: 'east'; an eventual"),
    (("dataset", "create", "n"), "scope: a global dataset is to survive the loss of a data center"),
    (("scope", "remove", "east"), "DC: dataset 'e' is in scope 'east' (its keys hash over shards 12..15)"),
    (("scope", "remove", "north"), "DC: no scope 'north'"),
])
def test_a_scope_that_cannot_be_is_refused_naming_the_argument(two_dcs: Cluster, args: tuple[str, ...],
                                                               says: str) -> None:
    p = mt(two_dcs, *args, ok=False)
    assert says in p.stderr and "Traceback" not in p.stderr
    assert status(two_dcs, 1)["home"] == "east"


def test_only_the_replicas_in_a_local_scopes_data_center_answer_its_writes(two_dcs: Cluster) -> None:
    """A write to a local dataset that waits for its result (an increment: a put is
    acknowledged once its log commits it) waits for an answer from a replica in its data center
    only (catalog/scopes.py answering): storage nodes 0 and 2 (east) answer log 1's
    records, node 1 (west) applies them and answers none. A node learns the layout within
    its bookkeeping interval: first a batch with no answer from west, then the rule holds."""
    c = two_dcs
    west, east = "storage-1", ("storage-0", "storage-2")

    def answers(proc: str) -> float:
        return metric(c, proc, "midtown_storage_answers_total", 'log="1"')

    with Client(zk=c.zk_hosts, timeout=30) as db:
        def quiet_batch(n: int) -> tuple[float, float] | None:
            before = answers(west), sum(answers(p) for p in east)
            for i in range(n):
                db.incr("e", f"q{i}", "k")
            after = answers(west), sum(answers(p) for p in east)
            return None if after[0] != before[0] else (before[1], after[1])
        wait_for(lambda: quiet_batch(10), 60, "a batch of writes answered from east alone")
        got = quiet_batch(40)
    assert got is not None, "node 1 (west) answered a write to the east dataset"
    assert got[1] - got[0] >= 40  # every write answered, from east


def test_a_log_that_prefers_a_data_center_is_written_there_and_copied_everywhere(two_dcs: Cluster) -> None:
    """`log prefer 2 west`: a west server takes log 2's writing over (the writer elsewhere
    gives it up while one there is up), its open segment still spread over both data
    centers; its writer killed, the next is in west too; --clear leaves it where it is."""
    c = two_dcs
    out = json.loads(mt(c, "log", "prefer", "2", "west", "--json").stdout)
    assert out["prefers"] == "west"
    wait_for(lambda: status(c, 2)["writer"] in WEST, 60, "log 2's writer in west")
    row = status(c, 2)
    assert row["prefers"] == "west" and row["home"] == "" and row["data_centers"] == ["east", "west"]
    writer = row["writer"]
    c.kill(f"log-{writer}")
    try:
        wait_for(lambda: status(c, 2)["writer"] in WEST - {writer}, 60, "a new writer of log 2 in west")
    finally:
        c.restart(f"log-{writer}")
    cleared = json.loads(mt(c, "log", "prefer", "2", "--clear", "--json").stdout)
    assert cleared["prefers"] == "" and status(c, 2)["prefers"] == ""
    for args, says in ((("log", "prefer", "2", "south"), "DC: 'south' holds none of the pool's log servers"),
                       (("log", "prefer", "1", "west"), "LOG: log 1 is kept in 'east'"),
                       (("log", "prefer", "2"), "DC: name a data center, or pass --clear")):
        p = mt(c, *args, ok=False)
        assert says in p.stderr and "Traceback" not in p.stderr


def test_an_eventual_write_waits_for_a_majority_of_the_callers_data_center_alone(two_dcs: Cluster) -> None:
    """An eventual dataset's write from west (Client(dc="west")) is done once west's replica
    has it (coordinator/eventual.py local_quorum: storage node 1 is west's only one), with
    both of east's paused (SIGSTOP): a majority of all three could not be had. Continued,
    east reads it too (the write reached them, or anti-entropy brings it)."""
    c = two_dcs
    mt(c, "dataset", "create", "ev", "--consistency", "eventual")
    east = ("storage-0", "storage-2")
    for p in east:
        c.signal(p, signal.SIGSTOP)
    try:
        with Client(zk=c.zk_hosts, timeout=20, dc="west") as west:
            west.put("ev", "k", "l", b"written in west")
            got = west.get("ev", "k", "l")
            assert got is not None and got.value == b"written in west"
    finally:
        for p in east:
            c.signal(p, signal.SIGCONT)
    with Client(zk=c.zk_hosts, timeout=20, dc="east") as near_east:
        def read_in_east() -> bool | None:
            got = near_east.get("ev", "k", "l")
            return True if got is not None and got.value == b"written in west" else None
        wait_for(read_in_east, 60, "the write read in east")
    with Client(zk=c.zk_hosts, timeout=20, dc="mars") as nowhere, pytest.raises(errors.InvalidArgument) as e:
        nowhere.put("ev", "k", "l", b"from nowhere")  # a data center no storage node names
    assert "header.dc: no storage node in data center 'mars'" in str(e.value)


def test_a_local_dataset_whose_home_is_lost_fails_over_and_reports_what_it_lost(two_dcs: Cluster) -> None:
    """West's replica caught up, then paused while ten more writes are acknowledged in east;
    then east lost (its log servers and storage nodes paused, SIGSTOP). `dataset fail-over e
    --to west` is refused while east's log servers are still registered (naming --force),
    then cuts log 1 where west's replica stands: every write acknowledged before is read
    back, the ten are not (east's copies of them unknown while it is away), new writes go
    through west's writer. East continued, its storage nodes stop on learning they were
    condemned (they applied the ten) and, started again, take a copy from west's; the ten
    stay kept aside on east's log servers, reported by `scope list`, never applied. Last in
    this module: east stays failed over."""
    c = two_dcs
    zkc = zkpaths.connect(c.zk_hosts)
    west_node, east_nodes = "storage-1", ("storage-0", "storage-2")
    east_logs = [f"log-{i}" for i in sorted(EAST)]
    with Client(zk=c.zk_hosts, timeout=30) as db:
        for i in range(30):
            db.put("e", f"f{i}", "k", b"before")

        def position(proc: str) -> int | None:
            st = storage_status(c.procs[proc].addr)
            return None if st is None else int(st.log_positions[1])
        wait_for(lambda: position(west_node) == max(position(p) or 0 for p in east_nodes), 60,
                 "west's replica caught up with east's on log 1")
        caught_up = position(west_node)
        c.kill(west_node)  # (a pause would not do: what the writer sent meanwhile waits in its socket)
        try:
            for i in range(10):  # acknowledged in east alone: answered by east's replicas
                db.put("e", f"g{i}", "k", b"east only")
        finally:
            for p in (*east_logs, *east_nodes):
                c.signal(p, signal.SIGSTOP)
            c.restart(west_node)
    try:  # at once, east's log servers still registered (their sessions not expired): refused
        refused = mt(c, "dataset", "fail-over", "e", "--to", "west", ok=False)
        assert "'east' is reachable" in refused.stderr and "--force" in refused.stderr
        wait_for(lambda: not set(zkpaths.servers(zkc)) & EAST, 60, "east's log servers' sessions to expire")
        wait_for(lambda: registered(c, west_node), 90, "west's storage node started again")
        assert position(west_node) == caught_up
        for args, says in ((("t", "--to", "west"), "NAME: dataset 't' is global"),
                           (("e", "--to", "south"), "--to: 'south' is not a data center of this cluster"),
                           (("e", "--to", "east"), "--to: scope 'east' (dataset 'e') is kept in 'east'"),
                           (("nope", "--to", "west"), "NAME: no dataset 'nope'")):
            p = mt(c, "dataset", "fail-over", *args, ok=False)
            assert says in p.stderr and "Traceback" not in p.stderr
        table = mt(c, "dataset", "fail-over", "e", "--to", "west").stdout  # as an operator reads it
        print(table)
        lines = table.splitlines()
        # No survivor applied past the cut (east's nodes do not answer): nothing lost for sure.
        assert lines[0].split() == ["LOG", "CUT_AT", "LOST", "LOST_ENTRIES", "SOURCES"]
        assert lines[1].split() == ["1", str(caught_up - 1), "0", "1"]
        assert "datasets moved to 'west' (scope east): e" in table
        assert "storage nodes to take a copy from a source before applying again: 0, 2" in table
        assert status(c, 1)["home"] == "west" and status(c, 1)["writer"] in WEST
        with Client(zk=c.zk_hosts, timeout=30) as db:
            assert all(db.get("e", f"f{i}", "k").value == b"before" for i in range(30))  # type: ignore[union-attr]
            assert all(db.get("e", f"g{i}", "k") is None for i in range(10))  # the ten: lost
            for i in range(5):
                db.put("e", f"g{i}", "k", b"after")
            assert db.incr("e", "n", "k") == 1  # answered by west's replica, the scope's only one now
        (row,) = [r for r in json.loads(mt(c, "scope", "list", "--json").stdout) if r["scope"] == "east"]
        assert row["homes"] == ["west"] and row["failed_over"] == "east->west"
        assert (row["cuts"][0]["cut_at"], row["cuts"][0]["lost_for_sure"]) == (caught_up - 1, 0)
        assert row["cuts"][0]["kept_aside"] == "unknown"  # east's servers away: what they hold is not known
        assert "kept in 'west' already" in mt(c, "dataset", "fail-over", "e", "--to", "west", ok=False).stderr
    finally:
        for p in (*east_logs, *east_nodes):
            c.signal(p, signal.SIGCONT)
    for p in east_nodes:  # condemned: each stops once it learns it, to take a copy when started again
        wait_for(lambda p=p: not c.running(p), 60, f"{p} to stop")
        assert c.exit_code(p) == EXIT_FAILED_OVER
        c.restart(p)
    wait_for(lambda: not registry.read_kv(zkc).failovers[-1]["condemned"], 120,  # type: ignore[union-attr]
             "east's storage nodes to take their copies")
    for p in east_nodes:  # their shards of log 1 alone: of log 0's (global) they held the log's state
        said = (c.dir / "logs" / f"{p}.log").read_text()
        assert "took its shards of logs [1] again" in said and "bootstrapping" not in said, said[-3000:]
    (row,) = [r for r in json.loads(mt(c, "scope", "list", "--json").stdout) if r["scope"] == "east"]
    first, last = map(int, row["cuts"][0]["kept_aside"].split(".."))  # east's servers back: the ten at least
    assert first == caught_up and last >= caught_up + 9
    listed = mt(c, "scope", "list").stdout
    print(listed)
    assert f"log 1: cut at {caught_up - 1}, 0 lost for sure, {first}..{last} kept aside" in listed
    with Client(zk=c.zk_hosts, timeout=30) as db:
        assert [g.value if (g := db.get("e", f"g{i}", "k")) else None for i in (0, 4, 5, 9)] == [
            b"after", b"after", None, None]

    def at_one_position() -> list[dict[int, tuple[int, int]]] | None:
        got = [{s.shard: (s.position, s.digest) for s in storage_status(c.procs[p].addr).shards
                if s.shard in EAST_SHARDS} for p in (west_node, *east_nodes)]
        return got if len({tuple(p for p, _ in g.values()) for g in got}) == 1 else None
    same = wait_for(at_one_position, 60, "every replica of east's shards at one position")
    assert same[0] == same[1] == same[2], "a replica that took its copy differs from its source"
    zkc.stop()


def test_a_scope_grows_onto_another_log_kept_where_it_is_kept(two_dcs: Cluster) -> None:
    """After the fail-over above, scope east is kept in west: `log add` gives the key-value
    store a third log, `log home 2 west` keeps it there, and `scope grow east --logs 2`
    hands half of east's shards to it; the dataset's writes then go through both, every
    key read back. A log kept elsewhere, or global's last, is refused naming --logs."""
    c = two_dcs
    assert json.loads(mt(c, "log", "add", "1", "--json").stdout)["added"] == [2]
    mt(c, "log", "home", "2", "west")
    wait_for(lambda: placed_in(c, 2, WEST), 60, "log 2's writer and open segment in west")
    for args, says in ((("--logs", "0"), "--logs: log 0 has no home"),
                       (("--logs", "1"), "--logs: log 1 carries scope 'east' already"),
                       (("--logs", "7"), "--logs: log 7 is not one of the key-value store's logs 0..2")):
        p = mt(c, "scope", "grow", "east", *args, ok=False)
        assert says in p.stderr and "Traceback" not in p.stderr, p.stderr
    out = json.loads(mt(c, "scope", "grow", "east", "--logs", "2", "--json").stdout)
    assert out["logs"] == [1, 2] and len(out["handoffs"]) == 2
    assert all(r["from_log"] == 1 and r["to_log"] == 2 for r in out["handoffs"])
    shards = {r["shard"]: r for r in json.loads(mt(c, "shard", "list", "--json").stdout)["shards"]}
    assert sorted(shards[s]["log"] for s in EAST_SHARDS) == [1, 1, 2, 2]
    (row,) = [r for r in json.loads(mt(c, "scope", "list", "--json").stdout) if r["scope"] == "east"]
    assert row["logs"] == [1, 2] and row["homes"] == ["west"] and row["not_on_its_logs"] == 0
    with Client(zk=c.zk_hosts, timeout=30) as db:
        for i in range(40):
            db.put("e", f"grown{i}", "k", str(i).encode())
        assert [g.value if (g := db.get("e", f"grown{i}", "k")) else None for i in range(40)] == \
            [str(i).encode() for i in range(40)]
    assert status(c, 2)["last"] >= 0  # some of them went through log 2
