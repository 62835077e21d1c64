"""Storage nodes as a pool (issue 32): six storage nodes, each shard on three of them
(catalog/replica_sets.py), over a pool of five log servers. Each node holds and applies
about half the shards, answers only for them, and the logs are truncated below the
positions of each log's holders."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from catalog import registry, replica_sets, usage
from catalog.routing import shard_of
from cluster import Cluster
from log import zk as zkpaths
from log.client import LogClient
from midtown import Client
from midtown_pb import kv_pb2 as pb
from midtown_pb import kv_pb2_grpc
from tests.integration.conftest import started, storage_status, wait_for
from tests.integration.test_kv import run_history
from tests.linearizability import check_per_key

pytestmark = pytest.mark.integration
NODES, SHARDS = 6, 64


@pytest.fixture(scope="module")
def six(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    env = {"MIDTOWN_POSITION_INTERVAL_S": "0.5", "MIDTOWN_USAGE_INTERVAL_S": "1"}
    with started(Path(tmp_path_factory.mktemp("six")) / "c", env, storage_nodes=NODES,
                 log_server_count=5, replicas=3, logs=6, kv_logs=3, coordinators=2) as c:
        c.create_dataset("t")
        yield c


def _sets(c: Cluster) -> tuple[registry.ReplicaSets, list[dict]]:
    zk = zkpaths.connect(c.zk_hosts)
    try:
        kv = registry.read_kv(zk)
        assert kv is not None
        return registry.read_replica_sets(zk, kv), registry.replica_sets_history(zk)
    finally:
        zk.stop()
        zk.close()


def _counted_since(c: Cluster, at_ms: int, nodes: Any) -> bool:
    """Every one of `nodes` has published a usage count begun after `at_ms`."""
    zk = zkpaths.connect(c.zk_hosts)
    try:
        reports = usage.read_reports(zk)
    finally:
        zk.stop()
        zk.close()
    return all(n in reports and reports[n].at_ms > at_ms for n in nodes)


def _stub(c: Cluster, node: int) -> kv_pb2_grpc.StorageStub:
    return kv_pb2_grpc.StorageStub(grpc.insecure_channel(c.procs[f"storage-{node}"].addr))


def _scan(c: Cluster, node: int, dataset_id: str, shard: int) -> list[tuple[bytes, bytes, bytes]] | str:
    """A node's copy of one shard of a dataset (or the code it refused with)."""
    try:
        msgs = list(_stub(c, node).ScanShard(pb.StorageScanShardRequest(
            dataset=dataset_id, shard=shard, page=1000), timeout=10))
    except grpc.RpcError as e:
        return f"{e.code().name}: {e.details()}"
    return sorted((i.partition_key, i.local_key, i.value.value) for m in msgs for i in m.items)


def test_each_node_holds_half_the_shards_and_answers_for_those_only(six: Cluster) -> None:
    sets, history = _sets(six)
    assert sets.version >= 0 and sets.replicas == 3
    held = {n: sets.shards_of(n) for n in range(NODES)}
    assert all(31 <= len(h) <= 33 for h in held.values()), held
    assert len(history) == 1 and history[0]["sets"] == [list(s) for s in sets.sets]
    d = six.create_dataset("half")
    keys = [f"k{i}" for i in range(200)]
    with Client(six.coordinator_addrs, timeout=20) as db:
        for k in keys:
            db.put("half", k, "l", k.encode())
        for k in keys[::7]:
            got = db.get("half", k, "l")
            assert got is not None and got.value == k.encode()
        by_shard: dict[int, list[str]] = {}
        for k in keys:
            by_shard.setdefault(shard_of(d.id, k.encode(), SHARDS), []).append(k)
        # Wait until every replica has applied the last write (a strong read at each).
        for shard, ks in sorted(by_shard.items()):
            want = sorted((k.encode(), b"l", k.encode()) for k in ks)
            for node in range(NODES):
                if node in sets.of(shard):
                    wait_for(lambda: _scan(six, node, d.id, shard) == want, 30,
                             f"node {node} to hold shard {shard}")
                else:
                    got = _scan(six, node, d.id, shard)
                    assert got == f"FAILED_PRECONDITION: storage node {node} does not hold shard {shard}", \
                        (node, shard, got)
    # Each node's status covers its own shards and the bytes it holds; replicas at one
    # position agree.
    def status() -> list[dict]:
        out = subprocess.run([sys.executable, "-m", "cli", "node", "status", "--zk", six.zk_hosts,
                              "--json"], capture_output=True, text=True, timeout=60)
        assert out.returncode in (0, 1), out.stdout + out.stderr
        return json.loads(out.stdout)  # type: ignore[no-any-return]
    rows = wait_for(lambda: (r := status()) and all(x["bytes"] and not x["diverged_shards"] for x in r) and r,
                    60, "every node to count what it holds, with no divergence")
    assert {r["node"]: r["shards"] for r in rows} == {n: len(h) for n, h in held.items()}
    assert all(r["state"] == "up" for r in rows)


