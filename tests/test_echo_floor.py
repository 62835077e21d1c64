"""The floor `midtown bench kv` prints beside Midtown and etcd: a real echo server process,
called as the benchmark calls it, stopped by SIGTERM."""

from __future__ import annotations

import subprocess
import sys

import pytest

from midtown.bench import echo
from midtown.bench.kv import EchoFloor
from midtown.bench.loadgen import run_workload


def test_the_floor_answers_every_client_and_stops_cleanly() -> None:
    floor = EchoFloor()
    try:
        ops = floor.ops()
        assert echo.caller(floor.addr, b"abc")(0) == b"abc"
        r = run_workload(ops["cas"], 4, 0.3)
        assert r["errors"] == 0 and r["ops_per_s"] > 0
    finally:
        floor.stop()
    assert floor.proc.returncode == 0  # SIGTERM: a clean stop


@pytest.mark.parametrize("bad", ["", "x", "-1", "0", "65536"])
def test_the_floor_names_a_bad_port(bad: str) -> None:
    p = subprocess.run([sys.executable, "-m", "midtown.bench.echo", "--port", bad],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "--port" in p.stderr
