"""The simulator's backend of the world port (runtime/world.py): the servers' real code, run
one task at a time in an order drawn from a seed, on a clock that moves only when every task
waits (issue 51).

Each task is a real thread, but only the one holding the baton runs: a task gives the baton
up where it would wait (a lock held by another, a condition, an event, a queue, a future, a
sleep) and, at a preemption point (taking a lock, setting an event, putting on a queue,
spawning), when the seed says so. The scheduler then hands it to a ready task chosen by the
seed; when none is ready it moves the clock to the next timer. Nothing here reads the real
clock, so a seed replays the same interleaving and the same times, and hours of timeouts
take no wall time.

A crash of a process (`crash`) raises `Killed` in each of its tasks where it next runs, so
its threads unwind and nothing it does afterwards is seen; a task that is still waiting
when no other can run is a deadlock (`Deadlock` in the simulation's main task)."""

from __future__ import annotations

import heapq
import itertools
import math
import queue as queue_
import random
import threading
import traceback
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent import futures
from contextlib import contextmanager
from typing import Any, TypeVar

from runtime import world

T = TypeVar("T")


class Killed(BaseException):
    """Raised in a task of a crashed process: its thread unwinds (BaseException, so the
    servers' `except Exception` do not catch it)."""


class Deadlock(Exception):
    pass


class _Task:
    def __init__(self, tid: int, name: str, process: str) -> None:
        self.tid = tid
        self.name = name
        self.process = process
        self.clock_of: str | None = None  # the process whose clock it reads, if not its own
        self.go = threading.Semaphore(0)  # real: released when this task holds the baton
        self.done = False
        self.wait: deque[_Task] | None = None  # the wait list it is on, while it waits
        self.wait_no = 0  # which wait a timer is for
        self.timed_out = False
        self.joiners: deque[_Task] = deque()
        self.error: BaseException | None = None

    def __repr__(self) -> str:
        return f"{self.process}/{self.name}#{self.tid}"


