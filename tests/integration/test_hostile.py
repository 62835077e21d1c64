"""Calls on the internal services from a process that is not a cluster member: refused or
harmless."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from cluster import Cluster
from midtown import Client
from midtown_pb import kv_pb2 as pb
from midtown_pb import kv_pb2_grpc
from tests.integration.conftest import started

pytestmark = pytest.mark.integration


@pytest.fixture
def hc(tmp_path: Path) -> Iterator[Cluster]:
    with started(tmp_path / "c") as c:
        yield c


def _metric(c: Cluster, name: str) -> float:
    port = c.procs["coordinator-0"].metrics_port
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return sum(float(line.split()[-1]) for line in text.splitlines()
               if line.startswith(name) and not line.startswith("#"))


def _callback_addr(c: Cluster) -> str:
    """The coordinator's internal callback address, as its start-up line says."""
    log = (c.dir / "logs" / "coordinator-0.log").read_text()
    line = [x for x in log.splitlines() if "answers on" in x][-1]
    return line.rsplit("answers on ", 1)[1].strip()


def test_a_forged_deliver_raises_no_alarm_and_answers_nobody(hc: Cluster) -> None:
    hc.create_dataset("f")
    with Client(hc.coordinator_addrs, timeout=30) as db:
        db.put("f", "k", "l", b"v0")
        # A check-and-set waits for the storage nodes' answers (a plain put is answered by
        # the log): its request id is one the coordinator takes answers for.
        cas = db.cas("f", "k", "l", b"v", expected=b"v0", request_id=b"known-id")
        assert cas.succeeded
        version = cas.version
        # Answers for that record, and for one never sent, claiming other digests.
        forged = [pb.RecordResult(request_id=rid, log_id=0, position=version - 1, shard=s,
                                  digest=0xBAD, node_id=n, applied=True)
                  for rid in (b"known-id", b"never-sent") for s in range(64) for n in range(3)]
        # On the client port there is no callback service at all.
        stub = kv_pb2_grpc.CallbackStub(grpc.insecure_channel(hc.coordinator_addrs[0]))
        with pytest.raises(grpc.RpcError) as ei:
            stub.Deliver(pb.DeliverRequest(results=forged), timeout=10)
        assert ei.value.code() == grpc.StatusCode.UNIMPLEMENTED
        # On the internal port (plaintext here), answers are dropped uncompared: for records
        # it never sent, and for the real request id too, since the forger does not know the
        # record's answer secret. (Mutual TLS, test_mtls.py, refuses the caller itself.)
        internal = kv_pb2_grpc.CallbackStub(grpc.insecure_channel(_callback_addr(hc)))
        internal.Deliver(pb.DeliverRequest(results=forged), timeout=10)
        assert _metric(hc, "midtown_replica_divergence_total") == 0
        assert _metric(hc, "midtown_callback_answers_refused_total") >= len(forged)
        got = db.get("f", "k", "l")
        assert got is not None and got.value == b"v" and got.version == version
