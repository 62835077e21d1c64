"""The key-value store end to end on a real local cluster: ZooKeeper, 3 log servers,
3 storage nodes, 2 coordinators; processes killed for real."""

from __future__ import annotations

import os
import random
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator

import grpc
import pytest

from catalog import datasets
from catalog.routing import log_of, shard_of
from cluster import Cluster
from log import zk as zkpaths
from midtown import Client, Op, errors
from midtown_pb import kv_pb2 as pb
from midtown_pb import kv_pb2_grpc
from tests.integration.conftest import started, wait_for
from tests.linearizability import INF, Operation, check_per_key

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def kv_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One cluster for the module's tests (a cluster per test cost the suite ~10 s each):
    each test writes partitioning keys of its own in dataset "t", and a test that kills a
    process restarts it before it ends."""
    with started(tmp_path_factory.mktemp("kv") / "c", coordinators=2) as c:
        c.create_dataset("t")
        yield c


@pytest.fixture
def db(kv_cluster: Cluster) -> Iterator[Client]:
    with Client(zk=kv_cluster.zk_hosts, timeout=20) as c:
        yield c


def _storage_status(cluster: Cluster) -> dict[int, pb.NodeStatusResponse]:
    out = {}
    for p in cluster.playing("storage-node"):
        stub = kv_pb2_grpc.StorageStub(grpc.insecure_channel(p.addr_of("storage-node")))
        out[p.server_id] = stub.Status(pb.NodeStatusRequest(), timeout=5, wait_for_ready=True)
    return out


def _converged(cluster: Cluster) -> bool:
    """Whether every storage node holds the same shards at the same positions and digests
    (a node that does not answer its status within 5 s, one restarting or bootstrapping on
    a loaded machine: not yet)."""
    try:
        st = _storage_status(cluster)
    except grpc.RpcError as e:
        if e.code() in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE):  # type: ignore[attr-defined]
            return False
        raise
    views = [([s.position for s in x.shards], [s.digest for s in x.shards]) for x in st.values()]
    return all(v == views[0] for v in views)


def test_operations_basic(db: Client) -> None:
    assert db.get("t", "p", "k") is None
    v1 = db.put("t", "p", "k", b"one")
    got = db.get("t", "p", "k")
    assert got is not None and got.value == b"one" and got.version == v1
    r = db.cas("t", "p", "k", b"two", expected=b"nope")
    assert not r.succeeded and r.current is not None and r.current.value == b"one"
    r = db.cas("t", "p", "k", b"two", expected=b"one", expected_version=v1)
    assert r.succeeded and r.version > v1
    assert not db.cas("t", "p", "k", b"x", expected_version=v1).succeeded
    assert db.incr("t", "p", "n", 5) == 5 and db.incr("t", "p", "n", -2) == 3
    with pytest.raises(errors.FailedPrecondition, match="not a decimal integer"):
        db.incr("t", "p", "k")
    res = db.batch("t", [Op.put("p", "a", b"1"), Op.cas("p", "k", b"z", expected=b"wrong")])
    assert not res.applied and not res.results[1].ok
    assert db.get("t", "p", "a") is None, "all or nothing"
    res = db.batch("t", [Op.put("p", "a", b"1"), Op.incr("p", "n"), Op.get("p", "k")])
    assert res.applied and res.results[2].value is not None and res.results[2].value.value == b"two"
    page = db.scan("t", "p", limit=2)
    assert [i.local_key for i in page.items] == [b"a", b"k"] and page.next == b"n"
    assert [i.local_key for i in db.scan_all("t", "p", page=1)] == [b"a", b"k", b"n"]
    assert [i.local_key for i in db.scan("t", "p", start="b", end="m").items] == [b"k"]
    db.delete("t", "p", "k")
    assert db.get("t", "p", "k") is None
    # an eventual read answers from one replica's state
    wait_for(lambda: (v := db.get("t", "p", "a", consistency="eventual")) and v.value == b"1", 10,
             "an eventual read")


def test_retry_with_same_request_id_applies_once(db: Client) -> None:
    rid = uuid.uuid4().bytes
    assert db.incr("t", "c", "n", 1, request_id=rid) == 1
    assert db.incr("t", "c", "n", 1, request_id=rid) == 1, "the first outcome, not applied again"
    assert db.incr("t", "c", "n", 1) == 2


def test_uniqueness_exactly_one_insert_wins(db: Client) -> None:
    for round_ in range(5):
        key = f"user-{round_}"
        wins: list[int] = []
        barrier = threading.Barrier(12)

        def racer(i: int) -> None:
            barrier.wait()
            if db.cas("t", key, "owner", f"c{i}".encode(), expect_absent=True).succeeded:
                wins.append(i)

        ts = [threading.Thread(target=racer, args=(i,)) for i in range(12)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert len(wins) == 1, f"round {round_}: winners {wins}"
        v = db.get("t", key, "owner")
        assert v is not None and v.value == f"c{wins[0]}".encode()


def test_counters_sum_exactly_with_forced_retries(db: Client) -> None:
    """Each increment's answer is dropped once and the call retried with the same id."""
    threads, per = 8, 25

    def worker() -> None:
        for _ in range(per):
            rid = uuid.uuid4().bytes
            first = db.incr("t", "counters", "total", 1, request_id=rid)
            again = db.incr("t", "counters", "total", 1, request_id=rid)  # the "retry"
            assert again == first

    ts = [threading.Thread(target=worker) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    v = db.get("t", "counters", "total")
    assert v is not None and int(v.value) == threads * per


def test_storage_node_crash_and_resume_converges(kv_cluster: Cluster, db: Client) -> None:
    stop = threading.Event()
    done = [0]

    def stream() -> None:
        while not stop.is_set():
            db.incr("t", f"k{done[0] % 7}", "n", 1)
            done[0] += 1

    th = threading.Thread(target=stream)
    th.start()
    wait_for(lambda: done[0] > 50, 30, "increments")
    kv_cluster.kill("storage-1")
    n = done[0]
    wait_for(lambda: done[0] > n + 100, 30, "increments while a storage node is down")
    kv_cluster.restart("storage-1")
    n = done[0]
    wait_for(lambda: done[0] > n + 50, 30, "increments after the restart")
    stop.set()
    th.join()
    wait_for(lambda: _converged(kv_cluster), 60, "every replica at the same positions and digests")
    # The operator's view says the same.
    import json
    import subprocess
    import sys

    def node_status() -> bool:
        p = subprocess.run([sys.executable, "-m", "cli", "node", "status", "--zk",
                            kv_cluster.zk_hosts, "--json"], capture_output=True, text=True,
                           timeout=60, check=False)
        rows = json.loads(p.stdout)
        return (p.returncode == 0 and [r["state"] for r in rows] == ["up"] * 3
                and all(r["behind"] == 0 and r["diverged_shards"] == 0 for r in rows))

    wait_for(node_status, 30, "midtown node status to show every node up and level", every_s=0.5)
    total = sum(int(v.value) for i in range(7) if (v := db.get("t", f"k{i}", "n")))
    assert total == done[0]


def test_ttl_expires_at_the_same_log_time_everywhere(kv_cluster: Cluster, db: Client) -> None:
    ver = db.put("t", "session", "token", b"secret", ttl_ms=1500)
    v = db.get("t", "session", "token")
    assert v is not None and v.version == ver and v.expires_at_ms > 0
    time.sleep(1.7)
    # Log time moves on with any write to the same shard.
    db.put("t", "session", "other", b"x")
    assert db.get("t", "session", "token") is None
    assert db.cas("t", "session", "token", b"new", expect_absent=True).succeeded
    # Each replica judges expiry by the log time it applied: all agree.
    wait_for(lambda: _converged(kv_cluster), 30, "replicas to converge")
    for p in kv_cluster.of_kind("storage-node"):
        stub = kv_pb2_grpc.StorageStub(grpc.insecure_channel(p.addr))
        zk = zkpaths.connect(kv_cluster.zk_hosts)
        d = datasets.get(zk, "t")
        zk.stop()
        assert d is not None
        shard = shard_of(d.id, b"session", 64)
        r = stub.Read(pb.ReadRequest(dataset=d.id, shard=shard, partition_key=b"session",
                                     op=pb.Op(get=pb.GetOp(local_key=b"token"))), timeout=5)
        assert r.result.found and r.result.value.value == b"new"


def run_history(db: Client, keys: list[str], disturb: Callable[[], None],
                clients: int = 6, min_completed: int = 150, dataset: str = "t") -> dict[str, list[Operation]]:
    """Concurrent put/get/cas/delete on a few hot keys of `dataset` while `disturb()` runs,
    and after it until at least `min_completed` operations completed (a slow machine runs
    longer rather than check less); every operation's invocation, response (INF: unknown
    outcome) and result, per key."""
    history: dict[str, list[Operation]] = {k: [] for k in keys}
    lock = threading.Lock()
    stop = threading.Event()

    def client(cid: int) -> None:
        rng = random.Random(cid)
        while not stop.is_set():
            k = rng.choice(keys)
            kind = rng.choice(["put", "get", "get", "cas", "delete"])
            v = bytes([rng.randrange(4)])
            t0 = time.monotonic()
            arg: object = None
            out: object = None
            try:
                if kind == "put":
                    arg = v
                    db.put(dataset, k, "v", v, timeout=15)
                elif kind == "delete":
                    db.delete(dataset, k, "v", timeout=15)
                elif kind == "get":
                    got = db.get(dataset, k, "v", timeout=15)
                    out = got.value if got else None
                else:
                    exp = bytes([rng.randrange(4)]) if rng.random() < 0.7 else None
                    arg = (exp, v)
                    r = (db.cas(dataset, k, "v", v, expect_absent=True, timeout=15) if exp is None
                         else db.cas(dataset, k, "v", v, expected=exp, timeout=15))
                    out = r.succeeded
                t1 = time.monotonic()
            except (errors.Unavailable, errors.DeadlineExceeded):
                t1 = INF
                if kind == "get":
                    continue  # a read with no answer constrains nothing
            with lock:
                history[k].append(Operation(cid, t0, t1, kind, arg, out))

    ts = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in ts:
        t.start()
    def completed() -> int:
        with lock:
            return sum(1 for h in history.values() for o in h if o.known)

    try:
        disturb()
        deadline = time.monotonic() + 120
        while completed() < min_completed and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        stop.set()
        for t in ts:
            t.join(60)
    total = sum(len(h) for h in history.values())
    done = completed()
    assert done >= min_completed, f"only {done} of {total} operations completed"
    print(f"linearizability: {done} completed, {total - done} unknown")
    return history


def writer_of(cluster: Cluster, dataset: str, key: str) -> int:
    """The log server that writes the log carrying `key` of `dataset`."""
    zk = zkpaths.connect(cluster.zk_hosts)
    try:
        d = datasets.get(zk, dataset)
        assert d is not None
        w = zkpaths.read_writer(zk, log_of(shard_of(d.id, key.encode(), 64), cluster.kv_logs))
        assert w is not None
        return int(w["server"])
    finally:
        zk.stop()


# make soak: the whole-cluster simulation (tests/sim/nodes.py) runs SDK clients' puts, gets,
# check-and-sets and deletes on shared keys through coordinator, storage node and log
# writer kills and pauses in every seed, and checks each key's history with the same checker
@pytest.mark.moved_to_sim
def test_linearizable_under_kills(kv_cluster: Cluster, db: Client) -> None:
    """Concurrent put/get/cas/delete on a few hot keys while a storage node, a coordinator
    and the log writer are SIGKILLed and restarted, and a log writer is SIGSTOPped past
    takeover; every key's history must linearize."""
    keys = ["h0", "h1", "h2"]

    def kills() -> None:
        # One round of kills in the suite; `make soak` runs many (MIDTOWN_SOAK_ROUNDS).
        for r in range(int(os.environ.get("MIDTOWN_SOAK_ROUNDS", "1"))):
            time.sleep(2)
            kv_cluster.kill(f"storage-{r % 3}")
            time.sleep(2)
            kv_cluster.restart(f"storage-{r % 3}")
            time.sleep(1)
            kv_cluster.kill(f"coordinator-{r % 2}")
            time.sleep(2)
            kv_cluster.restart(f"coordinator-{r % 2}")
            w = writer_of(kv_cluster, "t", random.choice(keys))
            kv_cluster.kill(f"log-{w}")
            time.sleep(2)  # another server takes the log over well within this
            kv_cluster.restart(f"log-{w}")
            time.sleep(2)
            # The writer paused for about its ZooKeeper session: taken over while stopped,
            # it wakes as a deposed writer with appends in flight.
            w = writer_of(kv_cluster, "t", random.choice(keys))
            kv_cluster.signal(f"log-{w}", signal.SIGSTOP)
            try:
                time.sleep(4)
            finally:
                kv_cluster.signal(f"log-{w}", signal.SIGCONT)
            time.sleep(2)

    assert check_per_key(run_history(db, keys, kills)) == []


def test_async_client_and_addresses(kv_cluster: Cluster, db: Client) -> None:
    import asyncio

    from midtown import AsyncClient

    async def main() -> tuple[object, object, int]:
        async with AsyncClient(kv_cluster.coordinator_addrs) as ac:
            v = await ac.put("t", "async", "k", b"1")
            got = await ac.get("t", "async", "k")
            n = await asyncio.gather(*[ac.incr("t", "async", "n") for _ in range(10)])
            return v, got, max(n)

    v, got, n = asyncio.run(main())
    assert got is not None and got.value == b"1" and got.version == v  # type: ignore[attr-defined]
    assert n == 10
    # One coordinator address, given directly, works as well as discovery.
    with Client(kv_cluster.coordinator_addrs[1]) as one:
        assert one.get("t", "async", "n").value == b"10"  # type: ignore[union-attr]


def test_calls_on_a_paused_coordinator_go_on_at_the_other_within_their_deadline(
        kv_cluster: Cluster, caplog: pytest.LogCaptureFixture) -> None:
    """A coordinator paused under calls (its machine stalled, a VM frozen) keeps its
    sockets open: the calls sent to it fail UNAVAILABLE once a keepalive ping goes
    unanswered (the SDK's channels ping every 0.5 s, runtime/transport.py: found out
    0.5-1.25 s after the pause; at 1 s per ping, 1-2 s) and each goes on at the other
    coordinator, every one within a 1.8 s deadline."""
    import logging
    from concurrent.futures import ThreadPoolExecutor

    caplog.set_level(logging.DEBUG, logger="midtown.client")
    paused = kv_cluster.playing("coordinator")[0]
    with Client(kv_cluster.coordinator_addrs, timeout=20, coalesce=False) as c:
        for i in range(20):  # a connection to each coordinator (they are picked at random)
            c.put("t", "paused-coordinator", f"warm{i}", b"v")
        kv_cluster.signal(paused.name, signal.SIGSTOP)
        try:
            with ThreadPoolExecutor(16) as pool:
                versions = list(pool.map(
                    lambda i: c.put("t", "paused-coordinator", f"k{i}", b"v", timeout=1.8), range(16)))
        finally:
            kv_cluster.signal(paused.name, signal.SIGCONT)
        assert all(v > 0 for v in versions)
        got = c.get("t", "paused-coordinator", "k15")
        assert got is not None and got.value == b"v"
    moved = [r.getMessage() for r in caplog.records if f"at {paused.addr}: UNAVAILABLE" in r.getMessage()]
    assert moved, "no put was sent to the paused coordinator first (16 picked at random)"


def test_data_commands(kv_cluster: Cluster) -> None:
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "MIDTOWN_ZK": kv_cluster.zk_hosts}

    def mt(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "cli", *args], capture_output=True,
                              text=True, timeout=60, env=env, check=False)

    assert mt("dataset", "create", "cli", "--ttl", "1h").returncode == 0
    assert "cli" in mt("dataset", "list").stdout
    assert json.loads(mt("put", "cli", "u1", "name", "Ada", "--json").stdout)["version"] >= 1
    row = json.loads(mt("get", "cli", "u1", "name", "--json").stdout)
    assert row["value"] == "Ada" and row["expires_at_ms"]
    assert mt("cas", "cli", "u1", "name", "Bea", "--expect", "Zed").returncode == 4
    assert mt("cas", "cli", "u1", "name", "Bea", "--expect", "Ada").returncode == 0
    assert json.loads(mt("incr", "cli", "u1", "n", "7", "--json").stdout)["value"] == 7
    scan = json.loads(mt("scan", "cli", "u1", "--json").stdout)
    assert [i["local_key"] for i in scan["items"]] == ["n", "name"]
    assert "LOCAL_KEY" in mt("scan", "cli", "u1").stdout
    # Bounded reads: the answer says the bound a replica served it under (0: as a strong read).
    row = json.loads(mt("get", "cli", "u1", "n", "--consistency", "bounded", "--max-staleness", "1m",
                        "--dc", "east", "--json").stdout)
    assert row["value"] == "7" and row["staleness_bound_ms"] in (0, 60_000)
    out = mt("scan", "cli", "u1", "--consistency", "bounded", "--max-staleness", "300ms").stdout
    assert "served as a strong read" in out  # no replica can serve a bound within the clocks' offset
    for args, flag in ((("--consistency", "bounded"), "--max-staleness"),
                       (("--max-staleness", "2s"), "--max-staleness"),
                       (("--consistency", "bounded", "--max-staleness", "2"), "--max-staleness"),
                       (("--consistency", "bounded", "--max-staleness", "2d"), "--max-staleness"),
                       (("--consistency", "bounded", "--max-staleness", "2s", "--dc", "no place"), "--dc")):
        bad = mt("get", "cli", "u1", "n", *args)
        assert bad.returncode == 2 and flag in bad.stderr, (args, bad.stderr)
    assert mt("delete", "cli", "u1", "name").returncode == 0
    assert mt("get", "cli", "u1", "name").returncode == 3
    bad = mt("put", "nope", "u1", "k", "v")
    assert bad.returncode == 1 and "header.dataset" in bad.stderr
    bad = mt("put", "cli", "u1", "k", "v", "--ttl", "soon")
    assert bad.returncode == 2 and "--ttl" in bad.stderr
    bad = mt("dataset", "create", "Bad Name")
    assert bad.returncode == 2 and "name" in bad.stderr
    assert mt("dataset", "drop", "cli").returncode == 0
    assert mt("get", "cli", "u1", "n").returncode == 1