class Scheduler:
    """`run(main)` runs `main` as the first task with this backend installed; `preempt` is
    the chance a preemption point hands the baton on. A crashed process stays dead: a
    restart runs under a new process name."""

    def __init__(self, seed: int, preempt: float = 0.2, start_wall: float = 1_800_000_000.0,
                 buggify: tuple[float, float] = (0.25, 0.05)) -> None:
        """`buggify`: (the chance that a fault point, world.buggify, is enabled in this run,
        the chance that an enabled one fires each time it is reached); (0, 0): none."""
        self.rng = random.Random(seed)
        self.preempt = preempt
        self._buggify_odds = buggify
        self.buggified: dict[str, int] = {}  # fault point -> times fired (enabled ones: 0 or more)
        self._buggify_off: set[str] = set()
        self.now = 0.0
        self.start_wall = start_wall
        self.switches = 0
        self.failures: list[str] = []  # exceptions no task caught
        self.dead: set[str] = set()  # crashed processes
        self.paused_until: dict[str, float] = {}  # processes stopped (SIGSTOP) until then
        self._ids = itertools.count()
        self._timer_seq = itertools.count()
        self._ready: list[_Task] = []
        self._timers: list[tuple[float, int, _Task, int]] = []
        self._by_thread: dict[int, _Task] = {}
        self._current: _Task | None = None
        self._main = _Task(-1, "main", "main")
        # Each machine's boot clock runs at its own rate (log/lease.py's DRIFT_MAX): machine
        # -> rate, a machine being a process's name without its incarnation ("server-2" of
        # "server-2-0"); 1 for the others.
        self.rates: dict[str, float] = {}
        # Each machine's wall clock stands this many seconds off real time (record/staleness.py
        # bounds it: MAX_CLOCK_OFFSET_MS), machines named as for `rates`; 0 for the others.
        self.wall_offsets: dict[str, float] = {}

    # --- running ------------------------------------------------------------------------

    def run(self, main: Callable[[], T], process: str = "main") -> T:
        self._main = _Task(next(self._ids), "main", process)
        self._by_thread[threading.get_ident()] = self._main
        self._current = self._main
        old = world.use(self)
        try:
            return main()
        finally:
            self._kill_all()
            world.use(old)
            del self._by_thread[threading.get_ident()]

    def process(self, name: str) -> _Process:
        """Run the body of a `with` as process `name` (in the task that runs it): the tasks
        it spawns are that process's. Not a process that is dead or paused: the task
        running the body would die or stop with it at its next preemption point."""
        if name in self.dead or self.paused(name):
            raise RuntimeError(f"a task cannot act as process {name}: it is dead or paused")
        return _Process(self._me(), name)

    def current_process(self) -> str | None:
        """The process the running task acts as (None outside the run)."""
        return self._current.process if self._current is not None else None

    def dying(self) -> bool:
        """Whether the running task's process has crashed (its tasks unwind where they next
        run; what one of them does meanwhile, a real crash would not have let it do)."""
        return self._current is not None and self._current.process in self.dead

    def crash(self, process: str) -> None:
        """Every task of `process` dies where it next runs (a crash: no more of its steps)."""
        self.dead.add(process)
        self.paused_until.pop(process, None)
        for t in list(self._by_thread.values()):
            if t.process == process and t.wait is not None:
                self._wake_one(t)

    def pause(self, process: str, seconds: float) -> None:
        """None of `process`'s tasks runs for `seconds` (a SIGSTOP, then a SIGCONT): what
        wakes them meanwhile waits, and the clock goes on."""
        self.paused_until[process] = max(self.paused_until.get(process, 0.0), self.now + seconds)

    def paused(self, process: str) -> bool:
        return self.paused_until.get(process, 0.0) > self.now

    def _me(self) -> _Task:
        t = self._by_thread.get(threading.get_ident())
        if t is None or t is not self._current:
            raise RuntimeError("a simulated primitive used outside the simulation's tasks")
        return t

    def _dies(self, t: _Task) -> bool:
        return t.process in self.dead and t is not self._main

    def _pick(self) -> _Task:
        """The next task to run: a ready one drawn from the seed, else the first timer's
        (the clock moves to it), else the main task, told of the deadlock."""
        self.switches += 1
        while True:
            runnable = [i for i, t in enumerate(self._ready) if not self.paused(t.process)]
            if runnable:
                return self._ready.pop(runnable[self.rng.randrange(len(runnable))])
            while self._timers and not self._valid(self._timers[0]):
                heapq.heappop(self._timers)
            resume = min((self.paused_until[t.process] for t in self._ready), default=None)
            if self._timers and (resume is None or self._timers[0][0] < resume):
                at, _, task, _ = heapq.heappop(self._timers)
                self.now = max(self.now, at)
                assert task.wait is not None
                task.wait.remove(task)
                task.wait = None
                task.timed_out = True
                if not self.paused(task.process):
                    return task
                self._ready.append(task)  # it runs when its process is resumed
            elif resume is not None:
                self.now = max(self.now, resume)
            else:
                break
        waiting = ", ".join(repr(t) for t in self._by_thread.values() if not t.done and t is not self._main)
        self.failures.append(f"deadlock: {waiting}")
        self._main.error = Deadlock(f"every task waits and no timer is set: {waiting}")
        if self._main.wait is not None:
            self._main.wait.remove(self._main)
            self._main.wait = None
        return self._main

    @staticmethod
    def _valid(timer: tuple[float, int, _Task, int]) -> bool:
        _, _, task, no = timer
        return task.wait is not None and task.wait_no == no

    def _hand_on(self) -> None:
        nxt = self._pick()
        self._current = nxt
        nxt.go.release()

    def _switch(self, me: _Task) -> None:
        """Hand the baton on (`me` is waiting or ready) and take it back when chosen."""
        nxt = self._pick()
        if nxt is not me:
            self._current = nxt
            nxt.go.release()
            me.go.acquire()
        self._resumed(me)

    def _resumed(self, me: _Task) -> None:
        if self._dies(me):
            raise Killed(me.process)
        if me.error is not None:
            e, me.error = me.error, None
            raise e

    def _wait(self, on: deque[_Task], timeout: float | None) -> bool:
        """Wait on the list `on` until woken (True) or `timeout` seconds have passed (False)."""
        me = self._me()
        if self._dies(me):
            raise Killed(me.process)
        me.wait = on
        me.wait_no += 1
        me.timed_out = False
        on.append(me)
        if timeout is not None:
            at = self.deadline(max(0.0, timeout))
            heapq.heappush(self._timers, (at, next(self._timer_seq), me, me.wait_no))
        self._switch(me)
        return not me.timed_out

    def deadline(self, timeout: float) -> float:
        """`timeout` seconds from now; a timeout too small to move the clock's float, its
        next value (a real clock always moves on: a wait that is too short must still end
        later than it began, or a loop computing what is left would never sleep)."""
        at = self.now + timeout
        return math.nextafter(self.now, math.inf) if timeout > 0 and at <= self.now else at

    def _wake_one(self, t: _Task) -> None:
        if t.wait is not None:
            t.wait.remove(t)
            t.wait = None
        self._ready.append(t)

    def _wake(self, on: deque[_Task], n: int | None = None) -> None:
        for t in list(on)[:n]:
            self._wake_one(t)

    def maybe_yield(self) -> None:
        """A preemption point: with the seed's chance another ready task runs first."""
        if self._ready and self.rng.random() < self.preempt:
            me = self._me()
            self._ready.append(me)
            self._switch(me)

    def _kill_all(self) -> None:
        """At the end of a run: every task left unwinds (Killed), one at a time."""
        self.dead.update(t.process for t in self._by_thread.values())
        self.paused_until.clear()
        self._main.error = None
        for t in list(self._by_thread.values()):
            if t.wait is not None and t is not self._main:
                self._wake_one(t)
        for t in list(self._by_thread.values()):
            if t is not self._main and not t.done:
                self._wait(t.joiners, None)

    # --- the world port -----------------------------------------------------------------

    def monotonic(self) -> float:
        return self.now

    def wall(self) -> float:
        if not self.wall_offsets:
            return self.start_wall + self.now
        t = self._by_thread.get(threading.get_ident())
        machine = (t.clock_of or t.process).rpartition("-")[0] if t is not None else ""
        return self.start_wall + self.now + self.wall_offsets.get(machine, 0.0)

    def boot_clock(self) -> float:
        t = self._me()
        return self.now * self.rates.get((t.clock_of or t.process).rpartition("-")[0], 1.0)

    @contextmanager
    def clock_of(self, process: str) -> Iterator[None]:
        """The body reads `process`'s clock, not its own task's process's: a message the
        network hands to a server is handled on that server's clock, wherever the simulation
        runs the handling (it is not that process's task: a crash there does not end it)."""
        t = self._me()
        was, t.clock_of = t.clock_of, process
        try:
            yield
        finally:
            t.clock_of = was

    def random(self) -> float:
        return self.rng.random()

    def unique_id(self) -> bytes:
        return self.rng.getrandbits(128).to_bytes(16, "big")

    def never(self, point: str) -> None:
        """Keep fault point `point` off for this run, drawing nothing for it (a mode that
        leaves it out replays as before it was added)."""
        self._buggify_off.add(point)

    def buggify(self, point: str) -> bool:
        """A fault point: enabled or not for the whole run when first reached, then firing
        now and then if enabled (both drawn from the seed)."""
        if point in self._buggify_off:
            return False
        enabled, fires = self._buggify_odds
        if point not in self.buggified:
            if self.rng.random() >= enabled:
                self._buggify_off.add(point)
                return False
            self.buggified[point] = 0
        if self.rng.random() < fires:
            self.buggified[point] += 1
            return True
        return False

    def sleep(self, seconds: float) -> None:
        self._wait(deque(), seconds)

    def spawn(self, name: str, fn: Callable[[], None], process: str | None = None) -> _Handle:
        """A new task of the caller's process, or of `process` (a request arriving there:
        one that is stopped takes it up once it runs again, in an order drawn with the rest
        of what woke it meanwhile)."""
        t = _Task(next(self._ids), name, process or self._me().process)

        def body() -> None:
            t.go.acquire()
            try:
                self._resumed(t)
                fn()
            except BaseException as e:  # noqa: BLE001 - the simulation's finding
                if isinstance(e, Killed) or self._dies(t):
                    pass  # what a crashed process does while unwinding is not seen
                else:
                    self.failures.append(f"{t}: {type(e).__name__}: {e}\n{traceback.format_exc()}")
            t.done = True
            self._wake(t.joiners)
            del self._by_thread[threading.get_ident()]
            self._hand_on()

        th = threading.Thread(target=body, name=f"sim:{t}", daemon=True)
        th.start()
        assert th.ident is not None
        self._by_thread[th.ident] = t
        self._ready.append(t)
        self.maybe_yield()
        return _Handle(self, t)

    def lock(self) -> Any:
        return _Lock(self)

    def condition(self) -> Any:
        return _Condition(self)

    def event(self) -> Any:
        return _Event(self)

    def queue(self, maxsize: int) -> Any:
        return _Queue(self, maxsize)

    def future(self) -> futures.Future[Any]:
        f: futures.Future[Any] = futures.Future()
        f._condition = _Condition(self)  # type: ignore[attr-defined]  # its waits are the simulation's
        return f

    def as_completed(self, fs: Iterable[futures.Future[T]],
                     timeout: float | None) -> Iterator[futures.Future[T]]:
        pending = list(fs)
        deadline = None if timeout is None else self.deadline(timeout)
        changed = _Event(self)
        for f in pending:
            f.add_done_callback(lambda _: changed.set())
        while pending:
            done = [f for f in pending if f.done()]
            for f in done:
                pending.remove(f)
                yield f
            if not pending:
                return
            changed.clear()
            if any(f.done() for f in pending):
                continue
            left = None if deadline is None else deadline - self.now
            if left is not None and left <= 0 or not changed.wait(left):
                raise futures.TimeoutError(f"{len(pending)} futures unfinished")

    def submit(self, pool: world.Pool, fn: Callable[[], T]) -> futures.Future[T]:
        f = self.future()

        def work() -> None:
            if not f.set_running_or_notify_cancel():
                return
            try:
                f.set_result(fn())
            except Exception as e:  # noqa: BLE001 - handed to the waiter, as an executor does
                f.set_exception(e)

        self.spawn(pool.name, work)
        return f


