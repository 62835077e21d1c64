"""Quorum tracking: which positions a write quorum of replicas has made durable.

The last-add-confirmed (LAC) position is the highest position p such that every position
from the tracker's start through p is stored on at least `ack_quorum` replicas. Appends are
acknowledged in order, only up to the LAC."""

from __future__ import annotations

from collections.abc import Iterable


class AckTracker:
    def __init__(self, ack_quorum: int, lac: int) -> None:
        assert ack_quorum >= 1
        self.ack_quorum = ack_quorum
        self.lac = lac
        self._acks: dict[int, set[int]] = {}

    def ack(self, replica: int, positions: Iterable[int]) -> int:
        """Record that `replica` durably holds `positions`; returns the (new) LAC."""
        for p in positions:
            if p > self.lac:
                self._acks.setdefault(p, set()).add(replica)
        while len(self._acks.get(self.lac + 1, ())) >= self.ack_quorum:
            del self._acks[self.lac + 1]
            self.lac += 1
        return self.lac

    def holders(self, position: int) -> set[int]:
        """Replicas known to hold an unconfirmed position (empty once confirmed)."""
        return set(self._acks.get(position, ()))

    def pending(self) -> int:
        return len(self._acks)
