"""The `host` layout (coordinator.host): a log server, a storage node and a coordinator in one
process per machine, calling each other directly. A host is SIGKILLed whole, as a
machine would fail: the log writer, a storage replica and a coordinator at once."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from cluster import Cluster, pid_alive
from log import zk as logzk
from log.client import LogClient
from midtown import AsyncClient, Client, errors
from tests.integration.conftest import started, wait_for
from tests.integration.test_kv import _converged, run_history, writer_of
from tests.linearizability import check_per_key

pytestmark = pytest.mark.integration


@pytest.fixture
def hosts(tmp_path: Path) -> Iterator[Cluster]:
    with started(tmp_path / "hosts", layout="host") as c:
        c.create_dataset("t")
        yield c


def test_three_processes_serve_every_role(hosts: Cluster) -> None:
    assert [p.kind for p in hosts.procs.values()] == ["zookeeper", "host", "host", "host"]
    assert len(hosts.coordinator_addrs) == 3
    # Every operation kind, through the coordinator on the writer's host (in-process
    # append, tail and answer) and through another one (over gRPC).
    w = writer_of(hosts, "t", "p")
    near = hosts.procs[f"host-{w}"].addr
    far = next(p.addr for p in hosts.playing("coordinator") if p.addr != near)
    for addr in (near, far):
        with Client(addr, timeout=15) as db:
            v = db.put("t", "p", addr, b"1")
            assert db.get("t", "p", addr).value == b"1"
            assert db.get("t", "p", addr, consistency="eventual") is not None
            assert db.cas("t", "p", addr, b"2", expected=b"1").succeeded
            assert not db.cas("t", "p", addr, b"3", expected=b"1").succeeded
            assert db.incr("t", "p", addr + "n", 5) == 5
            got = db.get("t", "p", addr)
            assert got is not None and got.version > v
    # The writer's host took the direct paths (its metrics count them).
    metrics = urllib.request.urlopen(
        f"http://127.0.0.1:{hosts.procs[f'host-{w}'].metrics_port}/metrics", timeout=10).read().decode()
    for path in ("append", "tail", "answer", "read_index", "read"):
        assert _counted(metrics, path) > 0, f"no in-process {path}"
    # Records through the writer's coordinator are answered by its own storage node: the
    # other replicas answer one in DIGEST_SAMPLE (for the digest comparison), not each one
    # (before, at least one Deliver call per record came from another host).
    before = _kv_requests(hosts, f"host-{w}", "deliver")
    with Client(near, timeout=15) as db:
        for _ in range(64):
            db.incr("t", "p", "counter", 1)
    # The other replicas answer as they apply, after the client had its answer: count once
    # every replica applied all (before, the count read at once was 0 half the time).
    wait_for(lambda: _converged(hosts), 30, "every replica at the same positions and digests")
    delivered = wait_for(lambda: _kv_requests(hosts, f"host-{w}", "deliver") - before, 10,
                         "the sampled records' answers from the other replicas")
    assert 1 <= delivered <= 64 // 4, delivered
    # A watch through another host's coordinator is served by the storage node beside the
    # log's writer, which applies as the writer commits (the others' Read streams linger).
    streams = {h: _counter(hosts, h, "midtown_storage_watch_streams_total") for h in _served(hosts)}
    with Client(far, timeout=15) as db:
        watcher = db.watch("t")  # (from "now": when the first change is asked for)
        later = threading.Timer(1.0, lambda: db.put("t", "p", "watched", b"1"))
        later.start()
        try:
            assert next(iter(watcher)).local_key == b"watched"
        finally:
            later.join()
            watcher.close()
    served = {h: _counter(hosts, h, "midtown_storage_watch_streams_total") - n for h, n in streams.items()}
    assert served[f"host-{w}"] >= 1 and sum(served.values()) == served[f"host-{w}"], served


def _counter(hosts: Cluster, name: str, metric: str) -> float:
    return sum(float(line.split()[-1]) for line in _metrics(hosts, name).splitlines()
               if line.startswith(metric + " ") or line.startswith(metric + "{"))


def _counted(metrics: str, path: str) -> float:
    for line in metrics.splitlines():
        if line.startswith(f'midtown_in_process_calls_total{{path="{path}"}}'):
            return float(line.split()[-1])
    return 0.0


def _metrics(hosts: Cluster, name: str) -> str:
    port = hosts.procs[name].metrics_port
    return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()


def _kv_requests(hosts: Cluster, name: str, method: str = "") -> float:
    """KV requests (of `method`, or all) the host's coordinator has answered; a Deliver
    call carries answers from storage nodes in other processes."""
    return sum(float(line.split()[-1]) for line in _metrics(hosts, name).splitlines()
               if line.startswith("midtown_kv_requests_total{")
               and (not method or f'method="{method}"' in line))


def _served(hosts: Cluster, method: str = "") -> dict[str, float]:
    """KV requests (of one method, or all) each host's coordinator has answered."""
    return {name: _kv_requests(hosts, name, method) for name, proc in hosts.procs.items()
            if proc.kind == "host"}


