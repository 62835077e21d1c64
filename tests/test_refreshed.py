"""A value kept for a period and read again by one caller at a time (runtime/refreshed.py)."""

from __future__ import annotations

import threading

import pytest

from runtime.refreshed import Refreshed


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Source:
    """A value to read; `gate`, when given, holds each read until it is set."""

    def __init__(self, gate: threading.Event | None = None) -> None:
        self.value = 1
        self.reads = 0
        self.fail = False
        self.gate = gate
        self.reading = threading.Event()

    def __call__(self) -> int:
        self.reads += 1
        self.reading.set()
        if self.gate is not None:
            assert self.gate.wait(10)
        if self.fail:
            raise ConnectionError("zookeeper away")
        return self.value


def test_read_at_most_once_a_period() -> None:
    clock, src = Clock(), Source()
    r = Refreshed(src, 1.0, initial=0, clock=clock)
    assert r.last() == 0
    assert r.get() == 1 and src.reads == 1
    src.value = 2
    clock.now += 1.0
    assert r.get() == 1 and src.reads == 1  # within the period: the value kept
    clock.now += 0.01
    assert r.get() == 2 and src.reads == 2
    assert r.last() == 2


def test_a_failed_read_keeps_the_last_value_and_the_next_caller_tries_again() -> None:
    clock, src = Clock(), Source()
    r = Refreshed(src, 1.0, initial=0, clock=clock)
    assert r.get() == 1
    src.fail = True
    clock.now += 2
    with pytest.raises(ConnectionError):
        r.get()
    assert r.last() == 1
    src.fail, src.value = False, 3
    assert r.get() == 3 and src.reads == 3


def test_while_one_caller_reads_the_others_take_the_last_value() -> None:
    gate = threading.Event()
    clock, src = Clock(), Source(gate)
    r = Refreshed(src, 1.0, initial=0, clock=clock)
    gate.set()
    assert r.get() == 1
    gate.clear()
    src.value = 2
    clock.now += 2
    got: list[int] = []
    reader = threading.Thread(target=lambda: got.append(r.get()))
    reader.start()
    assert src.reading.wait(10)
    src.reading.clear()
    # The read is under way, held: every other caller gets the last value, at once.
    assert [r.get() for _ in range(20)] == [1] * 20
    assert src.reads == 2
    gate.set()
    reader.join(10)
    assert got == [2] and r.get() == 2 and src.reads == 2


def test_with_no_value_yet_callers_wait_for_the_one_read() -> None:
    gate = threading.Event()
    src = Source(gate)
    r = Refreshed(src, 1.0, initial=0, clock=Clock())
    got: list[int] = []
    first = threading.Thread(target=lambda: got.append(r.get()))
    first.start()
    assert src.reading.wait(10)
    second = threading.Thread(target=lambda: got.append(r.get()))
    second.start()
    second.join(0.2)
    assert second.is_alive() and got == []  # it waits: there is nothing to give yet
    gate.set()
    first.join(10)
    second.join(10)
    assert got == [1, 1] and src.reads == 1
