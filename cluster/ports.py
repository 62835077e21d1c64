"""Free loopback ports below the ephemeral range (32768-60999 here, see PITFALLS.md).

A port found free is only free until a process binds it, and clusters started at the same
moment (tests running side by side, `bench` starting its own) pick theirs in the same
second. So every pick on this machine goes through one file lock, and a port handed out is
not handed out again for HELD_S, whoever asks (the file records when each was given)."""

from __future__ import annotations

import fcntl
import json
import os
import random
import socket
import tempfile
import time
from pathlib import Path

_LOW, _HIGH = 20000, 32000
HELD_S = 300.0  # long enough for a cluster's processes to start and bind what they were given
# In /tmp itself, not $TMPDIR: processes with TMPDIRs of their own share the machine's ports.
_GIVEN = (Path("/tmp") if Path("/tmp").is_dir() else Path(tempfile.gettempdir())) / "midtown-ports-given.json"


def is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """n distinct free ports, none handed out by this function to anyone in the last HELD_S."""
    rng = random.Random()
    fd = os.open(str(_GIVEN) + ".lock", os.O_CREAT | os.O_RDWR, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        now = time.time()
        given = {int(p): t for p, t in _read_given().items() if now - t < HELD_S}
        out: list[int] = []
        while len(out) < n:
            p = rng.randrange(_LOW, _HIGH)
            if p not in out and p not in given and is_free(p, host):
                out.append(p)
        given.update({p: now for p in out})
        tmp = _GIVEN.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(given))
        os.replace(tmp, _GIVEN)
        return out
    finally:
        os.close(fd)  # and the lock with it


def _read_given() -> dict[str, float]:
    try:
        got = json.loads(_GIVEN.read_text())
        return {str(k): float(v) for k, v in got.items()} if isinstance(got, dict) else {}
    except (OSError, ValueError):
        return {}
