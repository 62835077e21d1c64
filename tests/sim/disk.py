"""The simulator's backend of the disk port (runtime/disk.py OpenDb): RocksDB in a temporary
directory, as on a real disk, but every batch written without a sync is remembered with
what it replaced, so that a power failure can take it back.

What a power failure loses: RocksDB writes each batch to its write-ahead log in order, and
a sync makes every write before it durable; a machine losing power keeps a prefix of the
writes since the last sync (perhaps all, perhaps none) and loses the rest. `power_loss`
keeps a prefix of a length the seed draws and undoes the others, newest first, then closes
the database as a crash does. A process crash alone (`close` without a power failure)
loses nothing the process wrote: the operating system still has it.

Only batches made by `SyncedDb.batch` are seen; a store writing around it (a direct `put`
on the database) is taken as durable, which can only hide a loss, never invent one.

A disk can also be slow for a while (`slow`): each sync then takes SLOW_SYNC_S, as on a
disk busy with another process's writes or a failing drive retrying."""

from __future__ import annotations

import random
from typing import Any

from rocksdict import WriteBatch

from runtime import world
from runtime.disk import SyncedDb

SLOW_SYNC_S = 0.3


class _Recorded:
    """A write batch that remembers which keys and ranges it touches."""

    def __init__(self) -> None:
        self.wb = WriteBatch(raw_mode=True)
        self.keys: list[bytes] = []
        self.ranges: list[tuple[bytes, bytes]] = []

    def put(self, key: bytes, value: bytes) -> None:
        self.wb.put(key, value)
        self.keys.append(key)

    def delete(self, key: bytes) -> None:
        self.wb.delete(key)
        self.keys.append(key)

    def delete_range(self, lo: bytes, hi: bytes) -> None:
        self.wb.delete_range(lo, hi)
        self.ranges.append((lo, hi))

    def is_empty(self) -> bool:
        return bool(self.wb.is_empty())


Undo = dict[bytes, bytes | None]  # key -> its value before a batch (None: absent)


class PowerLossDb(SyncedDb):
    def __init__(self, path: str, bloom_bits_per_key: int = 0,
                 slow_until: dict[str, float] | None = None) -> None:
        """`slow_until`: path -> until when (world.monotonic) each sync on it takes SLOW_SYNC_S
        (the disk's, Disk.slow)."""
        super().__init__(path, bloom_bits_per_key=bloom_bits_per_key)
        self.unsynced: list[Undo] = []  # one per batch written since the last sync, oldest first
        self.lost = 0  # batches lost in power failures
        self._path, self._slow_until = path, slow_until if slow_until is not None else {}

    def batch(self) -> Any:
        return _Recorded()

    # The machine is simulated, its power loss too: a sync is not made by the real disk
    # (RocksDB's write-ahead log is not synced: nothing here loses power for real), its
    # effect is what the database keeps when `power_loss` undoes what came after it.
    def write(self, wb: Any, sync: bool = True) -> None:
        if not isinstance(wb, _Recorded):
            super().write(wb, False)  # not seen: taken as durable
            if sync:
                self.unsynced.clear()
            return
        undo: Undo = {}
        for lo, hi in wb.ranges:
            for k, v in self.items(lo, hi):
                undo.setdefault(k, v)
        for k in wb.keys:
            if k not in undo:
                undo[k] = self.get(k)
        if sync:
            self._slow()
        super().write(wb.wb, False)
        if sync:
            self.unsynced.clear()
        else:
            self.unsynced.append(undo)

    def sync(self) -> None:
        self._slow()
        self._open()
        self.unsynced.clear()

    def _slow(self) -> None:
        if world.monotonic() < self._slow_until.get(self._path, 0.0):
            world.sleep(SLOW_SYNC_S)

    def power_loss(self, rng: random.Random) -> int:
        """Lose the power: keep a prefix of the unsynced batches (its length drawn by `rng`),
        undo the rest, close. Returns how many batches were lost."""
        keep = rng.randint(0, len(self.unsynced))
        lost = self.unsynced[keep:]
        for undo in reversed(lost):
            wb = WriteBatch(raw_mode=True)
            for k, v in undo.items():
                if v is None:
                    wb.delete(k)
                else:
                    wb.put(k, v)
            super().write(wb, False)
        self.unsynced.clear()
        self.lost += len(lost)
        self.close()
        return len(lost)


class Disk:
    """The databases a simulated machine opened, by path: `open` is the port's backend."""

    def __init__(self) -> None:
        self.dbs: dict[str, PowerLossDb] = {}
        self.slow_until: dict[str, float] = {}  # path -> until when its disk is slow

    def open(self, path: str, bloom_bits_per_key: int = 0) -> SyncedDb:
        db = self.dbs[path] = PowerLossDb(path, bloom_bits_per_key, self.slow_until)
        return db

    def slow(self, path: str, until: float) -> None:
        """The disk holding `path` is slow until `until` (world.monotonic): every sync waits."""
        self.slow_until[path] = until

    def power_loss(self, path: str, rng: random.Random) -> int:
        """The machine holding the database at `path` loses power (its process dies with it)."""
        return self.dbs.pop(path).power_loss(rng)
