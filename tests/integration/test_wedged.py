"""No call wedges a server, and a wedged server is not left in service (issue 68, item 3),
with real processes under `midtown cluster up`'s supervisor.

1. Concurrent `Health/Watch` calls (short deadlines, cancelled, random service names) race
   the servers' status changes on every kind of server; each server then still answers a
   `Health/Check`, and the cluster a put, within a second. With grpcio-health-checking's
   servicer (what every server used before) a coordinator deadlocked here for good.
2. A log server whose worker threads are all held (every one in a replication stream that
   sends nothing) answers nothing: it finds itself wedged through its own port, exits 69,
   leaves the registry (its ZooKeeper session goes) and is started again by the supervisor,
   which registers anew and serves."""

from __future__ import annotations

import functools
import json
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from cluster import Cluster
from log import zk as zkpaths
from log.server import THREADS as LOG_SERVER_THREADS
from midtown import Client
from midtown_pb import log_pb2, log_pb2_grpc
from runtime import membership
from runtime.process import EXIT_WEDGED
from tests.integration.conftest import wait_for
from tests.integration.test_cli import mt
from tests.test_health import race

pytestmark = pytest.mark.integration

SERVICES = ["", "midtown.kv.v1.KV", "midtown.kv.v1.Storage", "midtown.log.v1.Log", "no.such.Service"]


@pytest.fixture
def supervised(tmp_path: Path) -> Iterator[Cluster]:
    d = tmp_path / "c"
    mt("cluster", "up", "--dir", str(d), "--layout", "split", "--logs", "4", "--detach")
    try:
        yield Cluster.load(d)
    finally:
        mt("cluster", "down", "--dir", str(d), check=False)


def _check(addr: str, timeout_s: float) -> int:
    with grpc.insecure_channel(addr) as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        return int(stub.Check(health_pb2.HealthCheckRequest(), timeout=timeout_s).status)


def _race_watches(addrs: list[str], seconds: float) -> None:
    stop = threading.Event()

    def watcher(n: int) -> None:
        rnd = random.Random(n)
        chans = {a: grpc.insecure_channel(a) for a in addrs}
        try:
            while not stop.is_set():
                stub = health_pb2_grpc.HealthStub(chans[rnd.choice(addrs)])
                call = stub.Watch(health_pb2.HealthCheckRequest(service=rnd.choice(SERVICES)),
                                  timeout=rnd.uniform(0.01, 0.3))
                try:
                    if rnd.random() < 0.4:
                        call.cancel()
                    else:
                        for _ in call:
                            if rnd.random() < 0.3:
                                call.cancel()
                except grpc.RpcError:
                    pass
        finally:
            for ch in chans.values():
                ch.close()

    race([functools.partial(watcher, n) for n in range(8)], stop, seconds)


def _internal_ports(c: Cluster) -> list[str]:
    """Every server's gRPC port: log servers, storage nodes, coordinators."""
    return [p.addr for p in c.procs.values() if p.kind != "zookeeper"]


def test_racing_health_watches_wedge_no_server(supervised: Cluster) -> None:
    c = supervised
    addrs = _internal_ports(c)
    with Client(zk=c.zk_hosts, timeout=5) as db:
        mt("dataset", "create", "h", "--dir", str(c.dir))
        db.put("h", "k", b"", b"v")
        # The statuses change meanwhile: a storage node restarted is NOT_SERVING until it
        # has caught up, then SERVING.
        restarting = threading.Thread(
            target=lambda: mt("cluster", "restart", "storage-1", "--dir", str(c.dir)))
        restarting.start()
        _race_watches(addrs, 6.0)
        restarting.join(60)
        for a in addrs:
            wait_for(lambda: _answers(a), 30, f"{a} to answer a health check")
            t0 = time.monotonic()
            _check(a, 1.0)
            assert time.monotonic() - t0 < 1.0
        t0 = time.monotonic()
        db.put("h", "k", b"", b"w", timeout=1.0)
        assert time.monotonic() - t0 < 1.0


def _answers(addr: str) -> bool:
    try:
        _check(addr, 1.0)
    except grpc.RpcError:
        return False
    return True


def _log_server_pid(c: Cluster, server_id: int) -> int | None:
    zk = zkpaths.connect(c.zk_hosts)
    try:
        entry = membership.children_json(zk, zkpaths.SERVERS).get(server_id)
    finally:
        zk.stop()
        zk.close()
    return entry.get("instance", {}).get("pid") if isinstance(entry, dict) else None


def test_a_wedged_log_server_leaves_the_registry_and_is_started_again(supervised: Cluster) -> None:
    c = supervised
    p = c.procs["log-1"]
    old_pid = p.pid
    assert _log_server_pid(c, p.server_id) == old_pid
    release = threading.Event()

    def silent() -> Iterator[log_pb2.ReplicateRequest]:
        release.wait(120)
        return
        yield  # a generator that sends nothing until released

    ch = grpc.insecure_channel(p.addr)
    stub = log_pb2_grpc.ReplicaStub(ch)
    calls = [stub.ReplicateStream(silent(), timeout=120) for _ in range(LOG_SERVER_THREADS)]
    try:
        # It answers nothing now; its own check finds that, and it ends with EXIT_WEDGED.
        wait_for(lambda: _log_server_pid(c, p.server_id) != old_pid, 60, "log-1 to leave the registry")
        wait_for(lambda: (_log_server_pid(c, p.server_id) or old_pid) != old_pid, 60,
                 "log-1 started again and registered")
        st = {r["name"]: r for r in json.loads(mt("cluster", "status", "--dir", str(c.dir), "--json").stdout)}
        assert st["log-1"]["restarts"] >= 1 and st["log-1"]["last_exit"] == EXIT_WEDGED, st["log-1"]
        assert st["log-1"]["state"] == "running"
        wait_for(lambda: _answers(p.addr), 30, "the new log-1 to answer")
        text = (c.dir / "logs" / "log-1.log").read_text()
        assert "wedged" in text and f"(exit {EXIT_WEDGED})" in text
    finally:
        release.set()
        for call in calls:
            call.cancel()
        ch.close()
