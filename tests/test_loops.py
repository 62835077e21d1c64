"""Background loops survive their failures (runtime/loops.py)."""

from __future__ import annotations

import threading
import time

import pytest

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


class _Clock:
    """A clock that only moves when the pass works or rests."""

    def __init__(self) -> None:
        self.t = 0.0
        self.rests: list[float] = []

    def __call__(self) -> float:
        return self.t

    def rest(self, s: float) -> None:
        self.rests.append(round(s, 6))
        self.t += s


def _pass(spread: loops.Spread, clock: _Clock, pieces: int, piece_s: float) -> None:
    for _ in range(pieces):
        clock.t += piece_s
        spread.piece_done(piece_s)


def test_a_spread_pass_takes_its_duty_of_a_core_while_it_runs() -> None:
    clock = _Clock()
    spread = loops.Spread(0.05, 20.0, 0.0, clock.rest, clock)  # no earlier pass to go by
    _pass(spread, clock, 10, 0.01)
    assert spread.busy_s == pytest.approx(0.1)
    assert clock.rests == [0.19] * 10  # 1 busy in 20
    assert clock.t == pytest.approx(2.0)


def test_a_long_pass_rests_less_so_as_to_end_within_its_spread() -> None:
    clock = _Clock()
    spread = loops.Spread(0.05, 20.0, 2.0, clock.rest, clock)  # the last pass was busy 2 s
    _pass(spread, clock, 200, 0.01)
    assert clock.rests == [0.09] * 200  # 2 s over 20: a tenth
    assert clock.t == pytest.approx(20.0)


def test_a_pass_never_rests_past_its_spread() -> None:
    clock = _Clock()
    spread = loops.Spread(0.05, 20.0, 0.5, clock.rest, clock)  # expected 0.5 s: busy 4 s instead
    _pass(spread, clock, 400, 0.01)
    assert spread.busy_s == pytest.approx(4.0)
    # 1 s of work spread over the 20 s at 1 in 20, then the other 3 s without a rest
    assert len(clock.rests) == 100 and sum(clock.rests) == pytest.approx(19.0)
    assert clock.t == pytest.approx(23.0)


def test_every_paces_on_the_busy_time_a_resting_body_returns() -> None:
    stop = threading.Event()
    runs: list[float] = []

    def body() -> float:
        runs.append(time.monotonic())
        if len(runs) == 3:
            stop.set()
        return 1.0  # busy 1 s: with a duty of 1/2, wait 1 s (not the 0.01 s interval)

    t = loops.every("test", 0.01, body, stop, first_at_once=True, duty=0.5, max_interval_s=60.0)
    t.join(30)
    assert not t.is_alive() and len(runs) == 3
    assert runs[2] - runs[0] >= 2.0
