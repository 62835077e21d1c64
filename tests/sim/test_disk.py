"""The simulator's disk (tests/sim/disk.py): a power failure keeps what was synced and a
prefix of what was written after, a process crash keeps everything, and a storage node's
store built on it (storage_node/store.py through the disk port) restarts at a position it
had made durable."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from runtime.disk import SyncedDb
from tests.sim.disk import Disk


def _contents(path: Path) -> dict[bytes, bytes]:
    db = SyncedDb(str(path))
    try:
        return dict(db.items(b"", None))
    finally:
        db.close()


def _write(db: SyncedDb, i: int, sync: bool) -> None:
    wb = db.batch()
    wb.put(b"k%d" % i, b"v%d" % i)
    wb.put(b"last", b"%d" % i)
    if i % 3 == 0:
        wb.delete(b"k%d" % (i - 1))
    if i % 4 == 0:
        wb.delete_range(b"k1", b"k2")  # k1, k10..k19
    db.write(wb, sync=sync)


def test_a_power_loss_keeps_the_synced_writes_and_a_prefix_of_the_others(tmp_path: Path) -> None:
    kept = set()
    for seed in range(12):
        path = tmp_path / f"db{seed}"
        disk = Disk()
        db = disk.open(str(path))
        states = []
        for i in range(1, 16):
            _write(db, i, sync=i == 6)
            states.append(dict(db.items(b"", None)))
        lost = disk.power_loss(str(path), random.Random(seed))
        after = _contents(path)
        # The state after some write from the sync on (the 6th): a prefix of the unsynced
        # writes survived, in order, and nothing of a write after it.
        assert after in states[5:], f"seed {seed}: {after}"
        assert after == states[14 - lost]
        kept.add(lost)
    assert len(kept) > 3, kept  # the seeds draw different losses, none and all among them


def test_a_process_crash_loses_nothing_written(tmp_path: Path) -> None:
    disk = Disk()
    db = disk.open(str(tmp_path / "db"))
    for i in range(1, 9):
        _write(db, i, sync=False)
    want = dict(db.items(b"", None))
    db.close()
    assert _contents(tmp_path / "db") == want


def test_a_sync_makes_every_earlier_write_durable(tmp_path: Path) -> None:
    disk = Disk()
    db = disk.open(str(tmp_path / "db"))
    for i in range(1, 9):
        _write(db, i, sync=False)
    db.sync()
    want = dict(db.items(b"", None))
    assert disk.power_loss(str(tmp_path / "db"), random.Random(1)) == 0
    assert _contents(tmp_path / "db") == want


def test_a_slow_disk_makes_each_sync_wait_until_it_recovers(tmp_path: Path) -> None:
    """A disk made slow (the whole simulation's slow disks) makes every synced write and
    every sync wait SLOW_SYNC_S on the simulated clock until it recovers, also for a
    database opened on it again; unsynced writes do not wait."""
    from runtime import world
    from tests.sim.disk import SLOW_SYNC_S
    from tests.sim.scheduler import Scheduler

    def main() -> list[float]:
        disk = Disk()
        path = str(tmp_path / "db")
        db = disk.open(path)
        disk.slow(path, 1.0)
        took = []
        for step in (lambda: _write(db, 1, True), db.sync, lambda: _write(db, 2, False)):
            t0 = world.monotonic()
            step()
            took.append(world.monotonic() - t0)
        db.close()
        db = disk.open(path)  # restarted on the same disk: still slow
        t0 = world.monotonic()
        db.sync()
        took.append(world.monotonic() - t0)
        world.sleep(1.0)  # recovered
        t0 = world.monotonic()
        db.sync()
        took.append(world.monotonic() - t0)
        db.close()
        return took

    assert Scheduler(1).run(main) == pytest.approx([SLOW_SYNC_S, SLOW_SYNC_S, 0.0, SLOW_SYNC_S, 0.0])
