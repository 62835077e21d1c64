"""Group commit without a hand-off: the callers themselves run the batches.

A caller queues its item. If no batch is running, it becomes the leader: it takes what is
queued (its own item and whatever else is there, up to a limit), runs the batch in its own
thread, hands every result to its caller and, once its own item is done, passes the
leadership to the oldest caller still queued (or leaves it free). Items that arrive while a
batch runs go together into the next one.

So a lone caller pays no thread hand-off at all (each costs a wake-up and a GIL hand-over,
tens of microseconds here and more under load), and under load batches grow with the time
one batch takes, as with a dedicated thread. The same pattern as RocksDB's write-group
leader.

Each thread is woken once per state change: when its result is ready or when it becomes
the leader.

`gather` (optional): called by a leader before it takes a batch, when the last batch held
more than one item, with the queue's length (a function) and that batch's size. The
callers just answered are typically about to queue again; a caller that sends at once
would leave them behind for a whole batch, and the callers would settle into cohorts
taking turns (midtown/coalescing.py waits for them briefly). A lone caller never gets
there."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from runtime import world

T = TypeVar("T")
R = TypeVar("R")


class GroupTimeout(Exception):
    """The item was still waiting to be run when the caller's time was up: it was never
    run, and is no longer queued."""


class _Slot(Generic[T, R]):
    __slots__ = ("item", "result", "error", "done", "lead", "event")

    def __init__(self, item: T) -> None:
        self.item = item
        self.result: R | None = None
        self.error: BaseException | None = None
        self.done = False
        self.lead = False
        self.event = world.event()


class GroupCommit(Generic[T, R]):
    def __init__(self, run: Callable[[list[T]], Sequence[R]],
                 size: Callable[[T], int] = lambda _: 1, max_size: int = 10_000,
                 gather: Callable[[Callable[[], int], int], None] | None = None) -> None:
        """`run(items)` returns one result per item, in order, or raises (then every item of
        the batch gets the exception). A batch holds items whose `size` adds up to at most
        `max_size`, and always at least one item. `gather(queued, last)`: see above."""
        self._run = run
        self._size = size
        self._max = max_size
        self._lock = world.lock()
        self._q: deque[_Slot[T, R]] = deque()
        self._busy = False
        self._gather = gather
        self._last = 0  # items in the last batch

    def call(self, item: T, timeout_s: float | None = None) -> R:
        """Run `item` in a batch and return its result (or raise its batch's error).
        GroupTimeout if it could not even start within `timeout_s`; once its batch has
        started, the call waits for the batch, which must bound its own time."""
        slot: _Slot[T, R] = _Slot(item)
        with self._lock:
            self._q.append(slot)
            if not self._busy:
                self._busy = slot.lead = True
        if not slot.lead and not slot.event.wait(timeout_s):
            with self._lock:
                if not slot.lead and not slot.done and slot in self._q:
                    self._q.remove(slot)
                    raise GroupTimeout("not started in time")
            slot.event.wait()  # its batch is running (or it was just made the leader)
        if slot.lead:
            self._lead(slot)
        if slot.error is not None:
            raise slot.error
        return slot.result  # type: ignore[return-value]

    def _take(self) -> list[_Slot[T, R]]:
        batch: list[_Slot[T, R]] = []
        total = 0
        with self._lock:
            while self._q:
                n = self._size(self._q[0].item)
                if batch and total + n > self._max:
                    break
                batch.append(self._q.popleft())
                total += n
        return batch

    def _lead(self, me: _Slot[T, R]) -> None:
        while not me.done:
            if self._gather is not None and self._last > 1:
                self._gather(lambda: len(self._q), self._last)
            batch = self._take()
            self._last = len(batch)
            try:
                results = self._run([s.item for s in batch])
                if len(results) != len(batch):
                    raise RuntimeError(f"a batch of {len(batch)} got {len(results)} results")
                for s, r in zip(batch, results):
                    s.result = r
            except BaseException as e:  # every caller hears of it; none hangs
                for s in batch:
                    s.error = e
            for s in batch:
                s.done = True
                if s is not me:
                    s.event.set()
        with self._lock:
            if self._q:
                nxt = self._q[0]
                nxt.lead = True
                nxt.event.set()
            else:
                self._busy = False