def test_a_log_is_truncated_while_nodes_without_its_shards_are_down(six: Cluster) -> None:
    """The truncation of a log waits for its shards' holders only. Here every log carries
    a shard of every node, so: a killed node holds back each log, and once it is back and
    caught up, the logs move on."""
    d = six.create_dataset("trunc")
    with Client(six.coordinator_addrs, timeout=20) as db, LogClient(six.zk_hosts) as logs:
        first = {r["log"]: r["first"] for r in logs.status()}
        for i in range(60):
            db.put("trunc", f"p{i}", "l", b"v")
        wait_for(lambda: all(r["first"] > first[r["log"]] for r in logs.status()
                             if r["log"] < six.kv_logs), 60, "every key-value log to be truncated")
    assert d is not None


def test_linearizable_while_a_storage_node_is_killed_and_restarted(six: Cluster) -> None:
    """Hot keys under puts, strong gets, check-and-sets and deletes while a storage node
    that holds their shard is SIGKILLed and started again: every key's history
    linearizes, and the node catches up to equal digests."""
    sets, _ = _sets(six)
    zk = zkpaths.connect(six.zk_hosts)
    try:
        from catalog import datasets
        d = datasets.get(zk, "t")
    finally:
        zk.stop()
        zk.close()
    assert d is not None
    keys = ["h0", "h1", "h2"]
    victim = sets.of(shard_of(d.id, b"h0", SHARDS))[0]

    def disturb() -> None:
        six.kill(f"storage-{victim}")
        import time
        time.sleep(2)
        six.restart(f"storage-{victim}")

    with Client(six.coordinator_addrs, timeout=20) as db:
        history = run_history(db, keys, disturb)
    assert check_per_key(history) == [], "a linearizability violation"
    shard = shard_of(d.id, b"h0", SHARDS)
    wait_for(lambda: _agree(six, shard, sets.of(shard)), 60,
             "the shard's replicas at one position with one digest")


