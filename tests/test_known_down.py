"""A refused connection is known in milliseconds: the `midtown` command says so (exit 5)
after a short bounded retry instead of waiting out --timeout, and keeps the timeout for a
server that does not answer (runtime/reach.py, midtown/retries.py)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import grpc
import pytest

from midtown import errors
from midtown.retries import Attempts
from midtown_pb import kv_pb2 as pb
from runtime import reach


def _refused_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = int(s.getsockname()[1])
    s.close()
    return port


@contextmanager
def _silent() -> Iterator[int]:
    """A port that takes connections and never answers (a paused server's, to a client)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    try:
        yield int(s.getsockname()[1])
    finally:
        s.close()


def test_down_now_tells_refused_from_silent() -> None:
    port = _refused_port()
    assert reach.down_now(f"127.0.0.1:{port}") == "connection refused"
    assert reach.down_now("no-such-host.invalid:2181") == "no such host"
    assert reach.down_now("127.0.0.1") == "'127.0.0.1' is not HOST:PORT"
    with _silent() as p:
        assert reach.down_now(f"127.0.0.1:{p}") is None
        # One server of the ensemble may answer: not all down, whatever the others do.
        assert reach.all_down([f"127.0.0.1:{port}", f"127.0.0.1:{p}"], retry_s=0.2) is None
    got = reach.all_down([f"127.0.0.1:{port}"], retry_s=0.2)
    assert got == f"127.0.0.1:{port}: connection refused"
    assert reach.zk_addrs("a:1, b:2/chroot") == ["a:1", "b:2"]


class _Unavailable(grpc.RpcError):
    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE

    def details(self) -> str:
        return "down"


def test_attempts_give_up_on_a_known_down_coordinator_within_the_bound() -> None:
    a = Attempts("Get", retries=100, timeout_s=30.0, known_down_s=0.3)
    t0 = time.monotonic()
    with pytest.raises(errors.Unavailable, match=r"^Get: c:1: connection refused \(attempt \d+"):
        while True:
            a.start(pb.GetRequest())
            _, pause = a.failed(_Unavailable(), "c:1: connection refused")
            assert time.monotonic() + pause <= t0 + 0.3 + 0.05  # never sleeps past the bound
            time.sleep(pause)
    assert time.monotonic() - t0 < 1.0


def test_attempts_ride_out_a_restart_when_one_answer_comes_between() -> None:
    """A failure that is not known-down (a server that may be there) starts the count again;
    without known_down_s, a refused coordinator is retried until the deadline."""
    a = Attempts("Get", retries=100, timeout_s=30.0, known_down_s=0.2)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 0.6:
        a.start(pb.GetRequest())
        down = None if a.attempt % 3 == 2 else "c:1: connection refused"
        _, pause = a.failed(_Unavailable(), down)
        time.sleep(min(pause, 0.05))
    b = Attempts("Get", retries=100, timeout_s=0.5)
    with pytest.raises(errors.DeadlineExceeded):
        while True:
            b.start(pb.GetRequest())
            _, pause = b.failed(_Unavailable(), "c:1: connection refused")
            time.sleep(pause)


def _midtown(*args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {k: v for k, v in os.environ.items() if k != "MIDTOWN_ZK"}
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "cli", *args], capture_output=True, text=True, env=env,
                       timeout=120)
    return p, time.monotonic() - t0


@pytest.mark.parametrize("flag", ["--zk", "--coordinator"])
def test_the_command_says_at_once_that_nothing_listens(flag: str) -> None:
    """Exit 5, naming the address and the refusal, long before --timeout (30 s here): the
    retry is bounded by reach.REFUSED_RETRY_S (1 s), the rest is starting Python."""
    port = _refused_port()
    p, took = _midtown(flag, f"127.0.0.1:{port}", "--timeout", "30", "get", "users", "u1", "name")
    assert p.returncode == 5, p.stderr
    assert f"127.0.0.1:{port}: connection refused" in p.stderr
    assert took < 10, f"{took:.1f}s: the refusal waited for the timeout"


def test_the_command_waits_out_its_timeout_for_a_server_that_does_not_answer() -> None:
    with _silent() as port:
        p, took = _midtown("--zk", f"127.0.0.1:{port}", "--timeout", "3", "get", "users", "u1", "name")
    assert p.returncode == 5, p.stderr
    assert "within 3s" in p.stderr
    assert took >= 3
