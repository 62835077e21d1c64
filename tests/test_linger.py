"""Lingering Read streams (log/linger.py): when a stream may hold committed entries, and
what wakes one that waits."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from log.linger import LINGER_ENTRIES_MAX, Lingering, linger_left

LONG_S = 60.0  # a wait nothing should let run out in these tests


def test_entries_wait_out_the_linger_from_when_they_were_first_seen() -> None:
    assert linger_left(now=10.0, since=10.0, linger_s=0.1, pending=1, hurried=False) == pytest.approx(0.1)
    assert linger_left(now=10.04, since=10.0, linger_s=0.1, pending=5, hurried=False) == pytest.approx(0.06)
    assert linger_left(now=10.1, since=10.0, linger_s=0.1, pending=5, hurried=False) == 0.0
    assert linger_left(now=11.0, since=10.0, linger_s=0.1, pending=5, hurried=False) == 0.0


@given(now=st.floats(0, 1e6), ago=st.floats(0, 1e3), linger_s=st.floats(0, 1), pending=st.integers(1, 10**6))
def test_hurried_or_a_full_batch_goes_at_once(now: float, ago: float, linger_s: float, pending: int) -> None:
    since = now - ago  # first seen at or before now
    assert linger_left(now, since, linger_s, pending, hurried=True) == 0.0
    left = linger_left(now, since, linger_s, pending, hurried=False)
    if pending >= LINGER_ENTRIES_MAX:
        assert left == 0.0
    assert 0.0 <= left <= linger_s + 1e-6


def _waiter(lg: Lingering, log_id: int, position: int) -> threading.Thread:
    t = threading.Thread(target=lg.wait, args=(log_id, position, LONG_S), daemon=True)
    t.start()
    return t


def _until_waiting(lg: Lingering, log_id: int) -> None:
    for _ in range(1000):
        if lg._waiting[log_id]:
            return
        threading.Event().wait(0.01)
    raise AssertionError("the stream never started to wait")


def test_a_hurry_through_the_position_wakes_the_waiting_stream() -> None:
    lg = Lingering(4)
    t = _waiter(lg, 2, position=10)
    _until_waiting(lg, 2)
    lg.hurry(2, 9)  # not through its position: it still waits
    lg.hurry(1, 50)  # another log
    t.join(0.3)
    assert t.is_alive()
    lg.hurry(2, 10)
    t.join(10)
    assert not t.is_alive(), "a hurry through the stream's next position must wake it"
    assert lg.hurried(2, 10) and not lg.hurried(2, 11) and not lg.hurried(3, 0)


def test_a_stream_already_hurried_does_not_wait() -> None:
    lg = Lingering(1)
    lg.hurry(0, 5)
    t = _waiter(lg, 0, position=3)
    t.join(10)
    assert not t.is_alive()
    lg.hurry(0, 2)  # a hurry never moves back
    assert lg.hurried(0, 5)


def test_a_full_batch_of_committed_entries_wakes_the_waiting_stream() -> None:
    lg = Lingering(1)
    t = _waiter(lg, 0, position=100)
    _until_waiting(lg, 0)
    lg.committed(0, lambda: 100 + LINGER_ENTRIES_MAX - 2)  # one short of a full batch
    t.join(0.3)
    assert t.is_alive()
    lg.committed(0, lambda: 100 + LINGER_ENTRIES_MAX - 1)
    t.join(10)
    assert not t.is_alive(), "LINGER_ENTRIES_MAX entries waiting must wake the stream"


def test_commits_with_nobody_waiting_read_no_commit_point() -> None:
    lg = Lingering(1)
    asked = []
    lg.committed(0, lambda: asked.append(1) or 0)  # type: ignore[func-returns-value]
    assert not asked


def test_only_a_storage_node_beside_a_log_server_asks_its_streams_to_linger() -> None:
    """The host layout: its records are answered beside the writer. A storage node in a
    process of its own (split) answers records itself and never lingers."""
    from types import SimpleNamespace

    from runtime.inprocess import Local
    from storage_node.apply_loop import ApplyLoop
    from storage_node.callbacks import Callbacks
    from storage_node.settings import Settings

    def loop(local_log: Local, settings: Settings) -> ApplyLoop:
        state = SimpleNamespace(settings=settings)
        return ApplyLoop(state, None, lambda code, why: None, local_log, Callbacks())  # type: ignore[arg-type]

    assert loop(Local(), Settings()).linger_ms() == 0
    beside = Local().bind(["127.0.0.1:1"], object())
    assert loop(beside, Settings()).linger_ms() == 100
    assert loop(beside, Settings(read_linger_s=0.02)).linger_ms() == 20
    assert loop(beside, Settings(read_linger_s=30)).linger_ms() == 1000  # the bound a Read allows


def test_a_linger_over_the_bound_in_the_environment_is_refused_naming_it() -> None:
    from storage_node.settings import Settings

    assert Settings.from_env({"MIDTOWN_READ_LINGER_S": "0.02"}).read_linger_s == 0.02
    with pytest.raises(ValueError, match="MIDTOWN_READ_LINGER_S"):
        Settings.from_env({"MIDTOWN_READ_LINGER_S": "2"})