class _Process:
    def __init__(self, task: _Task, name: str) -> None:
        self.task, self.name = task, name

    def __enter__(self) -> None:
        self.prev, self.task.process = self.task.process, self.name

    def __exit__(self, *_: object) -> None:
        self.task.process = self.prev


class _Handle:
    def __init__(self, s: Scheduler, t: _Task) -> None:
        self.s, self.t = s, t

    def join(self, timeout: float | None = None) -> None:
        if not self.t.done:
            self.s._wait(self.t.joiners, timeout)

    def is_alive(self) -> bool:
        return not self.t.done


class _Lock:
    def __init__(self, s: Scheduler) -> None:
        self.s = s
        self.owner: _Task | None = None
        self.waiters: deque[_Task] = deque()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        s = self.s
        s.maybe_yield()
        deadline = None if timeout < 0 else s.deadline(timeout)
        while self.owner is not None:
            if not blocking:
                return False
            left = None if deadline is None else deadline - s.now
            if left is not None and left <= 0 or not s._wait(self.waiters, left):
                if self.owner is not None:
                    return False
        self.owner = s._me()
        return True

    def release(self) -> None:
        if self.owner is not self.s._me() and self.s.dying():
            # A crashed task unwinding through a `with` whose lock it no longer holds (its
            # Condition.wait was killed re-acquiring it): a real crash releases nothing.
            return
        if self.owner is None:
            raise RuntimeError("release unlocked lock")
        self.owner = None
        self.s._wake(self.waiters, 1)

    def locked(self) -> bool:
        return self.owner is not None

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *_: object) -> None:
        self.release()


