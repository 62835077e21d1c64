"""Ports for local clusters: processes that pick at the same moment never get the same port
(cluster/ports.py), though none of them binds what it got."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_processes_picking_at_once_never_share_a_port(tmp_path: Path) -> None:
    """Six processes, each with a TMPDIR of its own (as the signal test's commands have),
    pick 150 ports each at once."""
    code = "from cluster.ports import free_ports; print(' '.join(map(str, free_ports(150))))"
    for i in range(6):
        (tmp_path / str(i)).mkdir()
    procs = [subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "TMPDIR": str(tmp_path / str(i))})  # each its own
             for i in range(6)]
    picked = []
    for p in procs:
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0
        picked.append([int(x) for x in out.split()])
    every = [port for ports in picked for port in ports]
    assert all(len(ports) == 150 for ports in picked)
    assert len(set(every)) == len(every), "a port handed out twice"
