"""A client of the log: finds the writer of a log through ZooKeeper and appends to it,
following redirects and retrying across writer changes; reads a log from any replica.

An append that fails with an unknown outcome (the writer stopped mid-way) is retried when
`retry_unknown` is set: the entry may then be in the log twice. Consumers deduplicate with
the request id carried in the payload (storage nodes do)."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Self

import grpc
from kazoo.client import KazooClient

from log import zk as zkpaths
from midtown_pb import log_pb2 as pb
from midtown_pb import log_pb2_grpc
from runtime import transport


class LogError(Exception):
    """An error from the log, with the gRPC status code and the server's message."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Appended:
    first_position: int
    count: int
    timestamp_ms: int
    epoch: int
    attempts: int


class LogClient:
    def __init__(self, zk_hosts: str | None = None, zk: KazooClient | None = None,
                 own_zk: bool = False) -> None:
        assert zk_hosts or zk
        self._own_zk = zk is None or own_zk  # closed with this client
        self.zk = zk or zkpaths.connect(zk_hosts)  # type: ignore[arg-type]
        self._channels: dict[str, grpc.Channel] = {}
        self._stubs: dict[str, log_pb2_grpc.LogStub] = {}  # a stub builds a callable per method
        self._writers: dict[int, str] = {}
        self._lock = threading.Lock()
        self._topology: zkpaths.Topology | None = None

    def close(self) -> None:
        for ch in self._channels.values():
            ch.close()
        if self._own_zk:
            self.zk.stop()
            self.zk.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *a: object) -> None:
        self.close()

    def stub(self, addr: str) -> log_pb2_grpc.LogStub:
        stub = self._stubs.get(addr)
        if stub is None:
            with self._lock:
                ch = self._channels.get(addr)
                if ch is None:
                    ch = self._channels[addr] = transport.channel(addr)
                stub = self._stubs[addr] = log_pb2_grpc.LogStub(ch)
        return stub

    def topology(self) -> zkpaths.Topology:
        if self._topology is None:
            t = zkpaths.read_topology(self.zk)
            if t is None:
                raise LogError(grpc.StatusCode.UNAVAILABLE, "no Midtown cluster in this ZooKeeper")
            self._topology = t
        return self._topology

    def check_log(self, log_id: int) -> None:
        n = self.topology().logs
        if not 0 <= log_id < n:
            raise LogError(grpc.StatusCode.NOT_FOUND,
                           f"log_id: unknown log {log_id}; this cluster has logs 0..{n - 1}")

    def servers(self) -> dict[int, str]:
        return {i: s["addr"] for i, s in zkpaths.servers(self.zk).items()}

    def writer_addr(self, log_id: int, refresh: bool = False) -> str | None:
        if not refresh and log_id in self._writers:
            return self._writers[log_id]
        w = zkpaths.read_writer(self.zk, log_id)
        if w is None:
            self._writers.pop(log_id, None)
            return None
        self._writers[log_id] = w["addr"]
        return w["addr"]  # type: ignore[no-any-return]

    def append(self, log_id: int, payloads: list[bytes], timeout_s: float = 30.0,
               retry_unknown: bool = True) -> Appended:
        self.check_log(log_id)
        deadline = time.monotonic() + timeout_s
        attempts = 0
        refresh = False
        backoff = 0.05
        while True:
            attempts += 1
            addr = self.writer_addr(log_id, refresh=refresh)
            left = deadline - time.monotonic()
            if left <= 0:
                raise LogError(grpc.StatusCode.DEADLINE_EXCEEDED,
                               f"log {log_id}: no acknowledged append within {timeout_s}s")
            if addr is None:
                time.sleep(min(backoff, left))
                backoff = min(backoff * 2, 0.5)
                refresh = True
                continue
            try:
                local = _append_in_process(addr, log_id, payloads, min(left, 10.0))
                if local is not None:
                    return Appended(*local, attempts)
                r = self.stub(addr).Append(
                    pb.AppendRequest(log_id=log_id, payloads=payloads), timeout=min(left, 10.0)
                )
                return Appended(r.first_position, r.count, r.timestamp_ms, r.epoch, attempts)
            except grpc.RpcError as e:
                code, msg = e.code(), e.details() or ""
                if code == grpc.StatusCode.FAILED_PRECONDITION and "not its writer" in msg:
                    redirect = dict(e.trailing_metadata() or ()).get("midtown-writer")
                    if redirect:
                        self._writers[log_id] = redirect
                        refresh = False
                    else:
                        refresh = True
                    continue
                unknown = code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
                if unknown and (retry_unknown or "no writer" in msg or _not_sent(e)):
                    time.sleep(min(backoff * (1 + random.random()), max(0.0, left)))
                    backoff = min(backoff * 2, 0.5)
                    refresh = True
                    continue
                raise LogError(code, msg) from None

    def read(self, log_id: int, from_position: int = 0, follow: bool = False,
             max_entries: int = 0, server: str | None = None,
             timeout_s: float | None = None) -> Iterator[pb.Entry]:
        """Committed entries from `from_position`, from one replica: the log's writer by
        default (it knows the commit point first), or the server named."""
        self.check_log(log_id)
        addr = server or self.writer_addr(log_id, refresh=True) or self._any_server()
        try:
            for resp in self.stub(addr).Read(
                pb.ReadRequest(log_id=log_id, from_position=from_position, follow=follow,
                               max_entries=max_entries),
                timeout=timeout_s,
                wait_for_ready=server is not None,  # a named server may be restarting
            ):
                yield from resp.entries
        except grpc.RpcError as e:
            raise LogError(e.code(), e.details() or "") from None

    def _any_server(self) -> str:
        servers = list(self.servers().values())
        if not servers:
            raise LogError(grpc.StatusCode.UNAVAILABLE, "no log server is registered")
        return random.choice(servers)

    def truncate(self, log_id: int, before: int) -> int:
        w = self.writer_addr(log_id, refresh=True) or self._any_server()
        try:
            return int(self.stub(w).Truncate(
                pb.TruncateRequest(log_id=log_id, before_position=before), timeout=10
            ).first_position)
        except grpc.RpcError as e:
            raise LogError(e.code(), e.details() or "") from None

    def status(self) -> list[dict]:
        """Per log: writer, epoch, first and last position, and each replica's position."""
        topo = self.topology()
        rows: dict[int, dict] = {}
        for log_id in range(topo.logs):
            meta, _ = zkpaths.read_metadata(self.zk, log_id)
            w = zkpaths.read_writer(self.zk, log_id)
            rows[log_id] = {
                "log": log_id, "writer": w["server"] if w else None, "epoch": meta.epoch,
                "first": 0, "last": -1, "replicas": {},
                "segments": len(meta.segments),
            }
        for _sid, addr in sorted(self.servers().items()):
            try:
                st = self.stub(addr).Status(pb.StatusRequest(), timeout=5)
            except grpc.RpcError:
                continue
            for ls in st.logs:
                row = rows.get(ls.log_id)
                if row is None:
                    continue
                row["first"] = max(row["first"], ls.first_position)
                row["last"] = max(row["last"], ls.last_position)
                for rp in ls.replicas:
                    row["replicas"][rp.server_id] = rp.position
        return [rows[k] for k in sorted(rows)]


