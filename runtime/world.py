"""The world a server runs in, the environment port (issue 51): the clock the servers
read, their sleeps, and the background tasks they start, through one backend. No module of
the servers (log/, storage_node/, coordinator/, catalog/, record/) calls `time` or starts a
thread itself (tests/test_layers.py checks it): threads and the system clock are the
backend of a real process (`Threads`, the default); a simulation installs its own with
`use`, one that owns the clock and runs the tasks in an order it chooses, and every server
component then reads its time and starts its loops there.

The locks, conditions, events, queues, futures and thread pools the servers make come from
the backend too (their types are the standard library's: a simulation's objects have the
same methods), and so does the clock read leases are timed on (runtime/clock.py). Still
outside the port: gRPC's servers and channels (the network port's to come)."""

from __future__ import annotations

import queue as queue_
import random as random_
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent import futures
from typing import Any, Protocol, TypeVar

T = TypeVar("T")


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
    def queue(self, maxsize: int) -> queue_.Queue[Any]:
        """A FIFO queue (`maxsize` 0: unbounded); it raises queue.Empty and queue.Full."""
    def future(self) -> futures.Future[Any]: ...
    def as_completed(self, fs: Iterable[futures.Future[T]],
                     timeout: float | None) -> Iterator[futures.Future[T]]: ...
    def submit(self, pool: Pool, fn: Callable[[], T]) -> futures.Future[T]:
        """Run `fn` on one of `pool`'s workers."""
    def boot_clock(self) -> float:
        """Seconds on a clock that counts through a suspend of the machine (runtime/clock.py)."""
    def buggify(self, point: str) -> bool:
        """Whether the fault at `point` happens now (never, in a real process)."""
    def random(self) -> float:
        """A number in [0, 1): jitter (a simulation's comes from its seed)."""
    def unique_id(self) -> bytes:
        """16 bytes no other call draws, in any process (a simulation's from its seed)."""


class Pool:
    """A named pool of at most `workers` workers; the backend makes the workers (a real
    process: a ThreadPoolExecutor made on the first submit, so a module can hold one)."""

    def __init__(self, name: str, workers: int) -> None:
        self.name = name
        self.workers = workers
        self.executor: futures.ThreadPoolExecutor | None = None
        self._made = threading.Lock()  # runtime/ is the backend: its own primitives are real

    def submit(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> futures.Future[T]:
        return _backend.submit(self, lambda: fn(*args, **kwargs))


_BOOT = getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC)


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

    def queue(self, maxsize: int) -> queue_.Queue[Any]:
        # unbounded: the C SimpleQueue (a writer's inbox is a hot path), which has the same
        # put/get/empty/qsize
        return queue_.Queue(maxsize) if maxsize else queue_.SimpleQueue()  # type: ignore[return-value]

    def future(self) -> futures.Future[Any]:
        return futures.Future()

    def as_completed(self, fs: Iterable[futures.Future[T]],
                     timeout: float | None) -> Iterator[futures.Future[T]]:
        return futures.as_completed(fs, timeout)

    def submit(self, pool: Pool, fn: Callable[[], T]) -> futures.Future[T]:
        if pool.executor is None:
            with pool._made:
                if pool.executor is None:
                    pool.executor = futures.ThreadPoolExecutor(pool.workers, thread_name_prefix=pool.name)
        return pool.executor.submit(fn)

    def boot_clock(self) -> float:
        return time.clock_gettime(_BOOT)

    def buggify(self, point: str) -> bool:
        return False

    def random(self) -> float:
        return random_.random()

    def unique_id(self) -> bytes:
        return uuid.uuid4().bytes  # the OS's randomness: forked processes draw apart


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


def queue(maxsize: int = 0) -> queue_.Queue[Any]:
    """A FIFO queue; `maxsize` 0 is unbounded (put_nowait on a full one raises queue.Full)."""
    return _backend.queue(maxsize)


def future() -> futures.Future[Any]:
    """A future to hand a result from one task to another."""
    return _backend.future()


def as_completed(fs: Iterable[futures.Future[T]],
                 timeout: float | None = None) -> Iterator[futures.Future[T]]:
    """The futures as they finish; futures.TimeoutError once `timeout` has passed."""
    return _backend.as_completed(fs, timeout)


def boot_clock() -> float:
    return _backend.boot_clock()


def random() -> float:
    """A number in [0, 1), for jitter: backoffs, spreading calls over peers."""
    return _backend.random()


def unique_id() -> bytes:
    """16 bytes no other call draws (a request id), in any process."""
    return _backend.unique_id()


def choice(items: Sequence[T]) -> T:
    """One of `items` (not empty), drawn by random()."""
    return items[min(len(items) - 1, int(random() * len(items)))]


def shuffle(items: list[Any]) -> None:
    """Put `items` in an order drawn by random(), in place."""
    for i in range(len(items) - 1, 0, -1):
        j = min(i, int(random() * (i + 1)))
        items[i], items[j] = items[j], items[i]


def buggify(point: str) -> bool:
    """A fault point, after FoundationDB's BUGGIFY: where a real failure is rare (a slow
    peer, a slow sync, a probe lost on a live network), the code asks whether it happens
    now and, if so, behaves as if it had. Always False in a real process; the simulator
    enables some points in each run and fires them now and then, as its seed says
    (tests/sim/scheduler.py), so that a rare path runs in many seeds. `point` names it."""
    return _backend.buggify(point)
