"""The world a server runs in, the environment port (issue 51): the clock the servers
read, their sleeps, and the background tasks they start, through one backend. No module of
the servers (log/, storage_node/, coordinator/, catalog/, record/) calls `time` or starts a
thread itself (tests/test_layers.py checks it): threads and the system clock are the
backend of a real process (`Threads`, the default); a simulation installs its own with
`use`, one that owns the clock and runs the tasks in an order it chooses, and every server
component then reads its time and starts its loops there.

The locks, conditions and events the servers make come from the backend too (their type
is threading's: a simulation's objects have the same methods). Still outside the port:
queues, futures and thread pools, and gRPC's servers."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol


class Task(Protocol):
    """A background task started by `spawn`."""

    def join(self, timeout: float | None = None) -> None: ...
    def is_alive(self) -> bool: ...


class Backend(Protocol):
    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (an arbitrary origin)."""
    def wall(self) -> float:
        """Seconds since the Unix epoch (may step: never for durations)."""
    def sleep(self, seconds: float) -> None: ...
    def spawn(self, name: str, fn: Callable[[], None]) -> Task:
        """Run `fn` in the background (a daemon: it does not hold the process up)."""
    def lock(self) -> threading.Lock: ...
    def condition(self) -> threading.Condition: ...
    def event(self) -> threading.Event: ...


class Threads:
    """A real process: the system clock, and a daemon thread per task."""

    def monotonic(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def spawn(self, name: str, fn: Callable[[], None]) -> Task:
        t = threading.Thread(target=fn, name=name, daemon=True)
        t.start()
        return t

    def lock(self) -> threading.Lock:
        return threading.Lock()

    def condition(self) -> threading.Condition:
        return threading.Condition()

    def event(self) -> threading.Event:
        return threading.Event()


_backend: Backend = Threads()


def use(backend: Backend) -> Backend:
    """Install `backend` for the whole process; returns the one it replaces (to put back)."""
    global _backend
    old, _backend = _backend, backend
    return old


def monotonic() -> float:
    return _backend.monotonic()


def wall() -> float:
    return _backend.wall()


def wall_ms() -> int:
    """Milliseconds since the Unix epoch."""
    return int(_backend.wall() * 1000)


def sleep(seconds: float) -> None:
    _backend.sleep(seconds)


def spawn(name: str, fn: Callable[[], None]) -> Task:
    return _backend.spawn(name, fn)


def lock() -> threading.Lock:
    """A mutex (the backend's: a simulation's lets another task run while one waits)."""
    return _backend.lock()


def condition() -> threading.Condition:
    return _backend.condition()


def event() -> threading.Event:
    return _backend.event()
