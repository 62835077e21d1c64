"""tests/sim/scheduler.py, the simulator's world backend: one task at a time in the seed's
order, a clock that moves only when every task waits, crashes that stop a process's tasks,
deadlocks reported, and the same seed replaying the same interleaving."""

from __future__ import annotations

import queue
import time
from concurrent import futures

import pytest

from runtime import loops, world
from tests.sim.scheduler import Deadlock, Scheduler


def _interleaving(seed: int) -> tuple[list[str], float]:
    s = Scheduler(seed, preempt=0.5)
    seen: list[str] = []

    def main() -> tuple[list[str], float]:
        q = world.queue()
        done = world.event()

        def producer(name: str) -> None:
            for i in range(5):
                q.put(f"{name}{i}")
                world.sleep(0.01 * (i + 1))

        def consumer() -> None:
            while len(seen) < 15:
                seen.append(q.get())
            done.set()

        for n in "abc":
            world.spawn(n, lambda n=n: producer(n))
        world.spawn("consumer", consumer)
        assert done.wait(60)
        return seen, world.monotonic()

    return s.run(main)


def test_a_seed_replays_its_interleaving_and_seeds_differ() -> None:
    runs = [_interleaving(seed) for seed in range(8)]
    assert _interleaving(3) == runs[3]  # same seed, same order and same times
    assert len({tuple(r[0]) for r in runs}) > 1  # the seed chooses the order
    for order, _ in runs:
        for n in "abc":
            assert [x for x in order if x[0] == n] == [f"{n}{i}" for i in range(5)]  # each FIFO


def test_the_clock_moves_only_when_every_task_waits() -> None:
    s = Scheduler(1)

    def main() -> float:
        t = world.monotonic()
        world.sleep(3600)
        assert world.monotonic() - t == 3600
        ev = world.event()
        assert not ev.wait(2.5) and world.monotonic() - t == 3602.5  # a timeout is the clock's
        return world.wall() - world.monotonic()

    t0 = time.monotonic()
    assert s.run(main) == s.start_wall
    assert time.monotonic() - t0 < 5  # an hour simulated, not waited


def test_a_lock_excludes_while_preemption_interleaves() -> None:
    def count(seed: int, locked: bool) -> int:
        s = Scheduler(seed, preempt=0.5)

        def main() -> int:
            n = [0]
            mu = world.lock()
            marks = world.event()

            def bump() -> None:
                for _ in range(10):
                    if locked:
                        mu.acquire()
                    v = n[0]
                    marks.set()  # a preemption point between the read and the write
                    n[0] = v + 1
                    if locked:
                        mu.release()

            ts = [world.spawn(f"b{i}", bump) for i in range(4)]
            for t in ts:
                t.join()
            return n[0]

        return s.run(main)

    assert all(count(seed, True) == 40 for seed in range(10))
    assert any(count(seed, False) < 40 for seed in range(10))  # lost updates without it


