"""Background threads that cannot die silently.

Every background thread of a server either retries with backoff or ends the process with
a clear log line (STYLE.md, "Habits"). `every` runs a periodic task; `forever` runs a task
that loops on its own (a tail, an election loop) and starts it again if it raises. Both
log the failure (runtime/faults.py: an expected fault in one line, once per run of them;
a defect with its traceback), wait (doubling up to BACKOFF_MAX_S) and go on."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from runtime import faults, world

log = logging.getLogger("midtown.loops")

BACKOFF_FIRST_S = 0.1
# A failing loop retries at least this often: ZooKeeper or a peer that comes back is
# noticed within this long.
BACKOFF_MAX_S = 5.0


class Backoff:
    """Doubling waits between attempts, reset by a success."""

    def __init__(self, first_s: float = BACKOFF_FIRST_S, max_s: float = BACKOFF_MAX_S) -> None:
        assert 0 < first_s <= max_s
        self.first_s = first_s
        self.max_s = max_s
        self.next_s = first_s

    def failed(self) -> float:
        """How long to wait after a failure."""
        wait = self.next_s
        self.next_s = min(self.next_s * 2, self.max_s)
        return wait

    def succeeded(self) -> None:
        self.next_s = self.first_s


def paced_wait(interval_s: float, took_s: float, duty: float, max_interval_s: float) -> float:
    """How long to wait after a run that took `took_s`: `interval_s`, or longer when the
    run is long, so that running takes at most `duty` of the time (0: no such bound), but
    never more than `max_interval_s`."""
    if duty <= 0:
        return interval_s
    return max(interval_s, min(max_interval_s, took_s / duty - took_s))


class Spread:
    """Rests between the pieces of a long background pass (a count over a whole store), so
    that it takes at most `duty` of a core while it runs instead of all of one in a burst,
    and still ends within about `max_s`: a pass expected to be busy longer than
    `duty * max_s` rests less, so as to spread over `max_s`. `expected_busy_s` is the last
    pass's busy time (0 if none). `wait` rests (a stop event's wait: a stopping server does
    not rest)."""

    def __init__(self, duty: float, max_s: float, expected_busy_s: float,
                 wait: Callable[[float], object], clock: Callable[[], float] = world.monotonic) -> None:
        assert 0 < duty <= 1 and max_s > 0
        rest = 1 / duty - 1
        if expected_busy_s > 0:
            rest = max(0.0, min(rest, max_s / expected_busy_s - 1))
        self.rest_per_busy_s = rest
        self.max_s = max_s
        self.busy_s = 0.0
        self._wait = wait
        self._clock = clock
        self._started = clock()

    def piece_done(self, took_s: float) -> None:
        """A piece that kept the pass busy `took_s` is done: rest in proportion, never past
        `max_s` from the start."""
        self.busy_s += took_s
        left = self.max_s - (self._clock() - self._started)
        rest = min(took_s * self.rest_per_busy_s, left)
        if rest > 0:
            self._wait(rest)


def every(name: str, interval_s: float, body: Callable[[], float | None], stop: threading.Event,
          first_at_once: bool = False, duty: float = 0.0,
          max_interval_s: float = float("inf")) -> world.Task:
    """Run `body` every `interval_s` until `stop` is set, in a daemon thread; with `duty`,
    less often when a run is long (paced_wait: on the seconds the body says it was busy,
    if it rests while it runs and returns them, else on its time). A failure is logged and
    retried with backoff (never later than the next interval)."""
    assert interval_s > 0

    def run() -> None:
        backoff = Backoff(max_s=max(BACKOFF_FIRST_S, min(BACKOFF_MAX_S, interval_s)))
        episode = faults.Episode(log, name)
        wait = 0.0 if first_at_once else interval_s
        while not stop.wait(wait):
            started = world.monotonic()
            try:
                busy = body()
            except Exception as e:
                wait = backoff.failed()
                episode.failed(e, f"retrying in {wait:.1f} s")
                continue
            backoff.succeeded()
            episode.succeeded()
            took = busy if busy is not None else world.monotonic() - started
            wait = paced_wait(interval_s, took, duty, max_interval_s)

    return world.spawn(name, run)


def forever(name: str, body: Callable[[], None], stop: threading.Event) -> world.Task:
    """Run `body` (which loops until `stop` on its own) in a daemon thread; if it returns
    or raises before `stop` is set, log it and start it again after a backoff."""

    def run() -> None:
        backoff = Backoff()
        episode = faults.Episode(log, name)
        while not stop.is_set():
            try:
                body()
            except Exception as e:
                wait = backoff.failed()
                episode.failed(e, f"starting it again in {wait:.1f} s")
                stop.wait(wait)
                continue
            backoff.succeeded()
            episode.succeeded()
            stop.wait(BACKOFF_FIRST_S)  # returned by itself: go round again, gently

    return world.spawn(name, run)
