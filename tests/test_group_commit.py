"""Group commit run by its callers (runtime/group_commit.py): every caller gets its own result,
in order, batches form under load, errors reach every caller of the batch, nobody hangs."""

from __future__ import annotations

import threading
import time

import pytest

from runtime.group_commit import GroupCommit, GroupTimeout


def _run_threads(n: int, fn) -> list:
    out: list = [None] * n
    start = threading.Barrier(n)

    def go(i: int) -> None:
        start.wait()
        try:
            out[i] = fn(i)
        except BaseException as e:  # noqa: BLE001 - recorded for the assertions
            out[i] = e

    ts = [threading.Thread(target=go, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
        assert not t.is_alive(), "a caller hung"
    return out


def test_lone_caller_runs_its_own_batch_in_its_own_thread() -> None:
    threads: list[str] = []

    def run(items: list[int]) -> list[int]:
        threads.append(threading.current_thread().name)
        return [x * 2 for x in items]

    g: GroupCommit[int, int] = GroupCommit(run)
    assert [g.call(i) for i in range(5)] == [0, 2, 4, 6, 8]
    assert threads == [threading.current_thread().name] * 5


def test_concurrent_callers_get_their_own_results_and_batches_form() -> None:
    batches: list[list[int]] = []
    seen: list[int] = []
    lock = threading.Lock()

    def run(items: list[int]) -> list[int]:
        with lock:
            assert not batches or batches[-1] is not None
            batches.append(list(items))
            seen.extend(items)
        time.sleep(0.005)  # a batch takes a while: others queue meanwhile
        return [x * 10 for x in items]

    g: GroupCommit[int, int] = GroupCommit(run)
    n = 64
    out = _run_threads(n, lambda i: [g.call(i * 1000 + k) for k in range(20)])
    for i, r in enumerate(out):
        assert r == [(i * 1000 + k) * 10 for k in range(20)]
    assert sorted(seen) == sorted(i * 1000 + k for i in range(n) for k in range(20))  # each once
    assert max(len(b) for b in batches) > 1
    assert len(batches) < n * 20


def test_batches_never_overlap() -> None:
    running = [0]
    most = [0]

    def run(items: list[int]) -> list[int]:
        running[0] += 1
        most[0] = max(most[0], running[0])
        time.sleep(0.001)
        running[0] -= 1
        return items

    g: GroupCommit[int, int] = GroupCommit(run)
    _run_threads(16, lambda i: [g.call(i) for _ in range(10)])
    assert most[0] == 1


def test_max_size_bounds_a_batch() -> None:
    sizes: list[int] = []

    def run(items: list[bytes]) -> list[int]:
        sizes.append(sum(len(x) for x in items))
        time.sleep(0.002)
        return [len(x) for x in items]

    g: GroupCommit[bytes, int] = GroupCommit(run, size=len, max_size=30)
    out = _run_threads(32, lambda i: g.call(b"x" * 10))
    assert out == [10] * 32
    assert max(sizes) <= 30
    # An item larger than the limit still runs, alone.
    assert g.call(b"y" * 100) == 100


def test_an_error_reaches_every_caller_of_its_batch_and_the_next_batch_runs() -> None:
    fail = threading.Event()
    fail.set()

    def run(items: list[int]) -> list[int]:
        time.sleep(0.002)
        if fail.is_set() and any(x < 0 for x in items):
            raise ValueError("boom")
        return items

    g: GroupCommit[int, int] = GroupCommit(run)
    with pytest.raises(ValueError):
        g.call(-1)
    out = _run_threads(8, lambda i: g.call(i - 4))
    for i, r in enumerate(out):
        assert r == i - 4 or isinstance(r, ValueError)
    assert isinstance(out[0], ValueError)  # -4 failed its batch
    fail.clear()
    assert g.call(-7) == -7  # the group is still usable


def test_a_wrong_number_of_results_is_an_error_not_a_hang() -> None:
    g: GroupCommit[int, int] = GroupCommit(lambda items: items[:-1])
    with pytest.raises(RuntimeError, match="got 0 results"):
        g.call(1)


def test_a_queued_item_times_out_without_running() -> None:
    release = threading.Event()
    ran: list[int] = []

    def run(items: list[int]) -> list[int]:
        ran.extend(items)
        if 0 in items:
            release.wait(10)
        return items

    g: GroupCommit[int, int] = GroupCommit(run)
    t = threading.Thread(target=g.call, args=(0,))
    t.start()
    while not ran:
        time.sleep(0.001)
    with pytest.raises(GroupTimeout):
        g.call(1, timeout_s=0.05)
    release.set()
    t.join(10)
    assert ran == [0]
    assert g.call(2, timeout_s=1) == 2  # leadership was handed back


def test_gather_is_asked_only_after_a_batch_of_several() -> None:
    """A lone caller never waits for others; after a batch of several, the next leader is
    asked to gather first, with that batch's size."""
    asked: list[int] = []
    hold = threading.Event()

    def run(items: list[int]) -> list[int]:
        hold.wait(10)
        return items

    g: GroupCommit[int, int] = GroupCommit(run, gather=lambda queued, last: asked.append(last))
    hold.set()
    assert [g.call(i) for i in range(3)] == [0, 1, 2]
    assert asked == []  # batches of one: nobody to gather
    hold.clear()
    first = threading.Thread(target=g.call, args=(100,))
    first.start()
    deadline = time.monotonic() + 10
    while not g._busy and time.monotonic() < deadline:
        time.sleep(0.001)
    others = [threading.Thread(target=g.call, args=(i,)) for i in range(4)]
    for t in others:
        t.start()
    while len(g._q) < 4 and time.monotonic() < deadline:
        time.sleep(0.001)
    hold.set()  # the first runs alone, the four queued behind it together
    for t in [first, *others]:
        t.join(10)
    assert asked == []  # the batch of four followed a batch of one
    assert g.call(7) == 7
    assert asked == [4]  # the next leader after the batch of four was asked to gather
