"""The replica store on disk: one rocksdict database per log server.

Keys (big-endian, so byte order is numeric order):
  b"E" + log_id:4 + segment_epoch:8 + position:8  -> timestamp_ms:8 + payload
  b"M" + log_id:4                                   -> JSON replica metadata
Each commit is one WriteBatch made durable before it returns (SyncedDb): an acknowledged
entry or fence survives an OS crash (rocksdict does not sync by default, see PITFALLS.md).
The replication path groups many logs' commits into one batch and one sync (Node.local_batch)."""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from contextlib import contextmanager

import grpc
from rocksdict import BlockBasedOptions, Options, Rdict, ReadOptions, WriteBatch, WriteOptions

from log.entry import Entry
from log.metrics import FSYNC
from log.store import Batch, ReplicaLogMeta, SegmentMeta
from runtime.refusals import Refusal

_E = struct.Struct(">cIQQ")
_M = struct.Struct(">cI")
_TS = struct.Struct(">Q")


def _ekey(log_id: int, seg: int, pos: int) -> bytes:
    return _E.pack(b"E", log_id, seg, pos)


def _below(hi: bytes | None) -> ReadOptions:
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

    def __init__(self, path: str, bloom_bits_per_key: int = 0) -> None:
        """`bloom_bits_per_key`: a Bloom filter per table file (and for the memtable), so
        that looking up a key that is absent (most event ids are new) reads no block of a
        file that cannot hold it; 0: none."""
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
        self.closed = False

    def items(self, lo: bytes, hi: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        """(key, value) of each key in [lo, hi), in order (hi None: to the last key).

        The iterator is bounded at `hi`, not stopped by the caller at the first key past
        it: reaching that key steps through every key deleted, but not yet compacted away,
        on the way. A log's newest entry is followed in key order by the next log's
        oldest, which truncation deleted by the thousand; an unbounded read of one entry
        there took 8.5 ms instead of 4 us (docs/performance.md, "Reads bounded")."""
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
            for k in self.db.keys(from_key=lo, read_opt=_below(hi)):
                assert isinstance(k, bytes)
                yield k
        except Exception:
            self._open()
            raise

    def write(self, wb: WriteBatch, sync: bool = True) -> None:
        """Atomic; durable on return when `sync` (otherwise once `sync()` has run).
        Closed: Stopping (the caller serialises its writes with the close)."""
        self._open()
        self.db.write(wb, self._nosync)
        if sync:
            with FSYNC.time():
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


def bounded_items(db: Rdict, lo: bytes, hi: bytes | None) -> Iterator[tuple[bytes, bytes]]:
    """(key, value) of each key of `db` in [lo, hi), the iterator bounded at `hi`
    (SyncedDb.items says why)."""
    for k, v in db.items(from_key=lo, read_opt=_below(hi)):
        assert isinstance(k, bytes) and isinstance(v, bytes)
        yield k, v


class RocksStore:
    def __init__(self, path: str) -> None:
        self.synced = SyncedDb(path)
        self.db = self.synced.db
        self._group: WriteBatch | None = None

    @contextmanager
    def group(self) -> Iterator[None]:
        """Commits inside the block go into one write batch, synced once at the end: the
        caller must not reply to anyone before the block has exited."""
        assert self._group is None, "groups do not nest"
        self._group = WriteBatch(raw_mode=True)
        try:
            yield
            wb, self._group = self._group, None
            if not wb.is_empty():
                self.synced.write(wb)
        finally:
            self._group = None

    def close(self) -> None:
        self.synced.close()

    def commit(self, batch: Batch) -> None:
        wb = self._group if self._group is not None else WriteBatch(raw_mode=True)
        if batch.delete_below is not None:
            # Entries are keyed by segment first: delete every segment's prefix below.
            meta = batch.meta
            segs = list(meta.segments) if meta else []
            for seg in segs:
                wb.delete_range(_ekey(batch.log_id, seg, 0), _ekey(batch.log_id, seg, batch.delete_below))
        for e in batch.entries:
            wb.put(_ekey(batch.log_id, e.epoch, e.position), _TS.pack(e.timestamp_ms) + e.payload)
        if batch.meta is not None:
            m = batch.meta
            wb.put(
                _M.pack(b"M", batch.log_id),
                json.dumps(
                    {
                        "fenced_epoch": m.fenced_epoch,
                        "first": m.first,
                        "first_ts": m.first_ts,
                        "segments": {str(k): [v.last, v.lac] for k, v in m.segments.items()},
                    }
                ).encode(),
            )
        if self._group is None:
            self.synced.write(wb)

    def get(self, log_id: int, segment_epoch: int, position: int) -> Entry | None:
        v = self.synced.get(_ekey(log_id, segment_epoch, position))
        if v is None:
            return None
        return Entry(position, segment_epoch, _TS.unpack_from(v)[0], bytes(v[8:]))

    def range(self, log_id: int, segment_epoch: int, first: int, last: int) -> list[Entry]:
        out: list[Entry] = []
        if last < first:
            return out
        for k, v in self.synced.items(_ekey(log_id, segment_epoch, first),
                                      _ekey(log_id, segment_epoch, last + 1)):
            _, _lg, seg, pos = _E.unpack(k)
            out.append(Entry(pos, seg, _TS.unpack_from(v)[0], bytes(v[8:])))
        return out

    def load(self) -> dict[int, ReplicaLogMeta]:
        out: dict[int, ReplicaLogMeta] = {}
        for k, v in self.synced.items(b"M", b"N"):
            _, log_id = _M.unpack(k)
            d = json.loads(v)
            out[log_id] = ReplicaLogMeta(
                fenced_epoch=d["fenced_epoch"],
                first=d["first"],
                first_ts=d["first_ts"],
                segments={int(s): SegmentMeta(a, b) for s, (a, b) in d["segments"].items()},
            )
        return out
