"""A log server's replica side, for all the logs it holds: fencing, storing entries,
answering recovery reads. The store is injected (rocksdict in the server, memory in the
simulation); every reply is built only after the store has made its batch durable."""

from __future__ import annotations

from collections.abc import Callable

from log import fencing, limits
from log.lease import Promise
from log.messages import (
    AddEntries,
    AddReply,
    Fence,
    FenceReply,
    ReadRange,
    ReadRangeReply,
    Result,
)
from log.store import Batch, EntryStore, ReplicaLogMeta, SegmentMeta


class ReplicaCore:
    def __init__(self, server_id: int, store: EntryStore, log_count: int,
                 clock: Callable[[], float] | None = None, lease_s: float = 0.0) -> None:
        """`clock` (log/lease.py's; none: a clock that stands still) times the read-lease
        promises this replica gives; `lease_s` is the lease it assumes it promised before it
        started."""
        self.server_id = server_id
        self.store = store
        self.log_count = log_count
        self.logs: dict[int, ReplicaLogMeta] = store.load()
        self.clock = clock or (lambda: 0.0)
        self.promise = Promise(self.clock(), lease_s)

    def _admit(self, log_id: int, epoch: int) -> tuple[ReplicaLogMeta, fencing.Admission, bool]:
        meta = self.logs.setdefault(log_id, ReplicaLogMeta())
        adm = self._fence_rule(epoch, meta.fenced_epoch)
        raised = adm.admitted and adm.fenced_epoch > meta.fenced_epoch
        return meta, adm, raised

    def _admit_and_persist(self, log_id: int, epoch: int) -> tuple[ReplicaLogMeta, fencing.Admission]:
        """Admit, and make a raised fence durable before the caller replies."""
        meta, adm, raised = self._admit(log_id, epoch)
        if raised:
            new = meta.copy()
            new.fenced_epoch = adm.fenced_epoch
            self.store.commit(Batch(log_id, meta=new))
            self.logs[log_id] = meta = new
        return meta, adm

    # The simulation's broken variant overrides this to prove the checker catches it.
    def _fence_rule(self, epoch: int, fenced_epoch: int) -> fencing.Admission:
        return fencing.admit(epoch, fenced_epoch)

    def known(self, log_id: int) -> bool:
        return 0 <= log_id < self.log_count

    def on_request(self, req: Fence | AddEntries | ReadRange) -> FenceReply | AddReply | ReadRangeReply:
        """A writer's request, whichever it is, answered."""
        if isinstance(req, Fence):
            return self.on_fence(req)
        if isinstance(req, AddEntries):
            return self.on_add(req)
        return self.on_read_range(req)

    def on_fence(self, req: Fence) -> FenceReply:
        if not self.known(req.log_id):
            return FenceReply(Result.UNKNOWN_LOG, 0)
        meta, adm = self._admit_and_persist(req.log_id, req.epoch)
        if not adm.admitted:
            return FenceReply(Result.FENCED, meta.fenced_epoch)
        seg = meta.segments.get(req.segment_epoch, SegmentMeta())
        return FenceReply(
            Result.OK, meta.fenced_epoch, lac=seg.lac, last=seg.last,
            first=meta.first, first_ts=meta.first_ts,
            lease_wait_ms=self.promise.wait_ms(req.log_id, self.clock()),
        )

    def on_add(self, req: AddEntries) -> AddReply:
        if not self.known(req.log_id):
            return AddReply(Result.UNKNOWN_LOG, 0)
        meta, adm, raised = self._admit(req.log_id, req.epoch)
        if not adm.admitted:
            return AddReply(Result.FENCED, meta.fenced_epoch)
        new = meta.copy()
        new.fenced_epoch = adm.fenced_epoch
        seg = new.segments.setdefault(req.segment_epoch, SegmentMeta())
        fresh = []
        for e in req.entries:
            if e.position < new.first:
                new.first_ts = max(new.first_ts, e.timestamp_ms)
                continue  # truncated already: keep only its timestamp
            # Within a segment a position has one possible content: keep the first copy.
            if e.position <= seg.last and self.store.get(req.log_id, e.epoch, e.position):
                continue
            fresh.append(e)
            seg.last = max(seg.last, e.position)
        seg.lac = max(seg.lac, req.lac)
        if fresh or raised:
            self.store.commit(Batch(req.log_id, entries=fresh, meta=new))
        self.logs[req.log_id] = new  # a LAC alone is persisted with the next batch
        if req.lease_ms:
            self.promise.acked(req.log_id, self.clock(), req.lease_ms)
        return AddReply(Result.OK, new.fenced_epoch)

    def on_read_range(self, req: ReadRange) -> ReadRangeReply:
        if not self.known(req.log_id):
            return ReadRangeReply(Result.UNKNOWN_LOG, 0)
        meta = self.logs.setdefault(req.log_id, ReplicaLogMeta())
        if req.epoch:
            meta, adm = self._admit_and_persist(req.log_id, req.epoch)
            if not adm.admitted:
                return ReadRangeReply(Result.FENCED, meta.fenced_epoch)
        last = min(req.last, req.first + limits.MESSAGE_ENTRIES_MAX - 1)
        entries = self.store.range(req.log_id, req.segment_epoch, req.first, last)
        return ReadRangeReply(Result.OK, meta.fenced_epoch, tuple(entries), answered_last=last,
                              trunc_first=meta.first, trunc_ts=meta.first_ts)

    def truncate(self, log_id: int, before: int) -> None:
        """Drop every entry below `before` (the caller checked it is committed)."""
        meta = self.logs.setdefault(log_id, ReplicaLogMeta())
        if before <= meta.first:
            return
        new = meta.copy()
        new.first = before
        for seg_epoch in new.segments:
            for e in self.store.range(log_id, seg_epoch, max(meta.first, before - 1), before - 1):
                new.first_ts = max(new.first_ts, e.timestamp_ms)
        self.store.commit(Batch(log_id, meta=new, delete_below=before))
        self.logs[log_id] = new

    def tail(self, log_id: int) -> int:
        """The highest position stored for the log, in any segment, committed or not."""
        meta = self.logs.get(log_id)
        if meta is None or not meta.segments:
            return -1
        return max(s.last for s in meta.segments.values())

    def segment_last(self, log_id: int, segment_epoch: int) -> int:
        """The highest position stored for the log in one segment (-1: none)."""
        meta = self.logs.get(log_id)
        return -1 if meta is None else meta.segments.get(segment_epoch, SegmentMeta()).last

    def lac(self, log_id: int, segment_epoch: int) -> int:
        meta = self.logs.get(log_id)
        if meta is None:
            return -1
        return meta.segments.get(segment_epoch, SegmentMeta()).lac

    def first(self, log_id: int) -> int:
        meta = self.logs.get(log_id)
        return meta.first if meta else 0

    def fenced_epoch(self, log_id: int) -> int:
        meta = self.logs.get(log_id)
        return meta.fenced_epoch if meta else 0

    def fill(self, log_id: int, entries: list) -> None:  # type: ignore[type-arg]
        """Store committed entries copied from a peer (catch-up, read-through). Committed
        entries are decided, so no fencing applies; within a segment a position has one
        possible content, so a copy never conflicts with what is held."""
        meta = self.logs.setdefault(log_id, ReplicaLogMeta())
        new = meta.copy()
        fresh = []
        for e in entries:
            if e.position < new.first:
                continue
            seg = new.segments.setdefault(e.epoch, SegmentMeta())
            seg.last = max(seg.last, e.position)
            fresh.append(e)
        if fresh:
            self.store.commit(Batch(log_id, entries=fresh, meta=new))
            self.logs[log_id] = new
