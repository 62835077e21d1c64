"""runtime/world.py, the environment port: a backend installed with `use` is the clock,
the task spawner and the maker of locks of the servers' code (here a loop of runtime/loops.py and a storage
node's hybrid clock), and putting the old one back restores the real one."""

from __future__ import annotations

import threading
from collections.abc import Callable

from runtime import loops, world


class Manual:
    """A backend whose clock moves only when told, and whose tasks run when told."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.tasks: list[tuple[str, Callable[[], None]]] = []
        self.made: list[str] = []  # the primitives the code asked it for

    def monotonic(self) -> float:
        return self.now

    def wall(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def spawn(self, name: str, fn: Callable[[], None]) -> world.Task:
        self.tasks.append((name, fn))
        return threading.Thread()  # never started: the backend runs `fn` when it chooses

    def lock(self) -> threading.Lock:
        self.made.append("lock")
        return threading.Lock()

    def condition(self) -> threading.Condition:
        self.made.append("condition")
        return threading.Condition()

    def event(self) -> threading.Event:
        self.made.append("event")
        return threading.Event()


def test_an_installed_backend_owns_the_clock_and_the_tasks() -> None:
    from coordinator.eventual import HybridClock
    from record.versions import version_millis

    m = Manual()
    old = world.use(m)
    try:
        assert world.monotonic() == 1000.0 and world.wall_ms() == 1_000_000
        world.sleep(2.5)
        assert world.monotonic() == 1002.5  # no real time passed
        stop = threading.Event()
        ran = []
        loops.every("count", 5.0, lambda: ran.append(world.monotonic()) or None, stop, first_at_once=True)
        assert [n for n, _ in m.tasks] == ["count"] and ran == []  # spawned, not run
        stop.set()
        m.tasks[0][1]()  # the backend runs it: the stop is set, so it returns at once
        assert version_millis(HybridClock(1).next()) == 1_002_500  # the hybrid clock reads the port
        assert m.made == ["lock"]  # and its lock came from the backend
    finally:
        assert world.use(old) is m
    assert isinstance(world.use(old), world.Threads)  # the real one again