def test_clients_send_each_key_to_the_coordinator_beside_its_writer(hosts: Cluster) -> None:
    """Lever 3: a Client given ZooKeeper sends a key's operations to the coordinator in the
    process of its log's writer; when that host dies the client goes on through the others
    and then follows the new writer."""
    with Client(zk=hosts.zk_hosts, timeout=20) as db:
        w = writer_of(hosts, "t", "r0")
        near = hosts.procs[f"host-{w}"].addr
        wait_for(lambda: db.coordinator_for("t", "r0") == near, 15, "the route to the writer's coordinator")
        with pytest.raises(errors.InvalidArgument, match="dataset"):
            db.coordinator_for(["t"], "r0")  # type: ignore[arg-type]
        with pytest.raises(errors.InvalidArgument, match="partition"):
            db.coordinator_for("t", 5)  # type: ignore[arg-type]
        before, reads = _served(hosts, "put"), _served(hosts, "get")
        for i in range(30):
            db.put("t", f"r{i}", "x", b"v")  # one thread: each its own call
            assert db.get("t", f"r{i}", "x").value == b"v"
        after = _served(hosts, "put")
        assert after[f"host-{w}"] - before[f"host-{w}"] >= 30
        assert all(after[h] == before[h] for h in after if h != f"host-{w}"), (before, after)
        # strong gets are routed too: the writer answers them by its read lease
        got = {h: n - reads[h] for h, n in _served(hosts, "get").items()}
        assert got[f"host-{w}"] >= 30, got
        assert _strong_reads(hosts, f"host-{w}", "lease") > 0

        async def coroutines() -> None:  # AsyncClient routes the same way
            async with AsyncClient(zk=hosts.zk_hosts, timeout=20) as adb:
                deadline = time.monotonic() + 15
                while adb.coordinator_for("t", "r0") != near and time.monotonic() < deadline:
                    await adb.put("t", "r0", "warm", b"v")
                    await asyncio.sleep(0.1)
                start = _served(hosts)
                await asyncio.gather(*(adb.put("t", f"a{i}", "x", b"v") for i in range(20)))
                end = _served(hosts)
                assert end[f"host-{w}"] > start[f"host-{w}"]
                assert all(end[h] == start[h] for h in end if h != f"host-{w}"), (start, end)

        asyncio.run(coroutines())

        hosts.kill(f"host-{w}")
        assert db.put("t", "r0", "x", b"after") > 0  # through another coordinator
        assert db.get("t", "r0", "x").value == b"after"
        wait_for(lambda: writer_of(hosts, "t", "r0") != w, 60, "a new writer")
        w2 = writer_of(hosts, "t", "r0")
        wait_for(lambda: db.coordinator_for("t", "r0") == hosts.procs[f"host-{w2}"].addr, 15,
                 "the route to the new writer's coordinator")


def _writer_now(hosts: Cluster, key: str) -> int | None:
    """The writer of `key`'s log, or None while it has none."""
    try:
        return writer_of(hosts, "t", key)
    except AssertionError:
        return None


def _strong_reads(hosts: Cluster, name: str, path: str) -> float:
    """Strong reads the host's coordinator answered by `path` (lease, read_index, log)."""
    return sum(float(line.split()[-1]) for line in _metrics(hosts, name).splitlines()
               if line.startswith(f'midtown_strong_reads_total{{path="{path}"}}'))