def test_conditions_queues_futures_and_pools_wait_on_the_simulated_clock() -> None:
    s = Scheduler(7)

    def main() -> None:
        c = world.condition()
        with c:
            assert not c.wait_for(lambda: False, timeout=1.0)
        assert world.monotonic() == 1.0
        q = world.queue(maxsize=1)
        q.put_nowait(1)
        with pytest.raises(queue.Full):
            q.put_nowait(2)
        assert q.get_nowait() == 1
        with pytest.raises(queue.Empty):
            q.get(timeout=0.5)
        assert world.monotonic() == 1.5
        f = world.future()
        with pytest.raises(futures.TimeoutError):
            f.result(timeout=2)
        assert world.monotonic() == 3.5
        pool = world.Pool("p", 2)
        slow = pool.submit(lambda: world.sleep(10) or "slow")
        fast = pool.submit(lambda: world.sleep(1) or "fast")
        fails = pool.submit(lambda: 1 // 0)
        order = [f.exception() or f.result() for f in world.as_completed([slow, fast, fails], timeout=20)]
        assert [o if isinstance(o, str) else type(o).__name__ for o in order] == \
            ["ZeroDivisionError", "fast", "slow"]
        assert world.monotonic() == 13.5
        late = pool.submit(lambda: world.sleep(100))
        with pytest.raises(futures.TimeoutError):
            list(world.as_completed([late], timeout=5))
        assert world.monotonic() == 18.5

    s.run(main)
    assert s.failures == []


def test_a_crashed_process_runs_no_further_step_and_others_go_on() -> None:
    s = Scheduler(2)
    steps: dict[str, int] = {"a": 0, "b": 0}

    def main() -> None:
        stop = world.event()

        def tick(p: str) -> float | None:
            steps[p] += 1
            return None

        for p in "ab":
            with s.process(p):
                loops.every(f"tick-{p}", 1.0, lambda p=p: tick(p), stop)
        world.sleep(10.5)
        s.crash("a")
        at_crash = dict(steps)
        world.sleep(10)
        assert steps["a"] == at_crash["a"] and steps["b"] >= at_crash["b"] + 9
        stop.set()

    s.run(main)
    assert s.failures == []


def test_a_paused_process_runs_nothing_until_resumed_while_the_clock_goes_on() -> None:
    s = Scheduler(6)
    ticks: dict[str, list[float]] = {"a": [], "b": []}

    def main() -> None:
        stop = world.event()
        for p in "ab":
            with s.process(p):
                loops.every(f"tick-{p}", 1.0, lambda p=p: ticks[p].append(world.monotonic()) and None, stop)
        world.sleep(3.5)
        s.pause("a", 5.0)  # a SIGSTOP at 3.5 s, a SIGCONT at 8.5 s
        world.sleep(8)
        stop.set()

    s.run(main)
    assert s.failures == []
    assert not [t for t in ticks["a"] if 3.5 < t < 8.5] and [t for t in ticks["a"] if t >= 8.5]
    assert len([t for t in ticks["b"] if 3.5 < t < 8.5]) >= 4  # the other process went on


def _resumed_first(seed: int) -> str:
    """Process "a" is stopped; an event wakes one of its tasks meanwhile, then a request
    arrives there (a task spawned into it): which of the two runs first once it resumes."""
    s = Scheduler(seed)
    order: list[str] = []

    def main() -> None:
        news = world.event()
        with s.process("a"):
            world.spawn("listener", lambda: (news.wait(), order.append("news")) and None)
        world.sleep(0.1)
        s.pause("a", 2.0)
        news.set()
        world.sleep(1.0)
        s.spawn("request", lambda: order.append(f"request at {world.monotonic():.1f}"), process="a")
        world.sleep(2.0)

    s.run(main)
    assert s.failures == [] and len(order) == 2
    return order[0]


def test_a_request_to_a_stopped_process_waits_and_races_what_woke_it_meanwhile() -> None:
    """A request that arrives while its process is stopped runs once it runs again, in an
    order drawn with what else woke the process meanwhile: not always after it (a writer
    then always heard of its successor before a read that waited for it, and a writer
    serving reads by an expired lease went unseen)."""
    firsts = {_resumed_first(seed) for seed in range(20)}
    assert firsts == {"news", "request at 2.1"}

def test_a_deadlock_is_reported_to_the_main_task() -> None:
    s = Scheduler(3)

    def main() -> None:
        never = world.event()
        t = world.spawn("stuck", lambda: never.wait() and None)
        t.join()

    with pytest.raises(Deadlock, match="stuck"):
        s.run(main)
    assert any("deadlock" in f for f in s.failures)


def test_an_uncaught_error_in_a_task_is_a_finding() -> None:
    s = Scheduler(4)
    s.run(lambda: world.spawn("bad", lambda: [][1]).join())
    assert len(s.failures) == 1 and "IndexError" in s.failures[0]


def test_primitives_refuse_threads_outside_the_simulation() -> None:
    s = Scheduler(5)
    made = s.run(lambda: world.event())
    with pytest.raises(RuntimeError, match="outside the simulation"):
        s.run(lambda: _from_a_real_thread(made))


def _from_a_real_thread(ev: object) -> None:
    import threading

    err: list[BaseException] = []

    def use() -> None:
        try:
            ev.wait(1)  # type: ignore[attr-defined]
        except RuntimeError as e:
            err.append(e)

    th = threading.Thread(target=use)
    th.start()
    th.join()
    raise err[0]


def _fired(seed: int) -> list[tuple[float, str]]:
    s = Scheduler(seed, buggify=(0.5, 0.2))

    def main() -> list[tuple[float, str]]:
        out = []
        for _ in range(200):
            for p in ("a", "b", "c", "d"):
                if world.buggify(p):
                    out.append((world.monotonic(), p))
            world.sleep(0.01)
        return out

    return s.run(main)


def test_fault_points_fire_as_the_seed_says_and_never_in_a_real_process() -> None:
    runs = {seed: _fired(seed) for seed in range(8)}
    assert _fired(3) == runs[3]  # the same seed: the same points, at the same times
    for fired in runs.values():
        points = {p for _, p in fired}
        assert points < {"a", "b", "c", "d"}  # a run enables some points, not all (at these odds)
        assert all(sum(1 for _, q in fired if q == p) > 10 for p in points)  # and fires them often
    assert len({frozenset(p for _, p in f) for f in runs.values()}) > 2  # seeds enable different points
    assert not any(world.buggify("a") for _ in range(1000))  # the real backend: never


def test_a_task_reads_the_clock_of_the_process_it_handles_a_message_for() -> None:
    """Each process's boot clock runs at its own rate; a message the simulated network
    hands to a server is handled on that server's clock (its read-lease promises are timed
    on it), whichever task runs the handling, and only while it does."""
    s = Scheduler(1)
    s.rates = {"server-0": 0.99, "server-1": 1.01}

    def main() -> tuple[float, float, float, float]:
        world.sleep(100.0)
        with s.process("server-0-0"):
            own = world.boot_clock()
            with s.clock_of("server-1-0"):
                theirs = world.boot_clock()
            after = world.boot_clock()
        return own, theirs, after, world.boot_clock()

    own, theirs, after, network = s.run(main)
    assert (own, theirs, after, network) == (pytest.approx(99.0), pytest.approx(101.0), pytest.approx(99.0),
                                             pytest.approx(100.0))


def test_a_task_killed_re_acquiring_a_condition_leaves_the_lock_to_its_holder() -> None:
    """A task of process "a" waits on a condition; woken, it waits to take the lock back,
    which a task of "b" holds, and "a" crashes meanwhile. Unwinding, its `with` must not
    release the lock it never got back (it once did: another task's lock freed under it,
    or "release unlocked lock", seen in a whole-cluster seed)."""
    s = Scheduler(3)
    held: list[bool] = []

    def main() -> None:
        cond = world.condition()
        in_b = world.event()

        def waiter() -> None:
            with cond:
                cond.wait(30)

        def holder() -> None:
            with cond:
                cond.notify_all()
                in_b.set()
                world.sleep(5)  # "a" wakes and waits for the lock; it is killed meanwhile
                held.append(cond.lock.owner is not None)  # type: ignore[attr-defined]  # the sim's

        with s.process("a"):
            world.spawn("waiter", waiter)
        world.sleep(1)
        with s.process("b"):
            world.spawn("holder", holder)
        assert in_b.wait(10)
        world.sleep(1)
        s.crash("a")
        world.sleep(10)

    s.run(main)
    assert s.failures == [] and held == [True]
