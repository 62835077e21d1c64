"""The version of an eventual dataset's value: the coordinators' hybrid clock stamps it
(coordinator/eventual.py), the storage nodes compare and age it (storage_node/lww.py):
ms << (COUNTER_BITS + ID_BITS) | counter << ID_BITS | coordinator id."""

from __future__ import annotations

COUNTER_BITS = 14
ID_BITS = 8


def version_millis(version: int) -> int:
    """The milliseconds a version was stamped at."""
    return version >> (COUNTER_BITS + ID_BITS)
