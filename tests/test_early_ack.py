"""A plain put answered as soon as the log has it: the version it reports is the one the
storage nodes store, and when the log client had to retry (an earlier copy may be in the
log) the coordinator does not guess (issue: a put reported a version the key never had)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from coordinator.appender import Placed
from coordinator.node import early_result
from record.model import Delete, Put, Record
from storage_node import keys
from storage_node.handoff import Place
from tests.sim.store import MemState


@given(position=st.integers(0, 2**40), ts=st.integers(1, 2**41), ttl=st.integers(0, 10**9),
       default_ttl=st.integers(0, 10**9), base=st.integers(0, 2**40), floor=st.integers(0, 2**41))
def test_a_put_held_once_reports_what_apply_stores(position: int, ts: int, ttl: int, default_ttl: int,
                                                   base: int, floor: int) -> None:
    """Also for a shard handed over from another log: its stint's version base and time
    floor (catalog/log_map.py) are what the apply loop adds (storage_node/handoff.py)."""
    rec = Record(b"rid", "", "ds", 3, b"pk", (Put(b"lk", b"v", ttl),), default_ttl)
    early = early_result(rec, Placed(position, ts, False, 0, base, floor), default_ttl)
    assert early is not None
    place = Place(0, version_base=base, ts_floor=floor)
    state = MemState()
    state.run(rec, position + place.version_base, place.log_time(ts))
    stored = state.values[keys.value_key(3, "ds", b"pk", b"lk")]
    assert early.results[0].value == stored


def test_a_retried_append_is_not_answered_from_its_own_position() -> None:
    """Two copies in the log (the first attempt's outcome was unknown, and recovery kept
    it): the first is applied, the second is a duplicate. The second copy's position
    would give a version the key never has, so no early answer is made."""
    rec = Record(b"rid", "", "ds", 3, b"pk", (Put(b"lk", b"v"),))
    state = MemState()
    state.run(rec, 10, 1000)  # the copy of the unknown attempt
    state.run(rec, 17, 1001)  # the retry's copy
    stored = state.values[keys.value_key(3, "ds", b"pk", b"lk")]
    assert stored.version == 11
    assert early_result(rec, Placed(17, 1001, maybe_earlier_copy=True), 0) is None
    wrong = early_result(rec, Placed(17, 1001, maybe_earlier_copy=False), 0)
    assert wrong is not None and wrong.results[0].value.version != stored.version


def test_a_delete_held_once_is_answered_with_its_position() -> None:
    rec = Record(b"rid", "", "ds", 3, b"pk", (Delete(b"lk"),))
    r = early_result(rec, Placed(5, 1000, maybe_earlier_copy=False, log_id=2), 0)
    assert r is not None and r.position == 5 and r.log_id == 2 and r.applied
