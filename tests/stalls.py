"""How long this process was kept from running, for tests that check a call ends by its
deadline: on a loaded machine (the suite's two workers, each with its clusters, beside CI's
own load) a thread woken at its deadline can run a few hundred milliseconds later, and a
call that ended that late waited on nothing of ours. A thread of the test's sleeps TICK_S at
a time and records how late each sleep ended; `during(t0, t1)` is the worst of the sleeps
that overlapped [t0, t1]. A call that ended by its deadline plus LATE_S plus that is on
time; one that waited on ZooKeeper or a paused server past its deadline is late by
seconds, while the probe woke on time."""

from __future__ import annotations

import bisect
import threading
import time
from types import TracebackType

TICK_S = 0.01


class Stalls:
    def __init__(self) -> None:
        self._ends: list[float] = []  # when each sleep ended (monotonic), in order
        self._late: list[float] = []  # how late it ended
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stall probe", daemon=True)

    def __enter__(self) -> Stalls:
        self._thread.start()
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.is_set():
            t0 = time.monotonic()
            time.sleep(TICK_S)
            t1 = time.monotonic()
            self._late.append(max(0.0, t1 - t0 - TICK_S))
            self._ends.append(t1)  # appended last: a reader sees _late at least as long

    def during(self, t0: float, t1: float) -> float:
        """The longest stall of a sleep that overlapped [t0, t1] (0 if none ended yet)."""
        ends = self._ends[:]
        lo = bisect.bisect_left(ends, t0)
        hi = bisect.bisect_right(ends, t1 + TICK_S)  # the sleep under way at t1 ends after it
        # one ending soon after t1 covered the end of the call: wait for it if need be
        deadline = time.monotonic() + 1.0
        while hi == len(ends) and time.monotonic() < deadline and not self._stop.is_set():
            time.sleep(TICK_S)
            ends = self._ends[:]
            hi = bisect.bisect_right(ends, t1 + TICK_S)
        return max(self._late[lo:min(hi + 1, len(ends))], default=0.0)

    def worst(self) -> float:
        return max(self._late, default=0.0)
