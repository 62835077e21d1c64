"""The clock a read lease is timed on (log/lease.py): monotonic, and counting through a
suspend of the machine (Linux CLOCK_BOOTTIME; CLOCK_MONOTONIC stops while the machine
sleeps, so a writer woken from a suspend would think its lease younger than it is)."""

from __future__ import annotations

import time

_CLOCK = getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC)


def lease_clock() -> float:
    """Seconds since an arbitrary point, the same for every process of this machine."""
    return time.clock_gettime(_CLOCK)
