"""Real processes: ZooKeeper (Debian's package) and three log servers on loopback."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
from kazoo.exceptions import ConnectionLoss, OperationTimeoutError, SessionExpiredError

from cluster import Cluster
from log.client import LogClient
from midtown_pb import log_pb2
from runtime.refusals import Refusal

# Logs of a test cluster unless a test asks for more (`cluster up` makes 16): four keep an
# idle cluster at about 14% of a core where sixteen take 25%, which the whole suite pays.
TEST_LOGS = 4


@contextmanager
def started(path: Path, env: dict[str, str] | None = None, **options: Any) -> Iterator[Cluster]:
    """A local cluster of real processes under `path`, stopped on the way out. The split
    layout unless `layout` says otherwise: most tests kill and pause one component at a
    time (the host layout's own tests ask for it). `env`: variables its processes start
    with (the servers' settings, MIDTOWN_*), set while it runs, so restarts see them too."""
    mp = pytest.MonkeyPatch()
    for k, v in (env or {}).items():
        mp.setenv(k, v)
    try:
        c = Cluster(path, **{"logs": TEST_LOGS, "layout": "split", **options})
        c.start(timeout_s=90)
        try:
            yield c
        finally:
            c.stop()
    finally:
        mp.undo()


@pytest.fixture
def zk_hosts(tmp_path: Path) -> Iterator[str]:
    """A ZooKeeper server alone (no Midtown process): what a command writes and plans there."""
    from cluster.ports import free_ports
    from cluster.zookeeper import ZooKeeper

    z = ZooKeeper(tmp_path / "zk", free_ports(1)[0]).start()
    try:
        yield z.hosts
    finally:
        z.stop()


@contextmanager
def zk_session(hosts: str) -> Iterator[Any]:
    """A ZooKeeper client, closed on the way out."""
    from fleet.connect import connect

    zk = connect(hosts)
    try:
        yield zk
    finally:
        zk.stop()
        zk.close()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with started(tmp_path / "cluster") as c:
        yield c


@pytest.fixture
def client(cluster: Cluster) -> Iterator[LogClient]:
    with LogClient(cluster.zk_hosts) as c:
        yield c


@dataclass
class Ack:
    log_id: int
    position: int
    payload: bytes
    timestamp_ms: int
    epoch: int
    at: float
    attempts: int = 1


@dataclass
class Appenders:
    """Threads appending unique payloads to some logs until stopped; records every ack."""

    client: LogClient
    logs: list[int]
    threads: int = 8
    batch: int = 1
    acks: list[Ack] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _ts: list[threading.Thread] = field(default_factory=list)

    def start(self) -> Appenders:
        for t in range(self.threads):
            th = threading.Thread(target=self._run, args=(t,), daemon=True)
            th.start()
            self._ts.append(th)
        return self

    def _run(self, t: int) -> None:
        i = 0
        while not self._stop.is_set():
            log_id = self.logs[(t + i) % len(self.logs)]
            payloads = [f"t{t}-{i}-{j}".encode() for j in range(self.batch)]
            i += 1
            try:
                r = self.client.append(log_id, payloads, timeout_s=30)
            except Refusal as e:
                with self._lock:
                    self.errors.append(str(e))
                continue
            now = time.monotonic()
            with self._lock:
                for j, p in enumerate(payloads):
                    self.acks.append(Ack(log_id, r.first_position + j, p, r.timestamp_ms, r.epoch, now,
                                         r.attempts))

    def stop(self) -> None:
        self._stop.set()
        for th in self._ts:
            th.join(60)

    def count(self) -> int:
        with self._lock:
            return len(self.acks)


def read_all(client: LogClient, log_id: int, n: int, addr: str,
             timeout_s: float = 30) -> list[log_pb2.Entry]:
    """The first `n` entries of a log from the replica at `addr`, retrying within
    `timeout_s` while it answers UNAVAILABLE ("retry"): a replica back from a partition
    fetches what it missed from its peers, whose channels may still be reconnecting, and
    its catch-up fills it meanwhile. Any other error, or still UNAVAILABLE at the end,
    fails the test."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return list(client.read(log_id, 0, follow=True, max_entries=n, server=addr,
                                    timeout_s=max(1.0, deadline - time.monotonic())))
        except Refusal as e:
            if e.code != grpc.StatusCode.UNAVAILABLE or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def verify_logs(client: LogClient, acks: list[Ack], servers: list[str]) -> dict[int, int]:
    """Every acknowledged entry is read back exactly once, in order, at its position, by
    a reader on every replica; positions are dense; timestamps never go backwards."""
    by_log: dict[int, dict[int, Ack]] = {}
    for a in acks:
        prev = by_log.setdefault(a.log_id, {}).get(a.position)
        assert prev is None, f"two acks for log {a.log_id} position {a.position}: {prev} {a}"
        by_log[a.log_id][a.position] = a
    ends = {}
    for log_id, acked in by_log.items():
        last = max(acked)
        reads = []
        for addr in servers:
            # A replica may learn the commit point a moment later: follow until there.
            entries = read_all(client, log_id, last + 1, addr)
            positions = [e.position for e in entries]
            assert positions == list(range(len(entries))), f"log {log_id} from {addr}: not dense"
            assert len(entries) == last + 1, f"log {log_id} from {addr}: {len(entries)} <= {last}"
            for p, a in acked.items():
                e = entries[p]
                assert (e.payload, e.timestamp_ms, e.epoch) == (a.payload, a.timestamp_ms, a.epoch), \
                    f"log {log_id}@{p} from {addr}: acked {a}, read {e}"
            ts = [e.timestamp_ms for e in entries]
            assert ts == sorted(ts), f"log {log_id} from {addr}: timestamps go backwards"
            reads.append([(e.position, e.payload, e.epoch) for e in entries])
        assert all(r == reads[0] for r in reads), f"log {log_id}: replicas disagree"
        payloads = [p for _, p, _ in reads[0]]
        for a in acked.values():
            # Exactly once; a retry after an unknown outcome may have left an earlier copy.
            n = payloads.count(a.payload)
            assert n == 1 or (n > 1 and a.attempts > 1), f"{a.payload!r} appears {n} times"
        ends[log_id] = last
    return ends


def restart_and_wait(cluster: Cluster, client: LogClient, name: str) -> None:
    """Restart a killed server and wait until it has registered in ZooKeeper."""
    cluster.restart(name)
    sid = cluster.procs[name].server_id
    wait_for(lambda: sid in client.servers(), 30, f"{name} to register")


# What the test's own ZooKeeper session meets when the server is slow to answer it (on a
# loaded machine: "no answer from the server in 0.6s", then ConnectionLoss until kazoo
# reconnects): the condition is not known yet, and is asked again.
ZK_AWAY = (ConnectionLoss, SessionExpiredError, OperationTimeoutError)


def wait_for(cond, timeout_s: float, what: str, every_s: float = 0.05):  # type: ignore[no-untyped-def]
    """`cond()`'s first true value within `timeout_s`, asked every `every_s`; a condition
    that reads ZooKeeper and finds its session away (ZK_AWAY) is asked again: beside a
    busy process per core, test_pause's look for a registration once ended the test
    with the test's own session's ConnectionLoss."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            v = cond()
        except ZK_AWAY:
            v = None
        if v:
            return v
        time.sleep(every_s)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


def registered(cluster: Cluster, name: str) -> bool:
    """Whether the storage node `name` is registered by the process the cluster last
    started for it: a killed process's registration lasts until its session expires, and a
    restarted one answers calls before it registers (at the end of its start)."""
    from kazoo.client import KazooClient

    from catalog import registry
    from runtime import membership
    zk = KazooClient(hosts=cluster.zk_hosts, timeout=5)
    zk.start(timeout=10)
    try:
        entry = membership.children_json(zk, registry.STORAGE_NODES).get(cluster.procs[name].server_id)
    finally:
        zk.stop()
        zk.close()
    return isinstance(entry, dict) and entry.get("instance", {}).get("pid") == cluster.procs[name].pid


def storage_status(addr: str) -> Any:
    """The storage node at `addr`'s Status (a NodeStatusResponse), or None if it does not
    answer within 5 s."""
    from midtown_pb import kv_pb2, kv_pb2_grpc
    with grpc.insecure_channel(addr) as ch:
        try:
            return kv_pb2_grpc.StorageStub(ch).Status(kv_pb2.NodeStatusRequest(), timeout=5)
        except grpc.RpcError:
            return None


@pytest.fixture(scope="session")
def spark():  # type: ignore[no-untyped-def]
    """One local Spark session for the whole test run (PITFALLS.md: it takes ~10 s and up
    to 2 GB): two cores, and up to 4 attempts per task so that task retries happen."""
    from spark_connector.session import local_session

    s = local_session("midtown-tests")
    yield s
    s.stop()



def metric(c: Cluster, proc: str, name: str, labels: str = "") -> float:
    """The sum of counter or gauge `name` on process `proc`'s /metrics page (Cluster.metric)."""
    return c.metric(proc, name, labels)
