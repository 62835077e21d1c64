"""A RocksDB database on disk (rocksdict) as the servers use it: writes made durable before
they return (rocksdict does not sync by default, PITFALLS.md), reads bounded at their end,
and a closed database refusing with Stopping. The log's replica store
(log/rocks_store.py) and the storage node's (storage_node/store.py) are built on it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Protocol

import grpc
from rocksdict import BlockBasedOptions, Options, Rdict, ReadOptions, WriteBatch, WriteOptions

from runtime.refusals import Refusal


def below(hi: bytes | None) -> ReadOptions:
    """Read options for an iterator that ends before `hi` (None: at the last key)."""
    opts = ReadOptions()
    if hi is not None:
        opts.set_iterate_upper_bound(hi)  # (not its lower-bound twin: PITFALLS.md)
    return opts


class Stopping(Refusal):
    """A write to a store that has closed: the server is stopping; the caller retries
    elsewhere or later."""

    def __init__(self) -> None:
        super().__init__(grpc.StatusCode.UNAVAILABLE, "the server is stopping; retry")


class SyncedDb:
    """A rocksdict database for plain bytes whose `write` returns once the batch is durable.

    rocksdict does not sync by default (PITFALLS.md), and a write with `sync=True` holds the
    GIL through the fsync: every other thread of the process (gRPC handlers, replication)
    stalls for a quarter of a millisecond or more. `flush_wal(True)` releases the GIL while
    it syncs, so a batch is written unsynced and the write-ahead log synced after it: the
    same durability (SyncWAL covers every write made before it), without the stall."""

    def __init__(self, path: str, bloom_bits_per_key: int = 0,
                 sync_timer: Callable[[], AbstractContextManager[Any]] = nullcontext) -> None:
        """`bloom_bits_per_key`: a Bloom filter per table file (and for the memtable), so
        that looking up a key that is absent (most event ids are new) reads no block of a
        file that cannot hold it; 0: none. `sync_timer()`: times each write's sync (the
        log's replica store counts them in a histogram)."""
        opts = Options(raw_mode=True)
        opts.create_if_missing(True)
        if bloom_bits_per_key:
            table = BlockBasedOptions()
            table.set_bloom_filter(bloom_bits_per_key, False)
            opts.set_block_based_table_factory(table)
            opts.set_memtable_whole_key_filtering(True)
            opts.set_memtable_prefix_bloom_ratio(0.02)
        self.db = Rdict(path, opts)
        self._nosync = WriteOptions()
        self._sync_timer = sync_timer
        self.closed = False

    def items(self, lo: bytes, hi: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        """(key, value) of each key in [lo, hi), in order (hi None: to the last key).

        The iterator is bounded at `hi`, not stopped by the caller at the first key past
        it: reaching that key steps through every key deleted, but not yet compacted away,
        on the way. A log's newest entry is followed in key order by the next log's
        oldest, which truncation deleted by the thousand; an unbounded read of one entry
        there took 8.5 ms instead of 4 us (docs/performance.md@71edb5a, "Reads bounded")."""
        self._open()
        try:
            yield from bounded_items(self.db, lo, hi)
        except Exception:
            self._open()  # closed under the read: Stopping
            raise

    def keys(self, lo: bytes, hi: bytes | None) -> Iterator[bytes]:
        """Each key in [lo, hi), in order, bounded as `items` is."""
        self._open()
        try:
            for k in self.db.keys(from_key=lo, read_opt=below(hi)):
                assert isinstance(k, bytes)
                yield k
        except Exception:
            self._open()
            raise

    def batch(self) -> WriteBatch:
        """A new batch for `write`: every batch a store writes is made here, so that a
        backend of the disk port can see what it holds (the simulator's, to lose it at a
        power failure if it was not synced)."""
        return WriteBatch(raw_mode=True)

    def write(self, wb: WriteBatch, sync: bool = True) -> None:
        """Atomic; durable on return when `sync` (otherwise once `sync()` has run).
        Closed: Stopping (the caller serialises its writes with the close)."""
        self._open()
        self.db.write(wb, self._nosync)
        if sync:
            with self._sync_timer():
                self.db.flush_wal(True)

    def sync(self) -> None:
        """Every write made before this call is durable when it returns."""
        self._open()
        self.db.flush_wal(True)

    def get(self, key: bytes) -> bytes | None:
        """The value of `key`, or None."""
        self._open()
        try:
            v = self.db.get(key)
        except Exception:
            self._open()
            raise
        assert v is None or isinstance(v, bytes)
        return v

    def _open(self) -> None:
        """Stopping if the database has closed (a read that failed under the close ends so)."""
        if self.closed:
            raise Stopping()

    def close(self) -> None:
        """Close the database; a write after it is refused (Stopping). The caller makes sure
        no write is under way: rocksdict's close during one fails ('Already mutably
        borrowed')."""
        self.closed = True
        self.db.close()


class OpenDb(Protocol):
    """The disk port: opens the database at a path. `SyncedDb` itself on a real disk; the
    simulator's backend (tests/sim/disk.py) keeps what was written but not synced apart,
    to lose it, or a part of it, when the simulated machine loses power."""

    def __call__(self, path: str, bloom_bits_per_key: int = 0) -> SyncedDb: ...


def bounded_items(db: Rdict, lo: bytes, hi: bytes | None) -> Iterator[tuple[bytes, bytes]]:
    """(key, value) of each key of `db` in [lo, hi), the iterator bounded at `hi`
    (SyncedDb.items says why). A generator, holding `lo` and `hi` while it runs: rocksdict's
    iterator seeks on its first step with the bounds' bytes borrowed, and returned bare it
    read from freed keys (tests/test_rocks_store.py: every bounded read wrong then)."""
    for k, v in db.items(from_key=lo, read_opt=below(hi)):
        assert isinstance(k, bytes) and isinstance(v, bytes)
        yield k, v
