"""Background loops survive their failures (runtime/loops.py)."""

from __future__ import annotations

import threading

from runtime import loops
from runtime.loops import Backoff


def test_backoff_doubles_to_its_cap_and_resets() -> None:
    b = Backoff(0.1, 0.5)
    assert [b.failed() for _ in range(5)] == [0.1, 0.2, 0.4, 0.5, 0.5]
    b.succeeded()
    assert b.failed() == 0.1


def test_every_goes_on_after_its_body_raises() -> None:
    stop = threading.Event()
    calls: list[int] = []
    done = threading.Event()

    def body() -> None:
        calls.append(1)
        if len(calls) <= 3:
            raise RuntimeError("ZooKeeper session expired")  # what killed the positions loop
        done.set()

    t = loops.every("test", 0.01, body, stop)
    assert done.wait(30), "the loop died after a failure"
    stop.set()
    t.join(5)
    assert not t.is_alive() and len(calls) >= 4


def test_forever_starts_a_body_again_after_it_raises() -> None:
    stop = threading.Event()
    runs: list[int] = []
    done = threading.Event()

    def body() -> None:
        runs.append(1)
        if len(runs) < 3:
            raise ConnectionError("log server gone")
        done.set()
        stop.wait()

    t = loops.forever("test", body, stop)
    assert done.wait(30), "the loop was not started again"
    stop.set()
    t.join(5)
    assert not t.is_alive() and len(runs) == 3


def test_a_long_run_is_paced_to_its_duty_and_never_past_the_longest_interval() -> None:
    from runtime.loops import paced_wait

    assert paced_wait(10.0, 0.1, 0.0, 60.0) == 10.0  # no duty: the interval
    assert paced_wait(10.0, 0.1, 0.05, 60.0) == 10.0  # short runs: the interval
    assert paced_wait(10.0, 1.0, 0.05, 60.0) == 19.0  # 1 s of every 20
    assert paced_wait(10.0, 5.0, 0.05, 60.0) == 60.0  # never longer than the cap
