"""The replica store on disk: one rocksdict database per log server.

Keys (big-endian, so byte order is numeric order):
  b"E" + log_id:4 + segment_epoch:8 + position:8  -> timestamp_ms:8 + payload
  b"M" + log_id:4                                   -> JSON replica metadata
  b"I"                                               -> the store's identity (log/store_identity.py)
Each commit is one WriteBatch made durable before it returns (SyncedDb): an acknowledged
entry or fence survives an OS crash (rocksdict does not sync by default, see PITFALLS.md).
The replication path groups many logs' commits into one batch and one sync (Node.local_batch)."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rocksdict import WriteBatch

from log.entry import Entry
from log.metrics import FSYNC
from log.store import Batch, ReplicaLogMeta, SegmentMeta
from runtime.disk import SyncedDb

_E = struct.Struct(">cIQQ")
_M = struct.Struct(">cI")
_TS = struct.Struct(">Q")


def _ekey(log_id: int, seg: int, pos: int) -> bytes:
    return _E.pack(b"E", log_id, seg, pos)


def _open(path: str) -> SyncedDb:
    return SyncedDb(path, sync_timer=FSYNC.time)


class RocksStore:
    def __init__(self, path: str, open_db: Callable[[str], SyncedDb] = _open) -> None:
        """`open_db`: the disk port (runtime/disk.py OpenDb; the simulator's loses what was
        not synced when its machine loses power: tests/sim/disk.py)."""
        self.synced = open_db(path)
        self.db = self.synced.db
        self._group: WriteBatch | None = None

    @contextmanager
    def group(self) -> Iterator[None]:
        """Commits inside the block go into one write batch, synced once at the end: the
        caller must not reply to anyone before the block has exited."""
        assert self._group is None, "groups do not nest"
        self._group = self.synced.batch()
        try:
            yield
            wb, self._group = self._group, None
            if not wb.is_empty():
                self._write(wb)
        finally:
            self._group = None

    def close(self) -> None:
        self.synced.close()

    def commit(self, batch: Batch) -> None:
        wb = self._group if self._group is not None else self.synced.batch()
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
            self._write(wb)

    def _write(self, wb: WriteBatch) -> None:
        """Every commit's write: durable when it returns (a sync after the batch)."""
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

    def identity(self) -> str | None:
        v = self.synced.get(b"I")
        return None if v is None else v.decode()

    def set_identity(self, identity: str) -> None:
        wb = self.synced.batch()
        wb.put(b"I", identity.encode())
        self.synced.write(wb)

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