def test_a_writer_paused_past_its_lease_answers_no_stale_read(hosts: Cluster) -> None:
    """The read lease (log/lease.py): the coordinator beside a log's writer answers strong
    reads by the writer's lease, with no round to its followers. The writer's host is
    paused (SIGSTOP) far past its lease; another host takes the log over and acknowledges
    a put; a strong get sent to the paused host meanwhile is answered when it resumes with
    the new value, never with what the old lease covered. (Here the takeover outlasts the
    old writer's ZooKeeper session too, which also stops it on resuming: a broken lease
    that this test alone would miss is caught by the simulation, tests/sim/test_log_sim.py.)"""
    w = writer_of(hosts, "t", "k")
    name = f"host-{w}"
    near = hosts.procs[name].addr
    far = next(p.addr for p in hosts.playing("coordinator") if p.addr != near)
    got: dict[str, object] = {}
    with Client(near, timeout=60) as db:
        db.put("t", "p", "k", b"old")
        wait_for(lambda: db.get("t", "p", "k").value == b"old" and _strong_reads(hosts, name, "lease") > 0,
                 15, "strong reads answered by the writer's lease")
        by_lease = _strong_reads(hosts, name, "lease")
        reader = threading.Thread(target=lambda: got.update(v=db.get("t", "p", "k")))
        hosts.signal(name, signal.SIGSTOP)
        try:
            wait_for(lambda: _writer_now(hosts, "k") not in (None, w), 60, "another host takes the log over")
            with Client(far, timeout=60) as other:
                other.put("t", "p", "k", b"new")  # acknowledged by the new writer
            reader.start()
            time.sleep(0.2)  # the get waits in the stopped process, past its lease
        finally:
            hosts.signal(name, signal.SIGCONT)
        reader.join(70)
    assert got["v"] is not None and got["v"].value == b"new", got  # type: ignore[attr-defined]
    assert _strong_reads(hosts, name, "lease") == by_lease, "the old writer answered by a lease it lost"


def test_the_node_beside_a_new_writer_tails_it_in_process(hosts: Cluster) -> None:
    """The writer's host paused past its ZooKeeper session: the other hosts' storage nodes
    had Read streams open on its log server, silent while it is stopped, and served by it
    as a follower once it resumes. The storage node beside the new writer leaves that
    stream for the writer in its own process (whose coordinator's records it then answers
    beside), while the old host is still stopped and after it resumes."""
    w = writer_of(hosts, "t", "p")
    name, path = f"host-{w}", f"{logzk.SERVERS}/{w}"

    def new_writer() -> tuple[int] | None:
        """(the new writer,): a one-tuple, as host 0 is a writer too (wait_for wants a truthy value)."""
        try:
            now = writer_of(hosts, "t", "p")
        except AssertionError:  # none named yet
            return None
        return (now,) if now != w else None

    def tails_in_process(db: Client, host: int, before: float) -> bool:
        db.put("t", "p", "after", b"v")
        return _counted(_metrics(hosts, f"host-{host}"), "tail") > before

    with LogClient(hosts.zk_hosts) as logs, Client(zk=hosts.zk_hosts, timeout=30) as db:
        hosts.signal(name, signal.SIGSTOP)
        try:
            wait_for(lambda: logs.zk.exists(path) is None, 60, f"the session of {name} to expire")
            (w2,) = wait_for(new_writer, 60, "a new writer")
            before = _counted(_metrics(hosts, f"host-{w2}"), "tail")
            wait_for(lambda: tails_in_process(db, w2, before), 30,
                     f"host-{w2}'s storage node to tail its own writer, {name} stopped")
        finally:
            hosts.signal(name, signal.SIGCONT)
        wait_for(lambda: logs.zk.exists(path) is not None, 30, f"{name} to register again")
        (w3,) = wait_for(lambda: (writer_of(hosts, "t", "p"),), 30, "the log's writer")
        before = _counted(_metrics(hosts, f"host-{w3}"), "tail")
        wait_for(lambda: tails_in_process(db, w3, before), 30,
                 f"host-{w3}'s storage node to tail its own writer, {name} back")


def test_no_routes_in_the_split_layout(tmp_path: Path) -> None:
    """With no coordinator beside a log server, a Client picks coordinators as before."""
    with started(tmp_path / "split") as c:
        c.create_dataset("t")
        with Client(zk=c.zk_hosts, timeout=20) as db:
            db.put("t", "p", "l", b"v")
            r = db.endpoints.routes
            assert r is not None
            wait_for(lambda: r.reads >= 2, 15, "routes read")
            assert db.coordinator_for("t", "p") is None
            assert db.get("t", "p", "l").value == b"v"


def test_linearizable_when_hosts_are_killed(hosts: Cluster) -> None:
    """The writer's host (log writer, storage replica and coordinator at once) and then
    another host are SIGKILLed and restarted under concurrent operations; every key's
    history linearizes and the replicas converge."""
    keys = ["h0", "h1", "h2"]
    with Client(zk=hosts.zk_hosts, timeout=20) as db:

        def kills() -> None:
            # One round in the suite; `make soak` runs many (MIDTOWN_SOAK_ROUNDS). The
            # threads share the Client: their operations are coalesced and routed to the
            # writer's host, which dies first.
            for _ in range(int(os.environ.get("MIDTOWN_SOAK_ROUNDS", "1"))):
                time.sleep(2)
                w = writer_of(hosts, "t", keys[0])
                hosts.kill(f"host-{w}")
                time.sleep(3)  # its followers take the log over within a second
                hosts.restart(f"host-{w}")
                time.sleep(3)
                other = f"host-{(w + 1) % 3}"
                hosts.kill(other)
                time.sleep(3)
                hosts.restart(other)
                time.sleep(3)

        history = run_history(db, keys, kills)
    assert check_per_key(history) == []
    wait_for(lambda: _converged(hosts), 60, "every replica at the same positions and digests")


