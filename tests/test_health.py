"""The health service and the self-probe (runtime/health.py), on a real gRPC server in
this process: watches with short deadlines, cancelled, of random services, racing status
changes, never wedge the server (grpcio-health-checking's servicer did: PITFALLS.md); a
server that stops answering its own port is found out."""

from __future__ import annotations

import functools
import random
import threading
import time
from collections.abc import Callable
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from runtime import health

SERVICES = ["", "midtown.kv.v1.KV", "no.such.Service"]


def _server(threads: int = 16) -> tuple[grpc.Server, health.Health, str]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=threads))
    h = health.Health(max(health.WATCHES_MIN, threads // health.WATCH_SHARE))
    health_pb2_grpc.add_HealthServicer_to_server(h, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    h.set("", health.SERVING)
    h.set("midtown.kv.v1.KV", health.SERVING)
    return server, h, f"127.0.0.1:{port}"


def race(bodies: list[Callable[[], None]], stop: threading.Event, seconds: float) -> list[threading.Thread]:
    """Each of `bodies` in a daemon thread for `seconds`, then `stop` set: the threads that
    had not ended 10 s later (a server holding their calls)."""
    threads = [threading.Thread(target=b, daemon=True) for b in bodies]
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join(10)
    return [t for t in threads if t.is_alive()]


def _race(addr: str, h: health.Health, seconds: float, seed: int) -> None:
    """Four threads open watches (some cancelled at once, some read to their deadline,
    some left after a message) while another flips the statuses as fast as it can."""
    stop = threading.Event()

    def watcher(n: int) -> None:
        rnd = random.Random(seed * 100 + n)
        with grpc.insecure_channel(addr) as ch:
            stub = health_pb2_grpc.HealthStub(ch)
            while not stop.is_set():
                req = health_pb2.HealthCheckRequest(service=rnd.choice(SERVICES))
                call = stub.Watch(req, timeout=rnd.uniform(0.01, 0.3))
                try:
                    how = rnd.random()
                    if how < 0.3:
                        call.cancel()
                    elif how < 0.6:
                        next(call)
                        call.cancel()
                    else:
                        for _ in call:
                            pass
                except (grpc.RpcError, StopIteration):
                    pass

    def flipper() -> None:
        rnd = random.Random(seed)
        while not stop.is_set():
            h.set(rnd.choice(SERVICES[:2]), rnd.choice([health.SERVING, health.NOT_SERVING]))

    stuck = race([*(functools.partial(watcher, n) for n in range(4)), flipper], stop, seconds)
    assert stuck == [], "a racing thread did not end: the server holds its calls"


def test_racing_watches_and_status_changes_leave_the_server_answering() -> None:
    server, h, addr = _server()
    try:
        for seed in range(3):
            _race(addr, h, 1.5, seed)
            h.set("", health.SERVING)
            with grpc.insecure_channel(addr) as ch:  # a new connection: answered within a second
                r = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=1.0)
                assert r.status == health.SERVING
            assert health.answers(grpc.insecure_channel(addr), 1.0)
        assert h._watches == 0, "a watch that ended still counts"
    finally:
        server.stop(0)


def test_a_watch_sends_each_change_and_ends_with_its_call() -> None:
    server, h, addr = _server()
    try:
        with grpc.insecure_channel(addr) as ch:
            call = health_pb2_grpc.HealthStub(ch).Watch(health_pb2.HealthCheckRequest(service=""), timeout=10)
            it = iter(call)
            assert next(it).status == health.SERVING
            h.set("", health.NOT_SERVING)
            assert next(it).status == health.NOT_SERVING
            h.set("", health.SERVING)
            assert next(it).status == health.SERVING
            call.cancel()
        deadline = time.monotonic() + 5
        while h._watches and time.monotonic() < deadline:
            time.sleep(0.02)
        assert h._watches == 0
        with grpc.insecure_channel(addr) as ch:
            nope = health_pb2.HealthCheckRequest(service="nope")
            unknown = health_pb2_grpc.HealthStub(ch).Watch(nope, timeout=1)
            assert next(iter(unknown)).status == health.SERVICE_UNKNOWN
            unknown.cancel()
            with pytest.raises(grpc.RpcError) as e:
                health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service="nope"), timeout=1)
            assert e.value.code() == grpc.StatusCode.NOT_FOUND
    finally:
        server.stop(0)


def test_watches_beyond_the_bound_are_refused_not_queued() -> None:
    server, h, addr = _server(threads=16)
    try:
        with grpc.insecure_channel(addr) as ch:
            stub = health_pb2_grpc.HealthStub(ch)
            held = [stub.Watch(health_pb2.HealthCheckRequest(), timeout=10) for _ in range(h.watches_max)]
            for c in held:
                next(iter(c))
            with pytest.raises(grpc.RpcError) as e:
                next(iter(stub.Watch(health_pb2.HealthCheckRequest(), timeout=5)))
            assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert stub.Check(health_pb2.HealthCheckRequest(), timeout=1).status == health.SERVING
            for c in held:
                c.cancel()
    finally:
        server.stop(0)


def test_unanswered_checks_in_a_row_make_a_server_wedged() -> None:
    u = health.Unanswered(3)
    assert [u.checked(a) for a in (False, False, True, False, False)] == [False] * 5
    assert u.checked(False) is True


def test_the_self_probe_finds_a_server_that_stopped_answering() -> None:
    """A server whose worker pool no call leaves (here: every worker held by a blocked
    call) answers no check on its own port: the probe calls `wedged`."""
    block = threading.Event()

    class Stuck(health_pb2_grpc.HealthServicer):
        def Check(self, request, context):  # type: ignore[no-untyped-def]
            block.wait(30)
            return health_pb2.HealthCheckResponse(status=health.SERVING)

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    health_pb2_grpc.add_HealthServicer_to_server(Stuck(), server)
    addr = health.own_port(server, health.probe_directory(), "0")
    assert addr is not None
    server.start()
    stop, wedged = threading.Event(), []
    block.set()  # answering at first: no verdict
    health.watch_own_port("test server", addr, stop, wedged.append)
    time.sleep(health.PROBE_INTERVAL_S * 2.5)
    assert wedged == []
    block.clear()
    each_s = health.PROBE_INTERVAL_S + health.PROBE_TIMEOUT_S
    deadline = time.monotonic() + each_s * (health.PROBE_FAILURES_MAX + 2)
    while not wedged and time.monotonic() < deadline:
        time.sleep(0.1)
    stop.set()
    block.set()
    server.stop(0)
    assert wedged and "test server" in wedged[0] and "wedged" in wedged[0]


def test_the_probes_directory_is_short_whatever_tmpdir_says(monkeypatch: pytest.MonkeyPatch,
                                                             tmp_path: Path) -> None:
    """A Unix socket's path has at most 107 bytes; a test's or a benchmark's TMPDIR is
    longer (a server that could not bind its probe exited at start)."""
    import tempfile

    deep = tmp_path / ("d" * 80)
    deep.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(deep))
    d = health.probe_directory()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    try:
        assert len(d) < health.SHORT_PATH + 20
        assert health.own_port(server, d, "3") is not None
        assert health.own_port(server, str(deep / ("x" * 40)), "3") is None  # too long: unprobed, not dead
    finally:
        server.stop(0)
