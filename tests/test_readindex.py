"""Batched ReadIndex: a read never uses a round that started before it arrived."""

from __future__ import annotations

import threading
import time

from coordinator.readindex import ReadBatcher


def test_reads_share_rounds_but_never_an_earlier_one() -> None:
    rounds: list[tuple[float, list[int]]] = []
    gate = threading.Event()

    def run_round(log_id: int, items: list[int]) -> list[int]:
        rounds.append((time.monotonic(), list(items)))
        gate.wait(1)
        return [len(rounds)] * len(items)

    rb = ReadBatcher(run_round)
    arrived: dict[int, float] = {}
    got: dict[int, int | None] = {}

    def reader(i: int) -> None:
        arrived[i] = time.monotonic()
        got[i] = rb.get(7, i)

    first = threading.Thread(target=reader, args=(0,))
    first.start()
    time.sleep(0.05)  # round 1 is in flight now
    others = [threading.Thread(target=reader, args=(i,)) for i in range(1, 20)]
    for t in others:
        t.start()
    time.sleep(0.05)
    gate.set()
    first.join()
    for t in others:
        t.join()
    assert got[0] == 1
    assert all(got[i] == 2 for i in range(1, 20)), got  # one later round served them all
    assert len(rounds) == 2 and sorted(rounds[1][1]) == list(range(1, 20))
    for i in range(20):
        assert rounds[got[i] - 1][0] >= arrived[i]  # type: ignore[operator]


def test_failed_round_yields_none() -> None:
    def run_round(log_id: int, items: list[int]) -> list[int] | None:
        raise RuntimeError("no log server answered")

    assert ReadBatcher(run_round).get(1, "x") is None
    assert ReadBatcher(lambda log_id, items: None).get(1, "x") is None
