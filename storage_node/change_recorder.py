"""How the apply loop records a batch's changes (storage_node/changes.py says what a
change is and when a value expires): a log's values that expire as its time moves
through the batch's entries, then each record's writes, each at its place in its
shard's order, into the batch's view (storage_node/store.py BatchView)."""

from __future__ import annotations

import heapq
from collections.abc import Callable

from record.model import Record, Stored
from storage_node import changes, keys
from storage_node.apply import Applied
from storage_node.store import BatchView


class ChangeRecorder:
    """A log's changes through one batch of its entries (storage_node/changes.py): the
    values that expire as the log's time moves, then each record's writes. Call `entry`
    before each entry (time marks too), and `add` in place of `view.add` after a record is
    applied. `shard_position(shard, position)`: where a change of that shard at that
    position of the log stands in the shard's order (None: this node does not apply the
    shard's records there)."""

    def __init__(self, view: BatchView, log_id: int, after_ts_ms: int, upto_ts_ms: int,
                 shard_position: Callable[[int, int], int | None]) -> None:
        self.view = view
        self.clock = _ExpiryClock(view, log_id, after_ts_ms, upto_ts_ms)
        self.shard_position = shard_position

    def entry(self, position: int, ts_ms: int) -> None:
        for key, expired in self.clock.due(ts_ms):
            at = self.shard_position(keys.shard_of_key(key), position)
            if at is not None:
                _record_expiry(self.view, key, expired, at, ts_ms)

    def add(self, rec: Record, applied: Applied, position: int, ts_ms: int, log_id: int) -> None:
        """Record the changes of a record `apply` returned `applied` for, and add it to the
        view (`position`: the record's in its shard's order)."""
        if applied.writes:  # before view.add: view.get still holds what the keys held before
            n = len(keys.dataset_shard_prefix(rec.shard, rec.dataset))
            self.view.record_changes(rec.shard, rec.dataset,
                                     changes.of_writes(applied.writes, self.view.get, position, ts_ms, n))
        self.view.add(applied, rec.shard, ts_ms, log_id)
        self.clock.written(applied.writes)


class _ExpiryClock:
    """Which values of a log's shards expire as the log's time moves through a batch's
    entries: the expiry index as stored, plus what the batch writes with a TTL that runs
    out within it (storage_node/changes.py says when a value expires)."""

    def __init__(self, view: BatchView, log_id: int, after_ts_ms: int, upto_ts_ms: int) -> None:
        self.view = view
        self.upto = upto_ts_ms
        self.last = after_ts_ms
        self.heap = view.expiring_between(log_id, after_ts_ms, upto_ts_ms) if upto_ts_ms > after_ts_ms else []

    def due(self, ts_ms: int) -> list[tuple[bytes, Stored]]:
        """(value key, the value) of each value that expires at an entry of log time
        `ts_ms`, the entry after the last one asked about, in key order."""
        out: list[tuple[bytes, Stored]] = []
        if ts_ms <= self.last:
            return out
        while self.heap and self.heap[0][0] <= ts_ms:
            exp, key = heapq.heappop(self.heap)
            cur = self.view.get(key)
            if changes.expires_now(cur, exp, self.last, ts_ms):
                assert cur is not None
                out.append((key, cur))
        self.last = ts_ms
        return sorted(set(out))

    def written(self, writes: dict[bytes, Stored | None]) -> None:
        for k, v in writes.items():
            if v is not None and self.last < v.expires_at_ms <= self.upto:
                heapq.heappush(self.heap, (v.expires_at_ms, k))


def _record_expiry(view: BatchView, key: bytes, v: Stored, position: int, ts_ms: int) -> None:
    dataset = keys.dataset_of(key)
    shard = keys.shard_of_key(key)
    pkey, lkey = keys.split_value_key(key, len(keys.dataset_shard_prefix(shard, dataset)))
    view.record_changes(shard, dataset, [changes.Change(changes.Kind.EXPIRE, pkey, lkey, b"", v.version,
                                                        v.expires_at_ms, position, ts_ms)])
