"""Reading what a log has committed, and catching up: the committed end of a log as this
server knows it (its replica's last-add-confirmed, or its own writer's), committed entries
read from the local store with whatever this replica misses fetched from its peers, and a
loop that fills this replica's gaps (it was down, or missed messages) so that every
committed entry of a segment ends up on each of the segment's replicas, and on no other
server: with more log servers than an ensemble, each holds only its segments'
entries (a read of another segment is served from its replicas, and not kept)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from log import limits, reading
from log.driver import WriterDriver
from log.entry import Entry
from log.messages import ReadRange
from log.metadata import LogMetadata
from log.replica import ReplicaCore
from log.replica_link import NoAnswer, Refused, ReplicaLink
from log.rocks_store import RocksStore

log = logging.getLogger("midtown.log.catch_up")

CATCHUP_POLL_S = 1.0


class Unavailable(Exception):
    pass


def _asked_in_turn(replicas: tuple[int, ...], sealed: bool) -> tuple[int, ...]:
    """The order in which a read asks a segment's replicas for what this server misses: a
    sealed segment's writer (its first replica) last. Its log was taken over, most often
    because that writer went quiet, and every replica asked answers or times out
    (REPLICA_RPC_TIMEOUT_S, 2 s) before the next is asked: a storage node's read of a log
    just taken over from a paused machine waited out the old writer first (issue 68). A
    committed entry is on an ack quorum, so another replica has it whenever the old writer
    does not answer; an open segment's writer is asked first (it has every entry)."""
    return replicas[1:] + replicas[:1] if sealed else replicas


class CatchUp:
    def __init__(self, server_id: int, logs: int, store: RocksStore, replica: ReplicaCore,
                 rlock: threading.Lock, meta: dict[int, LogMetadata], writers: dict[int, WriterDriver],
                 peer: Callable[[int], ReplicaLink | None], stop: threading.Event) -> None:
        """`meta`, `writers`: the server's, shared with it; `rlock`: the lock over its
        replica side (a fill is a replica operation)."""
        self.server_id = server_id
        self.logs = logs
        self.store = store
        self.replica = replica
        self.rlock = rlock
        self.meta = meta
        self.writers = writers
        self.peer = peer  # the link to a peer's replica (log/replica_link.py)
        self.stop_event = stop
        self.filled: dict[int, int] = {}  # log -> every position up to here is on this replica

    def committed_end(self, log_id: int) -> int:
        meta = self.meta.get(log_id)
        if meta is None:
            return limits.FIRST_POSITION - 1
        seg = meta.last_segment
        lac = -1
        if seg is not None and not seg.sealed:
            lac = self.replica.lac(log_id, seg.epoch)
            d = self.writers.get(log_id)
            if d is not None and d.core.epoch == seg.epoch:
                lac = max(lac, d.core.lac)
        return reading.committed_end(meta, lac)

    def read_committed(self, log_id: int, lo: int, hi: int) -> list[Entry]:
        """Committed entries [lo, hi] (the caller checked hi <= committed end), from the
        local store, fetching from peers whatever this replica is missing."""
        meta = self.meta[log_id]
        out: list[Entry] = []
        p = lo
        while p <= hi:
            seg = meta.segment_of(p)
            if seg is None:
                raise Unavailable(f"position {p} is in no segment of log {log_id}")
            seg_hi = hi if seg.end is None else min(hi, seg.end)
            got = self.store.range(log_id, seg.epoch, p, seg_hi)
            if len(got) != seg_hi - p + 1:
                have = {e.position for e in got}
                missing = [q for q in range(p, seg_hi + 1) if q not in have]
                got += self._fetch(log_id, seg.epoch, missing, _asked_in_turn(seg.replicas, seg.sealed),
                                   keep=self.server_id in seg.replicas)
                got.sort(key=lambda e: e.position)
                if len(got) != seg_hi - p + 1:
                    raise Unavailable(
                        f"log {log_id}: no live replica holds positions {missing[0]}..{missing[-1]}"
                    )
            out += got
            p = seg_hi + 1
        return out

    def _fetch(self, log_id: int, seg_epoch: int, missing: list[int],
               replicas: tuple[int, ...], keep: bool) -> list[Entry]:
        found: dict[int, Entry] = {}
        for r in replicas:
            if r == self.server_id or len(found) == len(missing):
                continue
            link = self.peer(r)
            if link is None:
                continue
            want = [q for q in missing if q not in found]
            try:
                rep = link.call(ReadRange(log_id, 0, seg_epoch, want[0], want[-1]),
                                limits.REPLICA_RPC_TIMEOUT_S)
            except (NoAnswer, Refused):
                continue
            for e in rep.entries:
                if e.position in want:
                    found[e.position] = e
        if found and keep:
            with self.rlock:
                self.replica.fill(log_id, list(found.values()))
        return list(found.values())

    def loop(self) -> None:
        """Fill this replica's gaps (it was down, or missed messages) from its peers, so
        every committed entry of this server's segments ends up here; the segments of
        other ensembles are stepped over."""
        while not self.stop_event.wait(CATCHUP_POLL_S):
            for log_id in range(self.logs):
                try:
                    self._fill_log(log_id)
                except Exception as e:
                    log.debug("catch-up of log %d: %s", log_id, e)

    def _fill_log(self, log_id: int) -> None:
        end = self.committed_end(log_id)
        lo = max(self.filled[log_id] + 1, self.replica.first(log_id))
        meta = self.meta.get(log_id)
        while lo <= end and meta is not None and not self.stop_event.is_set():
            seg = meta.segment_of(lo)
            hi = min(end, lo + limits.MESSAGE_ENTRIES_MAX - 1)
            if seg is not None and seg.end is not None:
                hi = min(hi, seg.end)
            if seg is None or self.server_id in seg.replicas:
                self.read_committed(log_id, lo, hi)
            self.filled[log_id] = hi
            lo = hi + 1
