"""etcd, the benchmarks' opponent: a three-member etcd 3.4 on loopback (Debian's
etcd-server), started, signalled and stopped here, and the two ways the benchmarks call it.

* `grpc` (the default): etcd's own API, gRPC over HTTP/2, as etcd's clients call it, through
  `proto/midtown_pb/etcd_kv.proto` (the KV service's Range, Put and Txn with etcd's field
  numbers). This is the fair opponent: Midtown's SDK calls gRPC too.
* `json`: etcd's v3 JSON gateway over HTTP/1.1 keep-alive connections, which the benchmarks
  used before; the gateway costs etcd CPU (JSON, base64, a second hop inside the server) on
  the same two cores, so it flattered Midtown. Kept to show the change in the ratios."""

from __future__ import annotations

import base64
import http.client
import json
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

import grpc

from cluster.ports import free_ports
from runtime import children

APIS = ("grpc", "json")


class KV(Protocol):
    """One client's view of etcd: what the benchmarks do with it."""

    def put(self, key: bytes, value: bytes) -> None: ...

    def get(self, key: bytes) -> bytes | None: ...

    def put_if(self, key: bytes, value: bytes, expected: bytes | None) -> bool:
        """Put `value` if the key holds `expected` (None: if the key was never created):
        one transaction; whether it applied."""
        ...


