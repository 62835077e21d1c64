"""Free loopback ports below the ephemeral range (32768-60999 here, see PITFALLS.md)."""

from __future__ import annotations

import random
import socket

_LOW, _HIGH = 20000, 32000


def is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """n distinct free ports, picked at random so parallel runs rarely collide."""
    rng = random.Random()
    out: list[int] = []
    while len(out) < n:
        p = rng.randrange(_LOW, _HIGH)
        if p not in out and is_free(p, host):
            out.append(p)
    return out