def test_a_node_that_lost_its_disk_is_rebuilt_shard_by_shard(six: Cluster) -> None:
    """A storage node's data directory is lost while the logs were truncated past where it
    starts, and no other node holds every shard it holds (each holds half): started again,
    it takes each of its shards from that shard's replicas (storage_node/rebuild.py) while
    writes go on, then tails the logs. Every one of its shards then agrees with its
    replicas by digest, it holds every key written before and during the rebuild, and a
    counter incremented throughout reads back its count."""
    sets, _ = _sets(six)
    victim = NODES - 1
    covering = [n for n in range(NODES)
                if n != victim and set(sets.shards_of(victim)) <= set(sets.shards_of(n))]
    if covering:  # the first placement deals the shards to nodes in groups: give it one of another group's
        x = next(x for x in range(SHARDS) if not set(sets.of(x)) & {victim, *covering})
        _mt(six, "shard", "move", str(x), "--to", str(victim), "--from", str(sets.of(x)[0]))
        sets, _ = _sets(six)
    mine = set(sets.shards_of(victim))
    assert not any(mine <= set(sets.shards_of(n)) for n in range(NODES) if n != victim)
    d = _dataset(six, "t")
    keys = [f"r{i}" for i in range(120)]
    with Client(six.coordinator_addrs, timeout=20) as db, LogClient(six.zk_hosts) as logs:
        for k in keys:
            db.put("t", k, "l", k.encode())
        wait_for(lambda: all(r["first"] > 0 for r in logs.status() if r["log"] < six.kv_logs), 60,
                 "every key-value log to be truncated")
        six.kill(f"storage-{victim}")
        shutil.rmtree(six.dir / f"storage-{victim}")
        counted = {"n": 0}
        stop = threading.Event()

        def incr() -> None:
            while not stop.is_set():
                db.incr("t", "rebuilt-counter", "n", 1)
                counted["n"] += 1
        writer = threading.Thread(target=incr)
        writer.start()
        try:
            time.sleep(1)
            six.restart(f"storage-{victim}")
            wait_for(lambda: _holds_all(six, victim, mine), 120, "the node to serve its shards again")
            time.sleep(1)  # writes go on while it tails the logs
        finally:
            stop.set()
            writer.join(30)
        # Compared once the writes stopped: replicas are at one position only then.
        wait_for(lambda: all(_agree(six, sh, sets.of(sh)) for sh in sorted(mine)), 120,
                 "every shard of the rebuilt node to agree with its replicas")
        assert db.incr("t", "rebuilt-counter", "n", 0) == counted["n"] > 0  # each acknowledged once
    log = (six.dir / "logs" / f"storage-{victim}.log").read_text(errors="replace")
    assert "rebuilt shard by shard" in log, log[-2000:]
    for sh in sorted(mine):
        want = sorted((k.encode(), b"l", k.encode()) for k in keys
                      if shard_of(d.id, k.encode(), SHARDS) == sh)
        got_rows = _scan(six, victim, d.id, sh)
        assert isinstance(got_rows, list), got_rows
        assert [r for r in got_rows if r[0].startswith(b"r") and r[1] == b"l"] == want, sh


def _holds_all(c: Cluster, node: int, shards: set[int]) -> bool:
    """Whether `node` answers its Status call listing each of `shards`."""
    st = storage_status(c.procs[f"storage-{node}"].addr)
    return st is not None and shards <= {s.shard for s in st.shards}


def _agree(c: Cluster, shard: int, nodes: tuple[int, ...]) -> bool:
    """Whether `nodes` all hold `shard` at one position with one digest."""
    states = set()
    for n in nodes:
        try:
            st = _stub(c, n).Status(pb.NodeStatusRequest(), timeout=5)
        except grpc.RpcError:
            return False
        mine = {s.shard: (s.position, s.digest) for s in st.shards}
        if shard not in mine:
            return False
        states.add(mine[shard])
    return len(states) == 1


def _dataset(c: Cluster, name: str) -> Any:
    zk = zkpaths.connect(c.zk_hosts)
    try:
        from catalog import datasets
        return datasets.get(zk, name)
    finally:
        zk.stop()
        zk.close()


