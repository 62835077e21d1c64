"""What an operator watches: Prometheus metrics on every process, gRPC health (telling the
truth) and reflection on every server."""

from __future__ import annotations

import signal
import urllib.request
from collections.abc import Iterator

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from cluster import Cluster
from midtown import Client, Write
from tests.integration import traced
from tests.integration.conftest import started, wait_for

pytestmark = pytest.mark.integration

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
METRICS = {
    "log-server": ["midtown_log_appended_entries_total", "midtown_log_append_batch_entries_bucket",
                   "midtown_log_fsync_seconds_bucket", "midtown_log_writer_epoch",
                   "midtown_log_commit_lag_entries"],
    "storage-node": ["midtown_storage_applied_records_total", "midtown_storage_tailed_entries_total",
                     "midtown_storage_position",
                     "midtown_storage_lag_entries", "midtown_storage_diverged_shards",
                     "midtown_storage_event_ids"],
    "coordinator": ["midtown_kv_requests_total", "midtown_kv_request_seconds_bucket",
                    "midtown_replica_divergence_total"],
}
SERVICES = {"log-server": {"midtown.log.v1.Log", "midtown.log.v1.Replica"},
            "storage-node": {"midtown.kv.v1.Storage"}, "coordinator": {"midtown.kv.v1.KV"}}


@pytest.fixture(scope="module")
def oc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One cluster for the module's tests: the one that pauses ZooKeeper resumes it and
    waits until every server serves again."""
    d = tmp_path_factory.mktemp("ops")
    with started(d / "c", env=traced.env(d / "spans.jsonl")) as c:
        c.trace_file = d / "spans.jsonl"  # type: ignore[attr-defined]
        yield c


def _health(addr: str) -> int:
    with grpc.insecure_channel(addr) as ch:
        try:
            stub = health_pb2_grpc.HealthStub(ch)
            return int(stub.Check(health_pb2.HealthCheckRequest(), timeout=2).status)
        except grpc.RpcError:
            return -1


def _services(addr: str) -> set[str]:
    with grpc.insecure_channel(addr) as ch:
        stub = reflection_pb2_grpc.ServerReflectionStub(ch)
        replies = stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]),
                                            timeout=5)
        return {s.name for r in replies for s in r.list_services_response.service}


def test_every_process_has_metrics_health_and_reflection(oc: Cluster) -> None:
    oc.create_dataset("ops")
    with Client(oc.coordinator_addrs, timeout=30) as db:
        db.write_many("ops", [Write.put("p", f"l{i}", b"v", event_id=f"e{i}") for i in range(50)])
        db.get("ops", "p", "l1")
    for p in oc.procs.values():
        if p.kind == "zookeeper":
            continue
        text = wait_for(lambda: (t := urllib.request.urlopen(
            f"http://127.0.0.1:{p.metrics_port}/metrics", timeout=5).read().decode()) and
            all(m in t for m in METRICS[p.kind]) and t, 30, f"{p.name}'s metrics")
        assert text
        wait_for(lambda: _health(p.addr) == SERVING, 30, f"{p.name} to be SERVING")
        assert SERVICES[p.kind] | {"grpc.health.v1.Health"} <= _services(p.addr), p.name


def test_an_operation_is_traced_through_every_process_it_crosses(oc: Cluster) -> None:
    """Split layout: the servers trace what a traced client sends them (ratio 0: nothing
    of their own); a put, a CAS and a bulk write reach the coordinator, the log's writer
    (its Append) and at least two log servers storing the entry (the ack quorum); a strong
    get and a watch reach a storage node."""
    oc.create_dataset("tr")

    def expect(op: str, ss: list[dict[str, object]]) -> bool:
        roles = {str(s) for s in traced.services(ss)}
        coordinator = any(r.startswith("coordinator") for r in roles)
        if op in ("Put", "CheckAndSet", "WriteMany"):
            return (coordinator and bool(traced.services(ss, "Append"))
                    and len(traced.services(ss, "log store")) >= 2)
        return coordinator and any(r.startswith("storage node") for r in roles)
    got = traced.check_operations(oc.coordinator_addrs, "tr", oc.trace_file, expect)  # type: ignore[attr-defined]
    assert {s["name"] for s in got["Put"]} >= {"put", "admission", "append", "Append", "log append",
                                                  "log quorum", "log store"}
    assert {s["name"] for s in got["Get"]} >= {"get", "read index", "replica read", "ReadMany"}
    # With a ratio of 0 the servers follow their callers: an untraced put leaves no span
    # (those of the traced put after it are written after any it would have left)
    with Client(oc.coordinator_addrs, timeout=30) as db:
        db.put("tr", "untraced", "k", b"v")
    traced.check_operations(oc.coordinator_addrs, "tr", oc.trace_file, expect,  # type: ignore[attr-defined]
                            only=("Put",))
    assert {s["trace"] for s in traced.all_spans(oc.trace_file)} <= traced.BEGUN


def test_health_says_not_serving_without_zookeeper(oc: Cluster) -> None:
    servers = [p for p in oc.procs.values() if p.kind != "zookeeper"]
    for p in servers:
        wait_for(lambda: _health(p.addr) == SERVING, 30, f"{p.name} to be SERVING")
    oc.signal("zookeeper", signal.SIGSTOP)
    try:
        for p in servers:
            wait_for(lambda: _health(p.addr) == NOT_SERVING, 30, f"{p.name} NOT_SERVING without ZooKeeper")
    finally:
        oc.signal("zookeeper", signal.SIGCONT)
    for p in servers:
        wait_for(lambda: _health(p.addr) == SERVING, 60, f"{p.name} SERVING again")