class _Condition:
    def __init__(self, s: Scheduler) -> None:
        self.s = s
        self.lock = _Lock(s)
        self.waiters: deque[_Task] = deque()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        return self.lock.acquire(blocking, timeout)

    def release(self) -> None:
        self.lock.release()

    def __enter__(self) -> bool:
        return self.lock.acquire()

    def __exit__(self, *_: object) -> None:
        self.lock.release()

    def wait(self, timeout: float | None = None) -> bool:
        if self.lock.owner is not self.s._me():
            raise RuntimeError("cannot wait on un-acquired lock")
        self.lock.release()
        try:
            return self.s._wait(self.waiters, timeout)
        finally:
            self.lock.acquire()

    def wait_for(self, predicate: Callable[[], T], timeout: float | None = None) -> T:
        deadline = None if timeout is None else self.s.deadline(timeout)
        while not (ok := predicate()):
            left = None if deadline is None else deadline - self.s.now
            if left is not None and left <= 0:
                break
            self.wait(left)
        return ok

    def notify(self, n: int = 1) -> None:
        self.s._wake(self.waiters, n)

    def notify_all(self) -> None:
        self.s._wake(self.waiters)


class _Event:
    def __init__(self, s: Scheduler) -> None:
        self.s = s
        self.flag = False
        self.waiters: deque[_Task] = deque()

    def is_set(self) -> bool:
        return self.flag

    def set(self) -> None:
        self.flag = True
        self.s._wake(self.waiters)
        self.s.maybe_yield()

    def clear(self) -> None:
        self.flag = False

    def wait(self, timeout: float | None = None) -> bool:
        if not self.flag:
            self.s._wait(self.waiters, timeout)
        return self.flag


class _Queue:
    def __init__(self, s: Scheduler, maxsize: int) -> None:
        self.s = s
        self.maxsize = maxsize
        self.items: deque[Any] = deque()
        self.getters: deque[_Task] = deque()
        self.putters: deque[_Task] = deque()

    def qsize(self) -> int:
        return len(self.items)

    def empty(self) -> bool:
        return not self.items

    def full(self) -> bool:
        return 0 < self.maxsize <= len(self.items)

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        deadline = None if timeout is None else self.s.deadline(timeout)
        while self.full():
            left = None if deadline is None else deadline - self.s.now
            if not block or left is not None and left <= 0:
                raise queue_.Full
            self.s._wait(self.putters, left)
        self.items.append(item)
        self.s._wake(self.getters, 1)
        self.s.maybe_yield()

    def put_nowait(self, item: Any) -> None:
        self.put(item, block=False)

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        deadline = None if timeout is None else self.s.deadline(timeout)
        while not self.items:
            left = None if deadline is None else deadline - self.s.now
            if not block or left is not None and left <= 0:
                raise queue_.Empty
            self.s._wait(self.getters, left)
        item = self.items.popleft()
        self.s._wake(self.putters, 1)
        return item

    def get_nowait(self) -> Any:
        return self.get(block=False)