def _slow_move(c: Cluster, shard: int, dest: int, leaving: int) -> subprocess.Popen[str]:
    """`midtown shard move` at 0.5 MB/s, started: once the move is recorded in ZooKeeper."""
    p = subprocess.Popen([sys.executable, "-m", "cli", "shard", "move", str(shard), "--to", str(dest),
                          "--from", str(leaving), "--rate", "0.5", "--zk", c.zk_hosts, "--json",
                          "--timeout", "120"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    zk = zkpaths.connect(c.zk_hosts)
    try:
        wait_for(lambda: registry.read_moves(zk).get(shard) is not None, 30, "the move to start")
    finally:
        zk.stop()
        zk.close()
    return p


# The whole-cluster simulation checks this in every seed (tests/sim/nodes.py: moves by the
# real mover while storage nodes are killed and lose power, sources among them; every shard
# ends on its replicas, each equal to the model; the nodes that left drop the shard):
# make soak runs it.
@pytest.mark.moved_to_sim
def test_a_shard_moves_online_while_its_source_is_killed_mid_copy(six: Cluster) -> None:
    """`midtown shard move` adds a replica to a shard and takes another out while puts,
    strong gets, check-and-sets and deletes go on on the shard's keys, and the replica
    that leaves, the one the copy comes from first, is SIGKILLed while it sends it: the
    copy is taken from another replica, every key's history linearizes, the new replica
    set is the old one with the destination for the leaving node (written in the sets'
    history), its replicas agree, and the node that left drops the shard."""
    d = _dataset(six, "t")
    shard = shard_of(d.id, b"m0", SHARDS)
    keys = [k for k in (f"m{i}" for i in range(400)) if shard_of(d.id, k.encode(), SHARDS) == shard][:3]
    before, _ = _sets(six)
    holders = before.of(shard)
    leaving, dest = holders[0], next(n for n in range(NODES) if n not in holders)
    with Client(six.coordinator_addrs, timeout=20) as db:
        for i in range(30):  # 1.5 MB of values (and as much of their first outcomes) to copy
            db.put("t", keys[0], f"bulk{i}", bytes([i]) * 50_000)
        moved: dict[str, Any] = {}

        def disturb() -> None:
            p = _slow_move(six, shard, dest, leaving)
            time.sleep(1.5)  # the source sends 3 MB at 0.5 MB/s: it is still sending
            six.kill(f"storage-{leaving}")
            out, err = p.communicate(timeout=150)
            assert p.returncode == 0, out + err
            moved.update(json.loads(out))
            six.restart(f"storage-{leaving}")
        history = run_history(db, keys, disturb)
    assert check_per_key(history) == [], "a linearizability violation"
    print("move:", moved)  # copy_source: where the copy came from in the end
    after, changes = _sets(six)
    assert after.of(shard) == tuple(sorted({*holders, dest} - {leaving}))
    assert moved["replicas"] == list(after.of(shard)) and moved["copied_keys"] > 60
    assert [c["sets"][shard] for c in changes[-2:]] == [sorted({*holders, dest}), list(after.of(shard))]
    assert after.version == before.version + 2  # joined, then done
    wait_for(lambda: _agree(six, shard, after.of(shard)), 60,
             "the new replicas at one position with one digest")
    with Client(six.coordinator_addrs, timeout=20) as db:
        got = db.get("t", keys[0], "bulk29")
        assert got is not None and got.value == bytes([29]) * 50_000
    # The node that left drops its copy (at its restart, or its next look at the sets).
    wait_for(lambda: _scan(six, leaving, d.id, shard).startswith("FAILED_PRECONDITION"), 30,  # type: ignore[union-attr]
             "the node that left to refuse the shard")


def test_a_move_whose_destination_paused_mid_copy_reports_what_was_copied(six: Cluster) -> None:
    """The destination of a move is SIGSTOPped while it takes the copy in: the mover's call
    fails (keepalive), the destination finishes the copy by itself once it resumes, and the
    mover's next call is told the copy is installed already. `shard move --json` reports
    that copy's keys and bytes (it reported 0 bytes, issue 48), and the copy's bytes are
    those of every key family the shard holds: more than its values. A watch on the sets,
    as each storage node keeps (catalog/registry.py watch_replica_sets), is told of them."""
    six.create_dataset("paused")
    d = _dataset(six, "paused")
    shard = shard_of(d.id, b"q0", SHARDS)
    key = next(k for k in (f"q{i}" for i in range(400)) if shard_of(d.id, k.encode(), SHARDS) == shard)
    holders = _sets(six)[0].of(shard)
    dest = next(n for n in range(NODES) if n not in holders)
    with Client(six.coordinator_addrs, timeout=20) as db:
        for i in range(30):  # 1.5 MB of values (and more of their change history) to copy
            db.put("paused", key, f"bulk{i}", bytes([i]) * 50_000)
    seen: list[int] = []  # the versions a watch on the sets was told of (storage nodes keep one)
    zk = zkpaths.connect(six.zk_hosts)
    try:
        registry.watch_replica_sets(zk, lambda sets: seen.append(sets.version))
        p = _slow_move(six, shard, dest, holders[0])
        time.sleep(1.0)  # the copy is 3 MB or more at 0.5 MB/s: it is coming in
        six.signal(f"storage-{dest}", signal.SIGSTOP)
        try:
            time.sleep(4.0)  # the mover's call fails meanwhile (keepalive: about 2 s)
        finally:
            six.signal(f"storage-{dest}", signal.SIGCONT)
        out, err = p.communicate(timeout=150)
        assert p.returncode == 0, out + err
        moved = json.loads(out)
        assert moved["copied_keys"] > 30 and moved["copied_bytes"] > 1_500_000, moved
        assert moved["copy_source"], moved
        # The watch was told of the sets before the move, then of the move's last (done).
        after = _sets(six)[0].version
        wait_for(lambda: seen[-1] == after, 10, "the watch to see the move's sets")
        assert seen[0] == after - 2, seen  # joined, then done (a watch may skip the middle one)
    finally:
        zk.stop()
        zk.close()


def test_eventual_datasets_live_on_their_shards_replicas(six: Cluster) -> None:
    """An eventual dataset's write goes to its shard's three replicas (a majority of them
    acknowledges), never to the other nodes; a read takes a majority of the same three.
    Run after a move whose destination lost its session: each node knows the sets that move
    wrote from its watch on them, not at its next bookkeeping round (which failed once here
    with a replica refusing its shard: storage_node/node.py start)."""
    d = six.create_dataset("ev", consistency="eventual")
    sets, _ = _sets(six)
    with Client(six.coordinator_addrs, timeout=20) as db:
        for i in range(40):
            db.put("ev", f"e{i}", "l", b"x%d" % i)
        for i in range(40):
            got = db.get("ev", f"e{i}", "l")
            assert got is not None and got.value == b"x%d" % i
    for i in range(40):
        shard = shard_of(d.id, f"e{i}".encode(), SHARDS)
        req = pb.LwwReadRequest(dataset=d.id, shard=shard, partition_key=f"e{i}".encode(), local_key=b"l")
        holding = 0
        for node in range(NODES):
            if node in sets.of(shard):
                holding += len(_stub(six, node).LwwRead(req, timeout=5).items)
            else:  # it refuses: another node holds the shard
                with pytest.raises(grpc.RpcError) as e:
                    _stub(six, node).LwwRead(req, timeout=5)
                assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
                assert f"does not hold shard {shard}" in (e.value.details() or "")
        assert holding >= 2, (i, shard)  # a majority of its replicas


def test_bad_moves_are_refused_naming_the_argument(six: Cluster) -> None:
    sets, _ = _sets(six)
    shard = 5
    holders = sets.of(shard)
    outside = next(n for n in range(NODES) if n not in holders)

    def mt(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "cli", "shard", *args, "--zk", six.zk_hosts],
                              capture_output=True, text=True, timeout=60)
    for args, said in [(["move", "99", "--to", "1"], "SHARD: 99, this cluster has shards 0..63"),
                       (["move", str(shard), "--to", str(holders[0])],
                        f"--to: node {holders[0]} holds shard"),
                       (["move", str(shard), "--to", "17"], "--to: storage node 17 is not a member"),
                       (["move", str(shard), "--to", str(outside), "--from", str(outside)],
                        f"--from: node {outside} does not hold shard {shard}"),
                       (["move", str(shard), "--to", str(outside), "--rate", "-1"], "--rate: -1"),
                       (["abort", str(shard)], f"SHARD: no move of shard {shard} is under way")]:
        p = mt(*args)
        assert p.returncode == 2 and said in p.stderr and "Traceback" not in p.stderr, (args, p.stderr)
    assert _sets(six)[0] == sets  # nothing changed
    # The storage nodes' own call refuses a copy no move asks for, and bad rates.
    with pytest.raises(grpc.RpcError) as e:
        _stub(six, outside).CopyShard(pb.CopyShardRequest(shard=shard, prefer_source=-1), timeout=10)
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert f"no move of shard {shard} to storage node {outside}" in (e.value.details() or "")
    for rate in (-1.0, float("nan"), 1e9):
        with pytest.raises(grpc.RpcError) as e:
            _stub(six, outside).CopyShard(pb.CopyShardRequest(shard=shard, rate_mb_s=rate), timeout=10)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "rate_mb_s" in (e.value.details() or "")
    with pytest.raises(grpc.RpcError) as e:
        _stub(six, outside).CopyShard(pb.CopyShardRequest(shard=SHARDS), timeout=10)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "shard" in (e.value.details() or "")


def test_three_nodes_grow_to_four_then_one_is_decommissioned_added_back_and_rebalanced(
        tmp_path: Path) -> None:
    """The default shape first: three storage nodes and three replicas, so no replica sets
    are written and each node holds every shard. `node add 3` places the shards on the
    three (nothing moves) before the new node joins holding none; started, `cluster
    rebalance` moves six shards onto it (8 shards x 3 copies over 4 nodes) while writes go
    on. Then `node decommission 3` moves its six shards back to the others and takes it
    out; added back, a dry run of `cluster rebalance` shows six moves to it, and `node add 3
    --rebalance` makes those. Every key and count reads back throughout, each shard's
    replicas agree, and a node that gave a shard up drops it."""
    # The nodes read the sets again every 5 s (with their positions), besides their watch on
    # them: a node whose watch lags (a lost session) still sees itself in its set for a while.
    with started(tmp_path / "c", {"MIDTOWN_POSITION_INTERVAL_S": "5", "MIDTOWN_USAGE_INTERVAL_S": "1"},
                 storage_nodes=3, shards=8, logs=4, kv_logs=1, coordinators=1) as c:
        c.create_dataset("b")
        assert _sets(c)[0].version < 0  # every node holds every shard
        # 40 keys, and more until every shard holds one: each move below has bytes to weigh
        # (the dataset's id is new each run, and 40 keys left a shard empty once in CI).
        b_id = _dataset(c, "b").id
        keys = [f"k{i}" for i in range(40)]
        keys += [next(f"k{i}" for i in range(40, 100_000) if shard_of(b_id, f"k{i}".encode(), 8) == s)
                 for s in sorted(set(range(8)) - {shard_of(b_id, k.encode(), 8) for k in keys})]

        def mt(*args: str) -> Any:
            return _mt(c, *args)

        def all_read(db: Client) -> None:
            for k in keys:
                got = db.get("b", k, "l")
                assert got is not None and got.value == k.encode(), k

        def agree() -> bool:
            sets, _ = _sets(c)
            return all(_agree(c, s, sets.of(s)) for s in range(8))
        with Client(c.coordinator_addrs, timeout=20) as db:
            for k in keys:
                db.put("b", k, "l", k.encode())
            # Three grow to four.
            assert mt("node", "add", "3")["storage_nodes"] == [0, 1, 2, 3]
            sets, history = _sets(c)
            assert sets.version >= 0 and sets.replicas == 3
            assert all(sets.of(s) == (0, 1, 2) for s in range(8)) and "storage node 3" in history[-1]["why"]
            c.add_storage_process()
            stop = threading.Event()
            counted = [0]

            def write() -> None:
                while not stop.is_set():
                    db.incr("b", "counter", "n")
                    counted[0] += 1
            w = threading.Thread(target=write, daemon=True)
            w.start()
            try:
                grown = mt("cluster", "rebalance")
            finally:
                stop.set()
                w.join(timeout=30)
            assert len(grown["moves"]) == 6 and all(m["to"] == 3 for m in grown["moves"])
            assert grown["shards_per_node"] == {"0": 6, "1": 6, "2": 6, "3": 6}
            assert grown["dropped_copies"] == 0
            all_read(db)
            assert db.incr("b", "counter", "n", 0) == counted[0] > 0  # each acknowledged once
            sets, _ = _sets(c)
            d = _dataset(c, "b")
            for n in range(4):  # a node answers for its shards, and drops the others
                for s in range(8):
                    if n not in sets.of(s):
                        wait_for(lambda: _scan(c, n, d.id, s) == f"FAILED_PRECONDITION: storage node {n} "
                                 f"does not hold shard {s}", 30, f"node {n} to drop shard {s}")
            wait_for(agree, 60, "every shard's replicas at one position with one digest")

            # The plans weigh each shard's bytes as the nodes last counted them: wait for a
            # count from now, so the dry run and the run below see the same sizes.
            counted_ms = int(time.time() * 1000)
            wait_for(lambda: _counted_since(c, counted_ms, range(4)), 30, "a usage count of every node")
            out = mt("node", "decommission", "3")
            assert len(out["moves"]) == 6 and all(m["from"] == 3 for m in out["moves"])
            assert out["removed"] == 3 and out["shards_per_node"] == {"0": 8, "1": 8, "2": 8}
            sets, _ = _sets(c)
            assert all(3 not in sets.of(s) for s in range(8))
            all_read(db)
            mt("node", "add", "3")
            # The shards moved off node 3 weigh what their new holders count next (node 3's
            # report went with it): wait for that count, under load too.
            counted_ms = int(time.time() * 1000)
            wait_for(lambda: _counted_since(c, counted_ms, range(3)), 30, "a usage count of nodes 0-2")
            dry = mt("cluster", "rebalance", "--dry-run")
            assert len(dry["moves"]) == 6 and all(m["to"] == 3 for m in dry["moves"]) and dry["dry_run"]
            assert _sets(c)[0] == sets  # a dry run moves nothing
            assert sum(dry["bytes_per_node"].values()) > 0 and all(m["shard_bytes"] > 0 for m in dry["moves"])
            # Out again (it holds nothing, so it may go), and back with --rebalance: the moves
            # the dry run showed.
            mt("node", "remove", "3")
            done = mt("node", "add", "3", "--rebalance")
            assert [(m["shard"], m["from"], m["to"]) for m in done["moves"]] == \
                [(m["shard"], m["from"], m["to"]) for m in dry["moves"]]
            assert done["shards_per_node"] == dry["shards_per_node"] == {"0": 6, "1": 6, "2": 6, "3": 6}
            assert done["bytes_per_node"] == dry["bytes_per_node"]
            assert mt("cluster", "rebalance")["moves"] == []  # even already
            all_read(db)
            # A shard leaves a node and comes straight back to it, with writes going on:
            # the node's view of the sets may still name it when the copy comes in.
            shard = shard_of(d.id, b"k0", 8)
            sets, _ = _sets(c)
            a, b = sets.of(shard)[0], next(n for n in range(4) if n not in sets.of(shard))
            stop = threading.Event()

            def incr() -> None:
                while not stop.is_set():
                    db.incr("b", "k0", "n")
            w = threading.Thread(target=incr, daemon=True)
            w.start()
            try:
                mt("shard", "move", str(shard), "--to", str(b), "--from", str(a))
                mt("shard", "move", str(shard), "--to", str(a), "--from", str(b))
            finally:
                stop.set()
                w.join(timeout=30)
            assert _sets(c)[0].of(shard) == sets.of(shard)
            all_read(db)
        wait_for(agree, 60, "every shard's replicas at one position with one digest")


def test_a_cluster_made_before_replica_sets_is_placed_on_r_nodes_each() -> None:
    """Every member holds every shard and no sets are written: with R members or fewer that
    is the placement (nothing to write); with more, each shard keeps R of the nodes that
    hold it, evenly, so nothing is copied, only dropped."""
    assert replica_sets.first_sets(8, [0, 1, 2], 3) is None
    sets = replica_sets.first_sets(10, [0, 1, 2, 3, 4], 3)
    assert sets is not None and all(len(s) == 3 for s in sets.sets)
    counts = replica_sets.counts(sets)
    assert sorted(counts) == [0, 1, 2, 3, 4] and all(c == 6 for c in counts.values())


def _mt(c: Cluster, *args: str) -> Any:
    p = subprocess.run([sys.executable, "-m", "cli", *args, "--zk", c.zk_hosts, "--json"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    return json.loads(p.stdout)


def test_a_move_under_way_is_shown_kept_to_its_arguments_and_given_up(six: Cluster) -> None:
    """A move recorded but not driven (its mover died at the start): `shard list` and
    `node status` show it, a different move of the shard is refused naming the one under
    way, `shard abort` gives it up, and the replica sets never changed."""
    from catalog.shard_moves import Move

    sets, _ = _sets(six)
    shard = 9
    holders = sets.of(shard)
    outside = next(n for n in range(NODES) if n not in holders)
    zk = zkpaths.connect(six.zk_hosts)
    try:
        registry.start_move(zk, Move(shard, outside, holders[0]), sets.version)
    finally:
        zk.stop()
        zk.close()

    def mt(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "cli", *args, "--zk", six.zk_hosts, "--json"],
                              capture_output=True, text=True, timeout=60)
    listed = json.loads(mt("shard", "list").stdout)["shards"][shard]
    assert listed["move"] == {"to": outside, "from": holders[0], "phase": "copying"}
    status = {r["node"]: r["moving"] for r in json.loads(mt("node", "status").stdout)}
    assert status[outside] == 1 and status[holders[0]] == 1 and sum(status.values()) == 2
    other = next(n for n in range(NODES) if n not in holders and n != outside)
    p = mt("shard", "move", str(shard), "--to", str(other), "--from", str(holders[1]))
    assert p.returncode == 2, p.stderr
    assert f"a move of shard {shard} to node {outside} from node {holders[0]}" in p.stderr
    assert json.loads(mt("shard", "abort", str(shard)).stdout) == {"aborted": shard, "to": outside,
                                                                  "phase": "copying"}
    assert json.loads(mt("shard", "list").stdout)["shards"][shard]["move"] is None
    assert _sets(six)[0] == sets


def test_a_copy_added_without_from_joins_holds_the_data_and_answers(six: Cluster) -> None:
    """`shard move SHARD --to N` with no --from adds a copy (as `cluster rebalance
    --copies-per-dc` does for a data center that lacks one): the node joins the set beside
    the three, holds the shard's data at one position and digest with them, and answers for
    it; the others keep theirs. (Last in the module: the shard keeps four copies.)"""
    d = _dataset(six, "t")
    shard = 9
    keys = [k for k in (f"c{i}" for i in range(400)) if shard_of(d.id, k.encode(), SHARDS) == shard][:2]
    before, _ = _sets(six)
    holders = before.of(shard)
    dest = next(n for n in range(NODES) if n not in holders)
    with Client(six.coordinator_addrs, timeout=20) as db:
        for i, k in enumerate(keys):
            db.put("t", k, "v", b"added%d" % i)
    p = subprocess.run([sys.executable, "-m", "cli", "shard", "move", str(shard), "--to", str(dest),
                        "--zk", six.zk_hosts, "--json"], capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stdout + p.stderr
    after, _ = _sets(six)
    assert after.of(shard) == tuple(sorted({*holders, dest}))
    assert json.loads(p.stdout)["replicas"] == list(after.of(shard))
    wait_for(lambda: _agree(six, shard, after.of(shard)), 60,
             "the four copies at one position with one digest")
    got = _scan(six, dest, d.id, shard)
    assert isinstance(got, list)
    assert {(k.encode(), b"v", b"added%d" % i) for i, k in enumerate(keys)} <= set(got)
