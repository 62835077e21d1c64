"""Bounded reads of the RocksDB stores (log/rocks_store.py): a read returns exactly the keys
of its range, in order, whatever lies around it, deleted or not.

The reason for the bound is speed (an unbounded read of a log's newest entry stepped
through the next log's truncated prefix: 8.5 ms instead of 4 us, docs/performance.md,
"Reads bounded"), which the benchmarks measure; these tests hold what the bound must never
change: which keys a read sees."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st
from rocksdict import WriteBatch

from log.entry import Entry
from log.rocks_store import RocksStore
from log.store import Batch, ReplicaLogMeta, SegmentMeta
from runtime.disk import SyncedDb
from storage_node.keys import prefix_end
from storage_node.store import NodeStore

small_bytes = st.binary(min_size=0, max_size=4)


@given(small_bytes, small_bytes)
def test_prefix_end_bounds_exactly_the_keys_with_the_prefix(prefix: bytes, key: bytes) -> None:
    end = prefix_end(prefix)
    inside = key >= prefix and (end is None or key < end)
    assert inside == key.startswith(prefix)


def test_prefix_end_of_nothing_or_all_ff_is_unbounded() -> None:
    assert prefix_end(b"") is None
    assert prefix_end(b"\xff\xff") is None
    assert prefix_end(b"a\xff") == b"b"


@settings(max_examples=40, deadline=None)
@given(keys=st.sets(small_bytes.filter(bool), max_size=40), deleted=st.sets(small_bytes, max_size=20),
       lo=small_bytes, hi=st.none() | small_bytes)
def test_items_and_keys_give_exactly_the_live_keys_in_the_range(tmp_path_factory, keys: set[bytes],
                                                                  deleted: set[bytes], lo: bytes,
                                                                  hi: bytes | None) -> None:
    db = SyncedDb(str(tmp_path_factory.mktemp("db")))
    try:
        wb = WriteBatch(raw_mode=True)
        for k in keys:
            wb.put(k, b"v" + k)
        db.write(wb)
        wb = WriteBatch(raw_mode=True)
        for k in deleted:
            wb.delete(k)
        db.write(wb)
        live = sorted(k for k in keys - deleted if k >= lo and (hi is None or k < hi))
        assert list(db.items(lo, hi)) == [(k, b"v" + k) for k in live]
        assert list(db.keys(lo, hi)) == live
    finally:
        db.close()


def _entries(first: int, last: int) -> list[Entry]:
    return [Entry(p, 1, 1_000 + p, b"payload-%d" % p) for p in range(first, last + 1)]


def test_a_log_range_beside_a_truncated_neighbour_reads_exactly_its_entries(tmp_path) -> None:
    """Log 0's newest entries are followed in key order by log 1's oldest; log 1 truncated
    below 4,000 leaves thousands of deleted keys there. Reads of either log see exactly
    their live entries."""
    store = RocksStore(str(tmp_path / "log"))
    try:
        meta = ReplicaLogMeta(fenced_epoch=1, first=0, first_ts=0, segments={1: SegmentMeta(-1, -1)})
        store.commit(Batch(0, _entries(0, 99), None, None))
        store.commit(Batch(1, _entries(0, 4_999), None, None))
        store.commit(Batch(1, [], meta, 4_000))
        assert store.range(0, 1, 99, 99) == _entries(99, 99)
        assert store.range(0, 1, 90, 120) == _entries(90, 99)
        assert store.range(1, 1, 3_990, 4_010) == _entries(4_000, 4_010)
        assert store.range(1, 1, 4_998, 6_000) == _entries(4_998, 4_999)
        assert store.range(0, 1, 5, 4) == []
        assert store.range(0, 2, 0, 10) == []  # another segment of the same log: nothing
        assert set(store.load()) == {1}
    finally:
        store.close()


def test_a_node_store_prefix_read_stops_at_its_prefix_with_deletions_past_it(tmp_path) -> None:
    store = NodeStore(str(tmp_path / "node"))
    try:
        wb = WriteBatch(raw_mode=True)
        for i, p in itertools.product(range(300), (b"Pa", b"Pb", b"Pc")):
            wb.put(p + b"%04d" % i, b"x")
        store.synced.write(wb)
        wb = WriteBatch(raw_mode=True)
        wb.delete_range(b"Pb", b"Pc")
        store.synced.write(wb)
        assert [k for k, _ in store.under(b"Pa")] == [b"Pa%04d" % i for i in range(300)]
        assert list(store.under(b"Pb")) == []
        assert [k for k, _ in store.under(b"Pc", b"0298")] == [b"Pc0298", b"Pc0299"]
        assert store.local_range(b"Pa", b"0010", b"0013", 10) == [(b"%04d" % i, b"x") for i in range(10, 13)]
    finally:
        store.close()


def test_a_bounded_read_holds_its_bounds_until_it_has_read(tmp_path) -> None:
    """rocksdict's iterator borrows the bytes of its bounds and seeks at its first step:
    `bounded_items` keeps them while it runs, so a read whose caller's bound keys are
    gone (freed, their memory reused) still reads exactly its range."""
    import gc

    from rocksdict import Options, Rdict

    from runtime.disk import bounded_items

    db = Rdict(str(tmp_path / "db"), Options(raw_mode=True))
    try:
        for i in range(300):
            db[b"k%04d" % i] = b"v"
        reads = []
        for i in range(0, 290, 7):
            # bounds made fresh and dropped by the caller before the read's first step
            it = bounded_items(db, bytes(bytearray(b"k%04d" % i)), bytes(bytearray(b"k%04d" % (i + 5))))
            _reuse = [bytes(bytearray(b"z" * 5)) for _ in range(200)]
            gc.collect()
            reads.append(([k for k, _ in it], [b"k%04d" % j for j in range(i, i + 5)]))
        assert all(got == want for got, want in reads)
    finally:
        db.close()