def test_strong_reads_skip_the_log(kv_cluster: Cluster, db: Client) -> None:
    """Strong gets use the read index (no log append) and still see every acknowledged
    write: read-your-writes across both coordinators."""
    import urllib.request

    for i in range(20):
        with Client(kv_cluster.coordinator_addrs[i % 2]) as w, \
                Client(kv_cluster.coordinator_addrs[(i + 1) % 2]) as r:
            w.put("t", "ri", "k", str(i).encode())
            got = r.get("t", "ri", "k")
            assert got is not None and got.value == str(i).encode()
    metrics = ""
    for p in kv_cluster.of_kind("coordinator"):
        metrics += urllib.request.urlopen(f"http://127.0.0.1:{p.metrics_port}/metrics").read().decode()
    index = sum(float(line.split()[-1]) for line in metrics.splitlines()
                if line.startswith('midtown_strong_reads_total{path="read_index"}'))
    assert index >= 20


def test_bounded_reads_see_what_was_acknowledged_before_their_bound(kv_cluster: Cluster, db: Client) -> None:
    """A bounded read (consistency="bounded", max_staleness_ms=N) sees every write
    acknowledged more than N before it began, whoever serves it: a replica that has applied
    recently enough (the answer's staleness_bound_ms is N) or, failing one, the writer as a
    strong read (0). In a cluster whose nodes name no data center every replica is near any
    caller, whatever data center the caller names."""
    with Client(zk=kv_cluster.zk_hosts, timeout=20, dc="east") as near:
        bounds = set()
        for i in range(2):
            db.put("t", "bounded", "k", b"v%d" % i)
            db.put("t", "bounded", "j", b"w%d" % i)
            time.sleep(2.1)  # acknowledged more than the bound before the reads begin
            got = near.get("t", "bounded", "k", consistency="bounded", max_staleness_ms=2000)
            assert got is not None and got.value == b"v%d" % i
            assert got.staleness_bound_ms in (0, 2000)
            page = near.scan("t", "bounded", consistency="bounded", max_staleness_ms=2000)
            assert [(it.local_key, it.value.value) for it in page.items] == [(b"j", b"w%d" % i),
                                                                            (b"k", b"v%d" % i)]
            assert page.staleness_bound_ms in (0, 2000)
            # A replica of a live cluster has applied its log within a minute: one serves it.
            got = near.get("t", "bounded", "k", consistency="bounded", max_staleness_ms=60_000)
            assert got is not None and got.value.startswith(b"v")
            bounds.add(got.staleness_bound_ms)
        assert 60_000 in bounds, "no replica served a read bounded by a minute"
        # A bound within the clocks' offset (2 x 250 ms) no replica can serve: the writer does.
        got = near.get("t", "bounded", "k", consistency="bounded", max_staleness_ms=400)
        assert got is not None and got.value == b"v1" and got.staleness_bound_ms == 0


