"""What a replica needs from its disk, as a protocol, and an in-memory implementation for
the simulation. The real one is log/rocks_store.py (rocksdict, synced write batches)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Protocol

from log.entry import Entry


@dataclass
class SegmentMeta:
    last: int = -1  # highest position stored
    lac: int = -1  # last add confirmed, as told by the writer


@dataclass
class ReplicaLogMeta:
    fenced_epoch: int = 0
    first: int = 0  # truncation point: entries below it are gone
    first_ts: int = 0  # highest timestamp among the entries truncated away
    segments: dict[int, SegmentMeta] = field(default_factory=dict)

    def copy(self) -> ReplicaLogMeta:
        return ReplicaLogMeta(
            self.fenced_epoch,
            self.first,
            self.first_ts,
            {k: SegmentMeta(v.last, v.lac) for k, v in self.segments.items()},
        )


@dataclass
class Batch:
    """One atomic, durable write: entries and the log's replica metadata together."""

    log_id: int
    entries: list[Entry] = field(default_factory=list)
    meta: ReplicaLogMeta | None = None
    delete_below: int | None = None  # truncation


class EntryStore(Protocol):
    def commit(self, batch: Batch) -> None:
        """Apply the batch atomically and durably (synced) before returning."""

    def get(self, log_id: int, segment_epoch: int, position: int) -> Entry | None: ...

    def range(self, log_id: int, segment_epoch: int, first: int, last: int) -> list[Entry]:
        """Entries held in [first, last], in position order."""

    def load(self) -> dict[int, ReplicaLogMeta]:
        """Every log's metadata, after a restart."""

    def identity(self) -> str | None:
        """The store's identity (log/store_identity.py; None: never given one)."""

    def set_identity(self, identity: str) -> None:
        """Give the store its identity, durably."""


class MemStore:
    """Durable-by-assumption memory store for the simulation: a commit either happens
    wholly (and survives crashes) or, if the simulated process dies first, not at all."""

    def __init__(self) -> None:
        self.entries: dict[tuple[int, int, int], Entry] = {}
        self.metas: dict[int, ReplicaLogMeta] = {}
        self._identity: str | None = None

    def identity(self) -> str | None:
        return self._identity

    def set_identity(self, identity: str) -> None:
        self._identity = identity

    @contextmanager
    def group(self) -> Iterator[None]:
        """Commits inside the block (log/rocks_store.py groups them into one synced write;
        here each is whole at once)."""
        yield

    def close(self) -> None:
        pass

    def commit(self, batch: Batch) -> None:
        for e in batch.entries:
            self.entries[(batch.log_id, e.epoch, e.position)] = e
        if batch.delete_below is not None:
            for k in [k for k in self.entries if k[0] == batch.log_id and k[2] < batch.delete_below]:
                del self.entries[k]
        if batch.meta is not None:
            self.metas[batch.log_id] = batch.meta.copy()

    def get(self, log_id: int, segment_epoch: int, position: int) -> Entry | None:
        return self.entries.get((log_id, segment_epoch, position))

    def range(self, log_id: int, segment_epoch: int, first: int, last: int) -> list[Entry]:
        out = [
            e
            for (lg, ep, pos), e in self.entries.items()
            if lg == log_id and ep == segment_epoch and first <= pos <= last
        ]
        return sorted(out, key=lambda e: e.position)

    def load(self) -> dict[int, ReplicaLogMeta]:
        return {k: v.copy() for k, v in self.metas.items()}
