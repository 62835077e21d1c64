"""Client calls over TLS: a coordinator started with a certificate takes client calls only
over TLS, while storage nodes answer it on a plaintext internal port; the SDK and the
command line call it with the CA's certificate."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import trustme

from cluster import Cluster
from cluster.ports import free_ports
from midtown import Client, errors
from midtown_pb import kv_pb2 as pb
from midtown_pb import kv_pb2_grpc
from tests.integration.conftest import started

pytestmark = pytest.mark.integration


@pytest.fixture
def tls(tmp_path: Path) -> Iterator[tuple[Cluster, str, str, Path]]:
    """A local cluster plus coordinator 7 with TLS: (cluster, TLS address, callback address,
    the CA's PEM file)."""
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert.private_key_pem.write_to_path(str(tmp_path / "key.pem"))
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "cert.pem"))
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    port, cb = free_ports(2)
    with started(tmp_path / "c") as c:
        c.create_dataset("t")
        p = subprocess.Popen([sys.executable, "-m", "coordinator.server", "--id", "7", "--port", str(port),
                              "--zk", c.zk_hosts, "--tls-cert", str(tmp_path / "cert.pem"),
                              "--tls-key", str(tmp_path / "key.pem"), "--callback-port", str(cb)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            line = p.stdout.readline() if p.stdout else ""
            assert "ready" in line and "TLS" in line, (line, p.stderr.read() if p.stderr else "")
            yield c, f"127.0.0.1:{port}", f"127.0.0.1:{cb}", tmp_path / "ca.pem"
        finally:
            p.send_signal(signal.SIGTERM)
            p.wait(30)


def test_clients_call_over_tls_and_storage_nodes_answer_inside(tls: tuple[Cluster, str, str, Path]) -> None:
    c, addr, callback, ca = tls
    with Client(addr, tls_ca=str(ca), timeout=15) as db:
        v = db.put("t", "p", "k", b"1")
        assert db.get("t", "p", "k").value == b"1"  # type: ignore[union-attr]
        # A check-and-set waits for a storage node's answer: it comes on the callback port.
        assert db.cas("t", "p", "k", b"2", expected=b"1").succeeded
        assert db.incr("t", "p", "n", 5) == 5 and v >= 1
    # Without the CA the handshake fails: no data is sent in clear.
    refused = (errors.Unavailable, errors.DeadlineExceeded)
    with Client(addr, timeout=2, retries=1) as plain, pytest.raises(refused):
        plain.get("t", "p", "k")
    # Trusting another CA fails too.
    other = trustme.CA().cert_pem.bytes()
    with Client(addr, tls_ca=other, timeout=2, retries=1) as wrong, pytest.raises(refused):
        wrong.get("t", "p", "k")
    # A CA file that cannot be read is named.
    with pytest.raises(ValueError, match="tls_ca"):
        Client(addr, tls_ca="/nonexistent.pem")
    # The plaintext port is for storage nodes' answers only: it has no KV service.
    stub = kv_pb2_grpc.KVStub(grpc.insecure_channel(callback))
    with pytest.raises(grpc.RpcError) as e:
        stub.Get(pb.GetRequest(header=pb.RequestHeader(dataset="t"), key=pb.Key(partition=b"p", local=b"k")),
                 timeout=10)
    assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED
    # The command line, with --tls-ca or $MIDTOWN_TLS_CA.
    env = {**os.environ, "MIDTOWN_ZK": c.zk_hosts}

    def mt(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "cli", *args], capture_output=True, text=True,
                              timeout=60, env={**env, **extra}, check=False)

    got = mt("get", "t", "p", "k", "--coordinator", addr, "--tls-ca", str(ca), "--json")
    assert got.returncode == 0 and '"value": "2"' in got.stdout.replace("'", '"'), got
    assert mt("put", "t", "p", "cli", "x", "--coordinator", addr, MIDTOWN_TLS_CA=str(ca)).returncode == 0
    bad = mt("get", "t", "p", "k", "--coordinator", addr, "--tls-ca", "/nonexistent.pem")
    assert bad.returncode == 2 and "--tls-ca" in bad.stderr and "Traceback" not in bad.stderr


def test_tls_flags_go_together(tmp_path: Path) -> None:
    p = subprocess.run([sys.executable, "-m", "coordinator.server", "--id", "1", "--port", "1", "--zk",
                        "127.0.0.1:1", "--tls-cert", "x.pem"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "--tls-cert and --tls-key go together" in p.stderr
    p = subprocess.run([sys.executable, "-m", "coordinator.server", "--id", "1", "--port", "1", "--zk",
                        "127.0.0.1:1", "--tls-cert", str(tmp_path / "no.pem"), "--tls-key",
                        str(tmp_path / "no.pem"), "--callback-port", "2"],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "--tls-cert" in p.stderr and "No such file" in p.stderr