def test_bad_bounded_reads_are_refused_naming_the_field(kv_cluster: Cluster, db: Client) -> None:
    """(The SDK's own checks: tests/test_sdk_arguments.py.)"""
    # The wire, as another client would send it: each refusal names its field.
    stub = kv_pb2_grpc.KVStub(grpc.insecure_channel(kv_cluster.coordinator_addrs[0]))
    h = pb.RequestHeader(dataset="t")
    key = pb.Key(partition=b"bounded", local=b"k")
    for req, field in ((pb.GetRequest(header=h, key=key, consistency=pb.BOUNDED), "max_staleness_ms"),
                       (pb.GetRequest(header=h, key=key, consistency=pb.BOUNDED, max_staleness_ms=2**31),
                        "max_staleness_ms"),
                       (pb.GetRequest(header=h, key=key, max_staleness_ms=100), "max_staleness_ms"),
                       (pb.GetRequest(header=h, key=key, consistency=7), "consistency")):  # type: ignore[arg-type]
        with pytest.raises(grpc.RpcError) as ei:
            stub.Get(req, timeout=10)
        assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT and field in (ei.value.details() or "")
    with pytest.raises(grpc.RpcError) as ei:
        stub.Scan(pb.ScanRequest(header=h, partition_key=b"bounded", consistency=pb.BOUNDED), timeout=10)
    assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "max_staleness_ms" in (ei.value.details() or "")
    with pytest.raises(grpc.RpcError) as ei:
        list(stub.ScanShard(pb.ScanShardRequest(header=h, shard=0, consistency=pb.BOUNDED), timeout=10))
    assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "consistency" in (ei.value.details() or "")
    # An eventually consistent dataset has no log to bound a read by.
    kv_cluster.create_dataset("ev-bounded", consistency="eventual")
    with pytest.raises(errors.FailedPrecondition, match="consistency"):
        db.get("ev-bounded", "bounded", "k", consistency="bounded", max_staleness_ms=5000)
