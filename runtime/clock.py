"""The clock a read lease is timed on (log/lease.py): monotonic, and counting through a
suspend of the machine (Linux CLOCK_BOOTTIME; CLOCK_MONOTONIC stops while the machine
sleeps, so a writer woken from a suspend would think its lease younger than it is). It is
the world port's (runtime/world.py): a simulation gives each process its own, drifting."""

from __future__ import annotations

from runtime import world


def lease_clock() -> float:
    """Seconds since an arbitrary point, the same for every process of this machine."""
    return world.boot_clock()