class _InProcessError(grpc.RpcError):
    """A failed append to the writer in this process, shaped like the gRPC error the
    Append call would have raised, so both take the same retry path."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self) -> tuple:
        return ()


def _append_in_process(addr: str, log_id: int, payloads: list[bytes],
                       timeout_s: float) -> tuple[int, int, int, int] | None:
    """Append straight to the writer when it runs in this process (midtown.cluster.host), with
    the checks and outcomes of the Append call; None when it does not (call it)."""
    from concurrent.futures import TimeoutError as FutureTimeout

    from log.driver import Busy, WriterFailed
    from log.entry import validate_batch
    from log.node import Node
    from runtime import inprocess

    node = inprocess.lookup(addr, Node)
    d = node.writers.get(log_id) if node is not None else None
    if d is None or d.failed.is_set():
        return None  # not here, or not writing: the server answers with a redirect
    try:
        validate_batch(payloads)
    except ValueError as e:
        raise _InProcessError(grpc.StatusCode.INVALID_ARGUMENT, str(e)) from None
    inprocess.used("append")
    try:
        r = d.submit(payloads).result(timeout=timeout_s)
    except Busy as e:
        raise _InProcessError(grpc.StatusCode.RESOURCE_EXHAUSTED, f"{e}; retry later") from None
    except WriterFailed as e:
        raise _InProcessError(grpc.StatusCode.UNAVAILABLE,
                              f"log {log_id}: outcome unknown, the writer stopped ({e})") from None
    except FutureTimeout:
        raise _InProcessError(grpc.StatusCode.DEADLINE_EXCEEDED,
                              f"log {log_id}: outcome unknown") from None
    return r.first_position, r.count, r.timestamp_ms, r.epoch


def _not_sent(e: grpc.RpcError) -> bool:
    """Connection refused: the request never reached a server."""
    d = (e.details() or "").lower()
    return "connection refused" in d or "failed to connect" in d

