"""`cluster up --tls`: mutual TLS between every process of the cluster. A call on an
internal service from a process without a certificate of the cluster's CA is refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import trustme

from catalog import registry
from cluster import Cluster
from log import zk as logzk
from midtown import Client
from midtown_pb import kv_pb2 as kvpb
from midtown_pb import kv_pb2_grpc, log_pb2, log_pb2_grpc
from runtime import membership, transport
from tests.integration.conftest import started

pytestmark = pytest.mark.integration


@pytest.fixture
def mc(tmp_path: Path) -> Iterator[Cluster]:
    with started(tmp_path / "c", tls=True) as c:
        yield c


def _internal(c: Cluster) -> dict[str, tuple[str, str]]:
    """Each kind of internal port: (address, a call on it)."""
    zk = logzk.connect(c.zk_hosts)
    try:
        log_addr = logzk.servers(zk)[0]["addr"]
        storage_addr = membership.members(zk, registry.STORAGE_NODES)[0]
    finally:
        zk.stop()
        zk.close()
    text = (c.dir / "logs" / "coordinator-0.log").read_text()
    callback = [x for x in text.splitlines() if "answers on" in x][-1].rsplit("answers on ", 1)[1].strip()
    return {"log server": (log_addr, "fence"), "storage node": (storage_addr, "status"),
            "coordinator callback": (callback, "deliver")}


def _call(ch: grpc.Channel, what: str) -> None:
    if what == "fence":
        log_pb2_grpc.ReplicaStub(ch).Fence(log_pb2.FenceRequest(log_id=0, epoch=1), timeout=5)
    elif what == "status":
        kv_pb2_grpc.StorageStub(ch).Status(kvpb.NodeStatusRequest(), timeout=5)
    else:
        kv_pb2_grpc.CallbackStub(ch).Deliver(kvpb.DeliverRequest(), timeout=5)


def test_a_tls_cluster_works_and_refuses_strangers(mc: Cluster, tmp_path: Path) -> None:
    mc.create_dataset("t")
    assert mc.tls_ca is not None
    # Everything inside goes over mutual TLS: replication, tails, answers.
    with Client(mc.coordinator_addrs, tls_ca=str(mc.tls_ca), timeout=30) as db:
        db.put("t", "p", "k", b"1")
        assert db.cas("t", "p", "k", b"2", expected=b"1").succeeded
        assert db.get("t", "p", "k").value == b"2"  # type: ignore[union-attr]
    ca = mc.tls_ca.read_bytes()
    other = trustme.CA()
    stranger = other.issue_cert("127.0.0.1")
    for kind, (addr, what) in _internal(mc).items():
        attempts = {
            "plaintext": grpc.insecure_channel(addr),
            "TLS without a certificate": grpc.secure_channel(
                addr, grpc.ssl_channel_credentials(root_certificates=ca)),
            "a certificate of another CA": grpc.secure_channel(addr, grpc.ssl_channel_credentials(
                root_certificates=ca, private_key=stranger.private_key_pem.bytes(),
                certificate_chain=stranger.cert_chain_pems[0].bytes())),
        }
        for how, ch in attempts.items():
            with pytest.raises(grpc.RpcError) as ei:
                _call(ch, what)
            assert ei.value.code() == grpc.StatusCode.UNAVAILABLE, (kind, how, ei.value.details())
            ch.close()
        # A holder of a cluster certificate is served.
        transport.use(mc.credentials())
        try:
            ch = transport.channel(addr)
            if what != "fence":  # a fence at epoch 1 may be refused as stale: served all the same
                _call(ch, what)
            ch.close()
        finally:
            transport.use(None)
    # The command line uses the cluster's admin certificate and CA by itself.
    env = {k: v for k, v in os.environ.items() if not k.startswith("MIDTOWN_")}
    for args in (["node", "status"], ["log", "status"], ["get", "t", "p", "k"]):
        out = subprocess.run([sys.executable, "-m", "cli", *args, "--dir", str(mc.dir), "--json"],
                             capture_output=True, text=True, timeout=60, env=env)
        assert out.returncode == 0, (args, out.stderr)
        json.loads(out.stdout)
