"""The simulator's storage: a storage node's state in memory, which the real apply step
(storage_node/apply.py) reads and whose effects it keeps, as the node's RocksDB store does
(storage_node/store.py). The unit tests of the apply step use it too."""

from __future__ import annotations

from typing import NamedTuple

from record.model import Record, RecordResult, Stored
from storage_node import keys
from storage_node.apply import Event, apply


class MemState:
    """A storage node's state in memory, as the apply step (storage_node/apply.py State)
    reads it: values, request ids seen, event ids and each shard's digest."""

    def __init__(self) -> None:
        self.values: dict[bytes, Stored] = {}
        self.dedups: dict[tuple[int, bytes], tuple[int, RecordResult]] = {}
        self.digests: dict[int, int] = {}
        self.events: dict[tuple[int, str, bytes], Event] = {}

    def held_events(self, shard: int, dataset: str, event_ids: list[bytes]) -> dict[bytes, Event]:
        return {e: self.events[(shard, dataset, e)] for e in event_ids if (shard, dataset, e) in self.events}

    def event_count(self, shard: int, dataset: str) -> int:
        return sum(1 for (s, d, _) in self.events if (s, d) == (shard, dataset))

    def oldest_events(self, shard: int, dataset: str, n: int,
                      older_than: int | None = None) -> list[tuple[int, int, bytes, int]]:
        mine = sorted((e.position, e.seq, k[2], e.ts_ms) for k, e in self.events.items()
                      if k[:2] == (shard, dataset))
        return mine[:n]

    def get(self, key: bytes) -> Stored | None:
        return self.values.get(key)

    def scan(self, prefix: bytes, start: bytes, end: bytes, limit: int) -> list[tuple[bytes, Stored]]:
        rows = sorted((k[len(prefix):], v) for k, v in self.values.items() if k.startswith(prefix))
        return [(k, v) for k, v in rows if k >= start and (not end or k < end)][:limit]

    def dedup(self, shard: int, rid: bytes) -> tuple[int, RecordResult] | None:
        return self.dedups.get((shard, rid))

    def digest(self, shard: int) -> int:
        return self.digests.get(shard, 0)

    def run(self, rec: Record, pos: int, ts: int, log_id: int = 0, node_id: int = 1) -> RecordResult:
        """Apply `rec` at log position `pos` and log time `ts` through the storage node's
        apply step, and keep its effects."""
        a = apply(self, rec, log_id, pos, ts, node_id=node_id)
        for k, v in a.writes.items():
            if v is None:
                self.values.pop(k, None)
            else:
                self.values[k] = v
        self.digests[rec.shard] = a.digest
        for eid, _, _ in a.events_gone:
            del self.events[(rec.shard, rec.dataset, eid)]
        for eid, e in a.events.items():
            self.events[(rec.shard, rec.dataset, eid)] = e
        if a.event_count >= 0:
            assert a.event_count == self.event_count(rec.shard, rec.dataset)
        if a.dedup and a.result is not None:
            self.dedups[(rec.shard, rec.request_id)] = (ts, a.result)
        assert a.result is not None
        return a.result

    def shard_copy(self, shard: int, dataset: str) -> ShardCopy:
        """What a shard copy carries of `shard` (storage_node/shard_copy.py): its values, its
        digest and the request ids it has seen."""
        prefix = keys.dataset_shard_prefix(shard, dataset)
        return ShardCopy({k: v for k, v in self.values.items() if k.startswith(prefix)}, self.digest(shard),
                         {k: v for k, v in self.dedups.items() if k[0] == shard})

    def install(self, shard: int, dataset: str, copy: ShardCopy) -> None:
        """Replace `shard` by a copy."""
        self.drop(shard, dataset)
        self.values.update(copy.values)
        self.digests[shard] = copy.digest
        self.dedups.update(copy.dedups)

    def drop(self, shard: int, dataset: str) -> None:
        prefix = keys.dataset_shard_prefix(shard, dataset)
        for k in [k for k in self.values if k.startswith(prefix)]:
            del self.values[k]
        self.digests.pop(shard, None)
        for k in [k for k in self.dedups if k[0] == shard]:
            del self.dedups[k]


class ShardCopy(NamedTuple):
    values: dict[bytes, Stored]
    digest: int
    dedups: dict[tuple[int, bytes], tuple[int, RecordResult]] = {}
