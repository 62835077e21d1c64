"""Processes paused past their ZooKeeper session (SIGSTOP longer than the session timeout,
then SIGCONT) come back: registered again, serving, their background loops alive."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

from catalog import registry
from catalog.routing import log_of, shard_of
from cluster import Cluster
from log import zk as logzk
from log.client import LogClient
from midtown import Client
from tests.integration.conftest import started, wait_for

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def pc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One cluster for the module: each test writes a dataset of its own, and every process
    it pauses comes back before it ends."""
    with started(tmp_path_factory.mktemp("pause") / "c", {"MIDTOWN_POSITION_INTERVAL_S": "0.5"}) as c:
        yield c


def _pause_past_session(c: Cluster, logs: LogClient, name: str, path: str) -> None:
    """SIGSTOP `name` until ZooKeeper has expired its session (its ephemeral node at `path`
    is gone: a fact, not a guess at timing), then SIGCONT it."""
    assert logs.zk.exists(path) is not None, f"{name} is not registered at {path}"
    c.signal(name, signal.SIGSTOP)
    try:
        wait_for(lambda: logs.zk.exists(path) is None, 60, f"the session of {name} to expire")
    finally:
        c.signal(name, signal.SIGCONT)


def test_every_kind_of_process_paused_past_its_session_comes_back(pc: Cluster) -> None:
    d = pc.create_dataset("p")
    log_id = log_of(shard_of(d.id, b"k", pc.shards), pc.kv_logs)
    paused = [("coordinator-0", f"{registry.COORDINATORS}/0"),
              ("storage-1", f"{registry.STORAGE_NODES}/1"),
              ("log-1", f"{logzk.SERVERS}/1")]
    with LogClient(pc.zk_hosts) as logs:
        with Client(zk=pc.zk_hosts, timeout=60) as db:
            db.put("p", "k", "before", b"v")
        for name, path in paused:
            _pause_past_session(pc, logs, name, path)
            wait_for(lambda: logs.zk.exists(path) is not None, 30, f"{name} to register again")
            # Discovery finds it, and it serves (this cluster has one coordinator).
            with Client(zk=pc.zk_hosts, timeout=60) as db:
                db.put("p", "k", f"after-{name}", b"v")
                got = db.get("p", "k", f"after-{name}")
                assert got is not None and got.value == b"v"
        # The paused storage node's positions loop survived its lost session: it publishes
        # again, so the log is truncated past everything written before now.
        with Client(zk=pc.zk_hosts, timeout=60) as db:
            last = 0
            for i in range(20):
                last = db.put("p", "k", f"more{i}", b"v")
        wait_for(lambda: logs.status()[log_id]["first"] >= last - 1, 60,
                 f"log {log_id} to be truncated past position {last - 1}")


def test_zookeeper_trouble_during_a_request_is_unavailable_and_retried(pc: Cluster) -> None:
    import grpc

    from midtown_pb import kv_pb2 as pb
    from midtown_pb import kv_pb2_grpc

    pc.create_dataset("z")
    stub = kv_pb2_grpc.KVStub(grpc.insecure_channel(pc.coordinator_addrs[0]))
    put = pb.PutRequest(header=pb.RequestHeader(dataset="not-cached-yet"),
                        key=pb.Key(partition=b"k", local=b"l"), value=b"v")
    pc.signal("zookeeper", signal.SIGSTOP)  # returns once every thread of it is stopped
    try:
        # An unknown dataset is looked up in ZooKeeper, which does not answer. (The signal
        # once returned while ZooKeeper still ran for a few ms on a loaded machine, and it
        # answered the lookup: NOT_FOUND. Cluster.signal now waits for the stop: issue 48.)
        with pytest.raises(grpc.RpcError) as ei:
            stub.Put(put, timeout=60)
    finally:
        pc.signal("zookeeper", signal.SIGCONT)
    assert ei.value.code() == grpc.StatusCode.UNAVAILABLE, ei.value.details()
    assert "ZooKeeper is unavailable" in (ei.value.details() or "")
    # The SDK retries UNAVAILABLE; with ZooKeeper back (and every session it may have
    # expired meanwhile re-established), requests go through.
    with Client(pc.coordinator_addrs, timeout=60) as db:
        db.put("z", "k", "l", b"v")
        got = db.get("z", "k", "l")
        assert got is not None and got.value == b"v"


def test_acknowledged_puts_report_the_stored_version_across_writer_failures(pc: Cluster) -> None:
    """Puts answered as soon as the log has them, while the log writer is SIGKILLed and then
    its successor paused past its session: every acknowledged version is the one stored,
    and a check-and-set on it succeeds (nothing else writes these keys)."""
    import threading

    from midtown import errors

    pc.create_dataset("v")
    acked: dict[str, int] = {}
    lock = threading.Lock()
    stop = threading.Event()

    def put_loop(t: int) -> None:
        with Client(zk=pc.zk_hosts, timeout=60) as db:
            i = 0
            while not stop.is_set():
                key = f"t{t}-{i}"
                i += 1
                try:
                    v = db.put("v", key, "x", key.encode())
                except errors.MidtownError:
                    continue  # not acknowledged: nothing to check
                with lock:
                    acked[key] = v

    def count() -> int:
        with lock:
            return len(acked)

    threads = [threading.Thread(target=put_loop, args=(t,), daemon=True) for t in range(8)]
    for th in threads:
        th.start()
    with LogClient(pc.zk_hosts) as logs:
        try:
            wait_for(lambda: count() > 100, 60, "puts before the kill")
            first = logzk.read_writer(logs.zk, 0)
            assert first is not None
            pc.kill(f"log-{first['server']}")
            second = wait_for(lambda: (w := logzk.read_writer(logs.zk, 0)) and
                              w["server"] != first["server"] and w.get("state") == "writing" and w,
                              60, "a new writer")
            pc.restart(f"log-{first['server']}")
            n = count()
            wait_for(lambda: count() > n + 100, 60, "puts through the new writer")
            _pause_past_session(pc, logs, f"log-{second['server']}",
                                f"{logzk.SERVERS}/{second['server']}")
            n = count()
            wait_for(lambda: count() > n + 100, 60, "puts after the pause")
        finally:
            stop.set()
            for th in threads:
                th.join(90)
    with Client(zk=pc.zk_hosts, timeout=60) as db:
        wrong = {}
        for key, v in sorted(acked.items()):
            got = db.get("v", key, "x")
            assert got is not None and got.value == key.encode(), f"{key}: acknowledged, then {got}"
            if got.version != v:
                wrong[key] = (v, got.version)
        assert not wrong, f"acknowledged versions that are not the stored ones: {wrong}"
        for key, v in list(acked.items())[:: max(1, len(acked) // 50)]:
            assert db.cas("v", key, "x", b"next", expected_version=v).succeeded, key
