"""The change stream's recording (storage_node/changes.py, storage_node/change_recorder.py)
against a checker that derives the changes from the log alone: hypothesis-generated
histories of puts, deletes, check-and-sets, increments and TTLs, with time marks, applied
in batches of any size through the real apply step and store, then read back from random
positions in pages of any size."""

from __future__ import annotations

import tempfile
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from record.model import Cas, Delete, Incr, Put, Record
from storage_node import changes, keys
from storage_node.apply import apply
from storage_node.change_recorder import ChangeRecorder
from storage_node.store import BatchView, NodeStore
from tests import watch_checker

SHARD, DATASET, LOG = 3, "ds", 3
PKEYS = [b"p0", b"p1", b"q"]
LKEYS = [b"a", b"b", b"c"]

keys_ = st.tuples(st.sampled_from(PKEYS), st.sampled_from(LKEYS))
ttls = st.sampled_from([0, 0, 1, 5, 20, 60])
ops = st.one_of(
    st.tuples(st.just("put"), keys_, st.binary(max_size=3), ttls),
    st.tuples(st.just("delete"), keys_),
    st.tuples(st.just("cas"), keys_, st.one_of(st.none(), st.sampled_from([b"", b"1", b"x"])),
              st.binary(max_size=2), ttls),
    st.tuples(st.just("incr"), keys_, st.integers(-3, 3), ttls),
    st.tuples(st.just("mark")),
)
history = st.lists(st.tuples(ops, st.integers(0, 25)), min_size=1, max_size=60)


def record(op: tuple) -> Record | None:
    kind = op[0]
    if kind == "mark":
        return None
    (pkey, lkey) = op[1]
    o: Any
    if kind == "put":
        o = Put(lkey, op[2], op[3])
    elif kind == "delete":
        o = Delete(lkey)
    elif kind == "cas":
        o = Cas(lkey, expected_value=op[2], expect_absent=op[2] == b"", new_value=op[3], ttl_ms=op[4])
    else:
        o = Incr(lkey, op[2], op[3])
    return Record(b"", "", DATASET, SHARD, pkey, (o,))


def checker(entries: list[tuple[tuple, int]]) -> list[tuple]:
    return watch_checker.changes([(pos, ts, record(op)) for pos, (op, ts) in enumerate(entries)])


def applied(store: NodeStore, entries: list[tuple[tuple, int]], cuts: list[int]) -> None:
    """Apply the history in batches (cut after the given entries), as the apply loop does."""
    start, prev = 0, 0
    for end in sorted({*[c for c in cuts if 0 < c < len(entries)], len(entries)}):
        view = BatchView(store)
        rec = ChangeRecorder(view, LOG, prev, entries[end - 1][1], lambda shard, position: position)
        for pos in range(start, end):
            op, ts = entries[pos]
            rec.entry(pos, ts)
            r = record(op)
            if r is not None:
                rec.add(r, apply(view, r, LOG, pos, ts, 0), pos, ts, LOG)
        view.commit({LOG: (end, entries[end - 1][1])})
        start, prev = end, entries[end - 1][1]


def as_tuple(c: changes.Change) -> tuple:
    return (c.kind.name, c.partition_key, c.local_key, c.value, c.version, c.expires_at_ms,
            c.position, c.log_time_ms)


def stored(store: NodeStore, start: int, upto: int, max_changes: int, max_bytes: int) -> list[tuple]:
    """Pages read back from `start` until none is left, as a watch reads them."""
    out: list[tuple] = []
    at = start
    while True:
        items = store.synced.items(keys.change_key(SHARD, DATASET, at, 0),
                                   keys.prefix_end(keys.change_prefix(SHARD, DATASET)))
        got, nxt = changes.page(items, upto, max_changes, max_bytes)
        assert not got or got[0].position >= at
        out.extend(as_tuple(c) for c in got)
        if nxt is None:
            return out
        assert nxt > at
        at = nxt


def times(steps: list[int]) -> list[int]:
    out, t = [], 1000
    for s in steps:
        t += s
        out.append(t)
    return out


@settings(max_examples=60, deadline=None)
@given(history, st.lists(st.integers(0, 60), max_size=8), st.data())
def test_recorded_changes_equal_the_checkers(hist: list, cuts: list[int], data: st.DataObject) -> None:
    entries = list(zip([op for op, _ in hist], times([s for _, s in hist])))
    want = checker(entries)
    with tempfile.TemporaryDirectory() as d:
        store = NodeStore(d + "/db")
        try:
            applied(store, entries, cuts)
            assert stored(store, 0, len(entries), 1 << 30, 1 << 30) == want
            start = data.draw(st.integers(0, len(entries)), label="start")
            page = data.draw(st.integers(1, 5), label="page")
            assert stored(store, start, len(entries), page, 1 << 30) == [c for c in want if c[6] >= start]
            # Not yet applied positions are not read.
            upto = data.draw(st.integers(0, len(entries)), label="upto")
            assert stored(store, 0, upto, page, 40) == [c for c in want if c[6] < upto]
        finally:
            store.close()


def test_a_page_ends_between_positions_never_inside_one() -> None:
    k = [(keys.change_key(SHARD, DATASET, p, s), changes.encode(changes.Change(
        changes.Kind.PUT, b"p", bytes([s]), b"v", p + 1, 0, p, 5))) for p, s in
         [(1, 0), (1, 1), (1, 2), (4, 0), (4, 1)]]
    got, nxt = changes.page(iter(k), 10, 1, 1 << 20)
    assert [(c.position, c.seq) for c in got] == [(1, 0), (1, 1), (1, 2)] and nxt == 4
    got, nxt = changes.page(iter(k[3:]), 10, 1, 1 << 20)
    assert [(c.position, c.seq) for c in got] == [(4, 0), (4, 1)] and nxt is None
    got, nxt = changes.page(iter(k), 4, 100, 1 << 20)  # position 4 not applied yet
    assert len(got) == 3 and nxt is None
    got, _ = changes.page(iter(k), 10, 100, 1 << 20, partition_key=b"q")
    assert got == []


def test_changes_older_than_the_retention_go_and_the_floor_rises() -> None:
    entries = [(("put", (b"p0", b"a"), b"v", 0), t) for t in times([10] * 10)]
    with tempfile.TemporaryDirectory() as d:
        store = NodeStore(d + "/db")
        try:
            applied(store, entries, [3, 7])
            assert store.change_floor(SHARD) == 0
            view = BatchView(store)
            cutoff = entries[4][1]  # log time of position 4: positions 0..3 go
            assert view.reclaim_changes(lambda shard: cutoff if shard == SHARD else 0, 100) == 4
            view.commit({})
            assert store.change_floor(SHARD) == 4
            assert [c[6] for c in stored(store, 0, 10, 100, 1 << 20)] == list(range(4, 10))
            view = BatchView(store)  # a bounded pass: two go, the floor follows
            assert view.reclaim_changes(lambda shard: 1 << 60, 2) == 2
            view.commit({})
            assert store.change_floor(SHARD) == 6
        finally:
            store.close()
