"""A value read from elsewhere (a membership list in ZooKeeper) and kept for a period, on a
request path many threads share.

When the period is over, one caller reads the value again (a single flight); the callers
that come meanwhile take the last value instead of each reading it too, and wait only when
there is no value yet. A read that fails keeps the last value, and the next caller tries
again. A read again may be made another way than the first (`reload`): with ZooKeeper
paused or without a quorum, the caller reading gives up soon and goes on with the last
value (issue 68)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from runtime import world

T = TypeVar("T")


class Refreshed(Generic[T]):
    def __init__(self, load: Callable[[], T], period_s: float, initial: T,
                 clock: Callable[[], float] = world.monotonic,
                 reload: Callable[[], T] | None = None) -> None:
        """`initial`: what `last()` gives before the first read. `reload`: how to read it
        again once there is a value (default: `load`): one that gives up sooner (a short
        bound on ZooKeeper's answer, fleet/connect.py), since the caller may go on with
        the last value."""
        self._load = load
        self._reload = reload or load
        self._period_s = period_s
        self._clock = clock
        self._value = initial
        self._at: float | None = None  # when the value was read; None: never
        self._lock = world.lock()

    def get(self) -> T:
        """The value, read again first if it is older than the period (by this caller, or,
        if another is reading it, the last value). Raises what the read raises."""
        if self._fresh():
            return self._value
        if not self._lock.acquire(blocking=self._at is None):
            return self._value  # another caller is reading it
        try:
            if self._fresh():  # read while this caller waited
                return self._value
            at = self._clock()
            value = self._load() if self._at is None else self._reload()
            self._value, self._at = value, at
            return value
        finally:
            self._lock.release()

    def last(self) -> T:
        """The last value read (the initial one if none was), without reading."""
        return self._value

    def _fresh(self) -> bool:
        at = self._at
        return at is not None and self._clock() - at <= self._period_s
