"""A server whose start fails ends (runtime/process.py serve_all), with EXIT_START_FAILED,
for its supervisor to start it again: its gRPC server's threads, already serving, once kept
a process alive whose coordinator had not started (ZooKeeper's connection dropped in the
first second of a loaded machine: `machine up` then waited on it until its own deadline).
Real processes: a gRPC server on a free loopback port, and a start that fails."""

from __future__ import annotations

import subprocess
import sys

import pytest

from runtime.process import EXIT_START_FAILED

PROGRAM = """
import sys
from concurrent import futures
import grpc
from runtime.process import Part, serve_all

def start():
    if sys.argv[1] == "defect":
        raise RuntimeError("a defect in start")
    raise SystemExit("watching the datasets: ZooKeeper did not answer for 60 s (ConnectionLoss)")

server = grpc.server(futures.ThreadPoolExecutor(4))
server.add_insecure_port("127.0.0.1:0")
serve_all([Part(server, "", start, lambda: None, name="coordinator")], "ready")
"""


@pytest.mark.parametrize("how, says, traceback", [
    ("defect", "coordinator did not start (exit 71)", True),
    ("zookeeper", "coordinator: watching the datasets: ZooKeeper did not answer for 60 s", False),
])
def test_a_server_whose_start_fails_ends_for_its_supervisor_to_start_it_again(how: str, says: str,
                                                                               traceback: bool) -> None:
    p = subprocess.run([sys.executable, "-c", PROGRAM, how], capture_output=True, text=True, timeout=60)
    assert p.returncode == EXIT_START_FAILED, p.stderr
    assert says in p.stderr and "ready" not in p.stdout
    assert ("Traceback" in p.stderr) == traceback  # an expected fault is one line; a defect shows where