def test_cluster_up_with_the_host_layout(tmp_path: Path) -> None:
    """As a user runs it: `cluster up` (the host layout is the default), data commands,
    status, down."""
    from tests.integration.test_cli import mt

    d = str(tmp_path / "c")
    bad = mt("cluster", "up", "--dir", d, "--layout", "rack", check=False)
    assert bad.returncode != 0 and "--layout" in bad.stderr and "Traceback" not in bad.stderr
    up = json.loads(mt("cluster", "up", "--dir", d, "--detach", "--json").stdout)
    try:
        assert sorted(p["kind"] for p in up["processes"]) == ["host", "host", "host", "zookeeper"]
        assert len(up["coordinators"]) == 3
        mt("dataset", "create", "t", "--dir", d)
        mt("put", "t", "p", "k", "hello", "--dir", d)
        got = json.loads(mt("get", "t", "p", "k", "--dir", d, "--json").stdout)
        assert got["value"] == "hello"
        table = mt("cluster", "status", "--dir", d).stdout
        assert "(coordinator)" in table and "(log)" in table and "(storage)" in table
    finally:
        mt("cluster", "down", "--dir", d)
    for p in up["processes"]:
        assert not pid_alive(p["pid"])


def test_a_host_whose_log_server_left_the_pool_serves_on(tmp_path: Path) -> None:
    """`midtown log-server decommission 3` on four hosts, then host-3 restarted (as the
    supervisor or `cluster restart` does): it runs its storage node and coordinator without
    its log server (once it exited: 'server id 3 is not in the topology', and its shards ran
    on two copies). Its node serves every shard it holds, equal to its peers; its
    coordinator answers; `log-server list` and `log status` no longer name server 3."""
    import subprocess
    import sys

    from catalog import registry
    from runtime import membership

    def mt(*args: str) -> object:
        p = subprocess.run([sys.executable, "-m", "cli", *args, "--zk", c.zk_hosts, "--json"],
                           capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stdout + p.stderr
        return json.loads(p.stdout)

    with started(tmp_path / "c", layout="host", log_server_count=4, storage_nodes=4, kv_logs=1) as c:
        c.create_dataset("t")
        keys = [(f"p{i % 9}", f"k{i}") for i in range(60)]
        with Client(zk=c.zk_hosts, timeout=30) as db:
            for p, k in keys:
                db.put("t", p, k, k.encode())
        out = mt("log-server", "decommission", "3")
        assert out["removed"] and 3 not in out["pool"]  # type: ignore[index]
        old = c.procs["host-3"].pid
        c.terminate("host-3")
        c.restart("host-3")
        zk = logzk.connect(c.zk_hosts)
        try:
            wait_for(lambda: 3 in membership.members(zk, registry.STORAGE_NODES)
                     and 3 in membership.members(zk, registry.COORDINATORS), 60,
                     "host-3's storage node and coordinator registered again")
            assert 3 not in logzk.servers(zk)  # its log server is not started
        finally:
            zk.stop()
            zk.close()
        assert c.procs["host-3"].pid != old and c.running("host-3")

        def settled() -> object:
            rows = {r["node"]: r for r in mt("node", "status")}  # type: ignore[attr-defined]
            n3 = rows.get(3)
            return (n3 is not None and n3["state"] == "up" and n3["shards"] > 0 and n3["behind"] == 0
                    and all(r["diverged_shards"] == 0 for r in rows.values()))
        wait_for(settled, 60, "node 3 up, caught up, and equal to its peers", every_s=1.0)
        with Client(c.procs["host-3"].addr, timeout=30) as db:  # its own coordinator
            for p, k in keys:
                got = db.get("t", p, k)
                assert got is not None and got.value == k.encode(), (p, k)
            db.put("t", "after", "k", b"1")
            assert db.get("t", "after", "k").value == b"1"
        assert 3 not in [r["server"] for r in mt("log-server", "list")]  # type: ignore[attr-defined]
        assert all("3" not in r["replicas"] for r in mt("log", "status"))  # type: ignore[attr-defined]
        assert c.running("host-3")
