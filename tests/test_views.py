"""The rules of a storage node's read views (storage_node/views.py), on their own: which
view a scan shares, and which views close; and how a shard is cut into splits
(storage_node/reads.py cut_splits)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage_node import views as v
from storage_node.reads import cut_splits


def view(i: int, created: float, used: float, readers: int = 0, position: int = 10) -> v.View:
    return v.View(bytes([i]), f"/nowhere/{i}", db=None, created=created, used=used,  # type: ignore[arg-type]
                  readers=readers, positions={0: (position, 0)})


def test_a_scan_shares_the_newest_young_view_far_enough_along() -> None:
    old = view(1, created=0.0, used=0.0, position=50)
    young = view(2, created=9.5, used=9.5, position=40)
    younger_behind = view(3, created=9.8, used=9.8, position=30)
    views = [old, young, younger_behind]
    assert v.shareable(views, 0, 35, now=10.0) is young
    assert v.shareable(views, 0, 30, now=10.0) is younger_behind
    assert v.shareable(views, 0, 45, now=10.0) is None, "the old view is too old to share"
    assert v.shareable(views, 0, 35, now=10.0 + v.SHARE_S + 1) is None


def test_idle_views_close_and_read_ones_never_do() -> None:
    idle = view(1, 0.0, 0.0)
    read = view(2, 0.0, 0.0, readers=1)
    recent = view(3, 0.0, v.VIEW_IDLE_S)
    assert v.to_close([idle, read, recent], now=v.VIEW_IDLE_S + 1) == [idle]


@given(st.lists(st.tuples(st.floats(0, 1000), st.integers(0, 2)), max_size=3 * v.VIEWS_MAX),
       st.floats(0, 2000), st.integers(0, 3))
def test_closing_leaves_room_when_it_can_and_spares_every_read_view(
        specs: list[tuple[float, int]], now: float, room_for: int) -> None:
    views = [view(i, used, used, readers) for i, (used, readers) in enumerate(specs)]
    closed = v.to_close(views, now, room_for)
    ids: Any = {x.id for x in closed}
    assert len(ids) == len(closed), "each view once"
    assert all(x.readers == 0 for x in closed)
    left = [x for x in views if x.id not in ids]
    assert all(now - x.used <= v.VIEW_IDLE_S or x.readers for x in left), "every idle view closes"
    if len(left) + room_for > v.VIEWS_MAX:  # over: only because every view left is being read
        assert all(x.readers for x in left)
    # the least recently used go first
    spared = [x for x in left if x.readers == 0]
    forced = [x for x in closed if now - x.used <= v.VIEW_IDLE_S]
    assert all(f.used <= s.used for f in forced for s in spared)


@settings(deadline=None)
@given(st.lists(st.tuples(st.binary(min_size=1, max_size=6), st.integers(0, 40)), max_size=60,
                unique_by=lambda x: x[0]), st.integers(1, 120))
def test_splits_cover_the_range_once_each_within_its_size(rows: list[tuple[bytes, int]],
                                                           split_bytes: int) -> None:
    items = sorted((b"P" + k, b"v" * n) for k, n in rows)
    cut = cut_splits(items, 1, b"", b"", split_bytes, lambda: False)
    assert cut[0][0] == b"" and cut[-1][1] == b""
    assert all(a[1] == b[0] for a, b in zip(cut, cut[1:])), "contiguous, no gap"
    assert sum(c[3] for c in cut) == len(items)
    assert sum(c[2] for c in cut) == sum(len(k) + len(v) for k, v in items)
    for start, end, size, count in cut:
        inside = [(k, v) for k, v in items if k[1:] >= start and (not end or k[1:] < end)]
        assert len(inside) == count and sum(len(k) + len(v) for k, v in inside) == size
        assert size <= split_bytes or count == 1, "over the size only for a key larger than it"


def test_a_split_stops_at_the_deadline() -> None:
    calls = iter([False, False, True])
    with pytest.raises(TimeoutError, match="2 read"):
        cut_splits([(b"Pa", b"1"), (b"Pb", b"2"), (b"Pc", b"3")], 1, b"", b"", 1, lambda: next(calls))
