"""Broken variants of the simulations: rules of the real code swapped for broken ones for
one run, to show that the simulation's checks catch what they are for."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from log import fencing
from log.messages import FenceReply
from log.replica import ReplicaCore
from log.writer import State, Writer

_INHERITED = object()
Swap = tuple[Any, str, Any]  # (owner: a module or a class, attribute name, the broken rule)


@contextmanager
def swapped(swaps: Iterable[Swap]) -> Iterator[None]:
    """Each (owner, name, rule) set for the run, and the right rules put back after it."""
    # (A class's own attribute as it stands, a staticmethod or property unwrapped by
    # nothing; one it inherits is deleted again after the run.)
    saved = [(owner, name, vars(owner).get(name, _INHERITED), rule) for owner, name, rule in swaps]
    for owner, name, _, rule in saved:
        setattr(owner, name, rule)
    try:
        yield
    finally:
        for owner, name, right, _ in reversed(saved):
            if right is _INHERITED:
                delattr(owner, name)
            else:
                setattr(owner, name, right)


# Broken rules of the log that the whole log servers (writers.py) run, once the log's model's
# (the retired tests/sim/harness.py):
# the first two in place of a writer's method, the third of a replica's.
_on_fence_reply, _lease_index = Writer.on_fence_reply, Writer.lease_index


def no_lease_wait(self: Writer, replica: int, reply: FenceReply) -> None:
    """A new writer that does not wait out the old writer's read lease before it seals."""
    _on_fence_reply(self, replica, replace(reply, lease_wait_ms=0))


def serves_expired(self: Writer, now: float) -> int | None:
    """A writer that answers by its LAC once it has held a lease, whether or not it still does."""
    held = _lease_index(self, now) is not None or getattr(self, "_held", False)
    self._held = held
    return self.lac if held and self.state is State.WRITING else None


def admits_all(self: ReplicaCore, epoch: int, fenced_epoch: int) -> fencing.Admission:
    """A replica that takes requests from replaced writers (no fencing)."""
    return fencing.Admission(True, max(epoch, fenced_epoch))