class Etcd:
    """Three members on free ports under `root`; `stop()` ends them. On loopback by default;
    `hosts`: each member's address, and `wrap(i, command)` the command that runs member i
    there (tests/integration/quiet_machines.py: `ip netns exec`, a member per machine)."""

    def __init__(self, root: Path, hosts: Sequence[str] = ("127.0.0.1",) * 3,
                 wrap: Callable[[int, list[str]], list[str]] | None = None) -> None:
        if not shutil.which("etcd"):
            raise SystemExit("etcd is not installed: run `make bench` (it installs Debian's etcd-server)")
        self.root = root
        self.hosts = list(hosts)
        ports = free_ports(6)
        self.client_ports = ports[:3]
        peers = ports[3:]
        cluster = ",".join(f"m{i}=http://{hosts[i]}:{peers[i]}" for i in range(3))
        self.cmds = [["etcd", "--name", f"m{i}", "--data-dir", str(root / f"m{i}"),
                      "--listen-client-urls", f"http://{hosts[i]}:{self.client_ports[i]}",
                      "--advertise-client-urls", f"http://{hosts[i]}:{self.client_ports[i]}",
                      "--listen-peer-urls", f"http://{hosts[i]}:{peers[i]}",
                      "--initial-advertise-peer-urls", f"http://{hosts[i]}:{peers[i]}",
                      "--initial-cluster", cluster, "--initial-cluster-state", "new",
                      "--initial-cluster-token", "midtown-bench"] for i in range(3)]
        if wrap is not None:
            self.cmds = [wrap(i, c) for i, c in enumerate(self.cmds)]
        self.procs: list[subprocess.Popen[bytes]] = []
        self._channels: dict[int, grpc.Channel] = {}
        self._lock = threading.Lock()
        try:  # whatever ends the start-up (a stop signal too) stops the members started
            for i in range(3):
                self.procs.append(self._start(i))
            self.wait_healthy(60)
        except BaseException:
            self.stop()
            raise

    def _start(self, i: int) -> subprocess.Popen[bytes]:
        return children.start(self.cmds[i], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def _gateway(self, i: int, path: str, body: dict | None = None, timeout_s: float = 2.0) -> dict:
        c = http.client.HTTPConnection(self.hosts[i], self.client_ports[i], timeout=timeout_s)
        try:
            if body is None:
                c.request("GET", path)
            else:
                c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
            return json.loads(c.getresponse().read())  # type: ignore[no-any-return]
        finally:
            c.close()

    def wait_healthy(self, timeout_s: float, members: tuple[int, ...] = (0, 1, 2)) -> None:
        """Until one of `members` answers /health true (it is up and has a leader)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for i in members:
                try:
                    if self._gateway(i, "/health").get("health") == "true":
                        return
                except (OSError, ValueError):
                    pass
            time.sleep(0.2)
        raise SystemExit(f"etcd did not become healthy (members {members})")

    def leader(self, timeout_s: float = 30.0) -> int:
        """The index of the member that leads now, from a live member's status."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            ids: dict[str, int] = {}
            leader = None
            for i in range(3):
                if self.procs[i].poll() is not None:
                    continue
                try:
                    s = self._gateway(i, "/v3/maintenance/status", {}, timeout_s=1.0)
                except (OSError, ValueError):
                    continue
                ids[str(s["header"]["member_id"])] = i
                leader = str(s.get("leader", "")) or leader
            if leader in ids:
                return ids[leader]
            time.sleep(0.1)
        raise SystemExit("etcd has no leader")

    def kill(self, i: int) -> None:
        self.procs[i].kill()
        self.procs[i].wait()

    def restart(self, i: int) -> None:
        """Start member `i` again on its data (after `kill`)."""
        self.procs[i] = self._start(i)

    def pause(self, i: int, paused: bool) -> None:
        # (measured from when it is stopped, as Midtown's writer is: Cluster.signal)
        children.pause(self.procs[i], paused)

    def stop(self) -> None:
        for ch in self._channels.values():
            ch.close()
        for p in self.procs:
            p.send_signal(signal.SIGCONT)
            p.terminate()
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()

    def client(self, i: int, api: str = "grpc", timeout_s: float = 30.0) -> KV:
        """A client of member `i % 3`. gRPC clients of a member share one channel (one HTTP/2
        connection), as an application's threads share one etcd client; a JSON client is
        one keep-alive HTTP/1.1 connection of its own."""
        m = i % 3
        if api == "json":
            return JsonKV(self.hosts[m], self.client_ports[m], timeout_s)
        with self._lock:
            if m not in self._channels:
                self._channels[m] = grpc.insecure_channel(f"{self.hosts[m]}:{self.client_ports[m]}")
            return GrpcKV(self._channels[m], timeout_s)


class GrpcKV:
    """etcd's KV service over gRPC."""

    def __init__(self, channel: grpc.Channel, timeout_s: float) -> None:
        from midtown_pb import etcd_kv_pb2 as pb
        from midtown_pb import etcd_kv_pb2_grpc as pbg

        self.pb = pb
        self.stub = pbg.KVStub(channel)
        self.timeout_s = timeout_s

    def put(self, key: bytes, value: bytes) -> None:
        self.stub.Put(self.pb.PutRequest(key=key, value=value), timeout=self.timeout_s)

    def get(self, key: bytes) -> bytes | None:
        r = self.stub.Range(self.pb.RangeRequest(key=key), timeout=self.timeout_s)
        return r.kvs[0].value if r.kvs else None

    def put_if(self, key: bytes, value: bytes, expected: bytes | None) -> bool:
        pb = self.pb
        if expected is None:
            cmp = pb.Compare(key=key, result=pb.Compare.EQUAL, target=pb.Compare.CREATE, create_revision=0)
        else:
            cmp = pb.Compare(key=key, result=pb.Compare.EQUAL, target=pb.Compare.VALUE, value=expected)
        r = self.stub.Txn(pb.TxnRequest(compare=[cmp], success=[
            pb.RequestOp(request_put=pb.PutRequest(key=key, value=value))]), timeout=self.timeout_s)
        return bool(r.succeeded)


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode()


class JsonKV:
    """etcd's v3 JSON gateway, one keep-alive HTTP/1.1 connection."""

    def __init__(self, host: str, port: int, timeout_s: float) -> None:
        self.conn = http.client.HTTPConnection(host, port, timeout=timeout_s)

    def _call(self, path: str, body: dict) -> dict:
        self.conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        r = self.conn.getresponse()
        data = r.read()
        if r.status != 200:
            raise RuntimeError(data[:200])
        return json.loads(data)  # type: ignore[no-any-return]

    def put(self, key: bytes, value: bytes) -> None:
        self._call("/v3/kv/put", {"key": _b64(key), "value": _b64(value)})

    def get(self, key: bytes) -> bytes | None:
        kvs = self._call("/v3/kv/range", {"key": _b64(key)}).get("kvs")
        return base64.b64decode(kvs[0].get("value", "")) if kvs else None

    def put_if(self, key: bytes, value: bytes, expected: bytes | None) -> bool:
        if expected is None:
            cmp = {"key": _b64(key), "result": "EQUAL", "target": "CREATE", "create_revision": "0"}
        else:
            cmp = {"key": _b64(key), "result": "EQUAL", "target": "VALUE", "value": _b64(expected)}
        r = self._call("/v3/kv/txn", {"compare": [cmp],
                                       "success": [{"requestPut": {"key": _b64(key), "value": _b64(value)}}]})
        return bool(r.get("succeeded"))


class FailingOver:
    """Puts through `clients` (one per member, each try bounded by its timeout): a put tries
    the member last used and, on a failure, the next, until its deadline. What Midtown's
    SDK does on its own, the harness does for etcd (bench failover, quiet-machines)."""

    def __init__(self, clients: list[KV], first: int) -> None:
        self.clients = clients
        self.at = first
        self._lock = threading.Lock()

    def put(self, key: bytes, value: bytes, deadline_s: float) -> None:
        deadline = time.monotonic() + deadline_s
        while True:
            with self._lock:
                at = self.at
            try:
                self.clients[at % len(self.clients)].put(key, value)
                return
            except grpc.RpcError:
                if time.monotonic() >= deadline:
                    raise
                with self._lock:
                    if self.at == at:
                        self.at += 1
