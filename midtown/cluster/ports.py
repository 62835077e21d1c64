"""Free loopback ports below the ephemeral range (32768-60999 here, see PITFALLS.md).

MIDTOWN_PORTS=LOW-HIGH narrows the range, so that runs side by side (the test suite's
workers) pick from ranges that do not overlap."""

from __future__ import annotations

import os
import random
import socket

_LOW, _HIGH = 20000, 32000


def port_range() -> tuple[int, int]:
    """[low, high) to pick from: MIDTOWN_PORTS if set, else the default."""
    text = os.environ.get("MIDTOWN_PORTS", "")
    if not text:
        return _LOW, _HIGH
    try:
        low, high = (int(x) for x in text.split("-"))
    except ValueError:
        raise ValueError(f"MIDTOWN_PORTS: {text!r} is not LOW-HIGH") from None
    if not 1024 <= low < high <= 65536:
        raise ValueError(f"MIDTOWN_PORTS: {text!r} is not a range of ports above 1023")
    return low, high


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
    low, high = port_range()
    if n > high - low:
        raise ValueError(f"{n} ports asked for, the range {low}-{high} holds {high - low}")
    out: list[int] = []
    while len(out) < n:
        p = rng.randrange(low, high)
        if p not in out and is_free(p, host):
            out.append(p)
    return out
