"""Read views: this node's state at one moment, held open so that a shard scan can page
through it, stream after stream, and see the same state on every page.

A view is a RocksDB checkpoint (hard links to the files, storage_node/reads.py takes it
while no batch commits) opened on its own; every log's applied position and log time are
in it, written with the effects. rocksdict's snapshot iterators do not isolate from later
writes (tried), so a checkpoint is what holds a position.

The rules (pure, given `now`):
* A scan that starts shares the newest view if it is younger than SHARE_S and stands at or
  after the position the scan needs (one checkpoint serves the shards a Spark job opens at
  once); otherwise it opens a new one.
* A view closes VIEW_IDLE_S after its last page, and its files go (a cursor naming it then
  gets `ViewGone`, which says to start the scan again).
* At most VIEWS_MAX are open: to make room, the least recently used view no stream reads
  closes; when every one is being read, the scan is refused (`TooManyViews`).

A view keeps the files it links from being deleted by compaction: the disk it holds is at
most what the node held when it was taken, for as long as it lives."""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field

from rocksdict import Options, Rdict

from runtime import world
from storage_node import keys

SHARE_S = 1.0
VIEW_IDLE_S = 300.0  # long enough for a Spark job's tasks to reach the splits its plan opened
VIEWS_MAX = 32
VIEW_REAP_S = 5.0  # how often a node closes its idle views
PREFIX = "view-"  # the views' directories under the node's data directory


class ViewGone(Exception):
    """The view a cursor names is closed (idle too long, or the node restarted)."""


class TooManyViews(Exception):
    """VIEWS_MAX views are open and every one is being read."""


@dataclass
class View:
    id: bytes
    path: str
    db: Rdict
    created: float
    used: float
    readers: int = 0
    positions: dict[int, tuple[int, int]] = field(default_factory=dict)  # log -> (position, log time)

    def position(self, log_id: int) -> tuple[int, int]:
        """(the position `log_id` is applied up to in this view, the log time there)."""
        if log_id not in self.positions:
            saved = self.db.get(keys.position_key(log_id))
            pos, ts = keys.decode_u64(saved, 2) if saved is not None else (0, 0)
            self.positions[log_id] = (pos, ts)
        return self.positions[log_id]


def shareable(views: list[View], log_id: int, min_position: int, now: float) -> View | None:
    """The newest view younger than SHARE_S at or after `min_position` on `log_id` (pure)."""
    for v in sorted(views, key=lambda v: -v.created):
        if now - v.created <= SHARE_S and v.position(log_id)[0] >= min_position:
            return v
    return None


def to_close(views: list[View], now: float, room_for: int = 0) -> list[View]:
    """The views to close: the idle ones past VIEW_IDLE_S, then, to leave room for
    `room_for` new ones under VIEWS_MAX, the least recently used that no stream reads (pure)."""
    out = [v for v in views if v.readers == 0 and now - v.used > VIEW_IDLE_S]
    left = [v for v in views if v not in out]
    excess = len(left) + room_for - VIEWS_MAX
    if excess > 0:
        out += sorted((v for v in left if v.readers == 0), key=lambda v: v.used)[:excess]
    return out


class Views:
    """The open views of one node. `checkpoint(path)` takes one (under the node's commit
    lock); `clock` is world.monotonic in the node (runtime/world.py)."""

    def __init__(self, data_dir: str, checkpoint: Callable[[str], None], clock: Callable[[], float]) -> None:
        self.data_dir = data_dir
        self._checkpoint = checkpoint
        self._clock = clock
        self._lock = world.lock()
        self._views: dict[bytes, View] = {}
        for old in os.listdir(data_dir):  # views of an earlier run of this node
            if old.startswith(PREFIX):
                shutil.rmtree(os.path.join(data_dir, old), ignore_errors=True)

    def open(self, log_id: int, min_position: int) -> View:
        """A view at or after `min_position` on `log_id`, shared or new, with one reader
        more (`release` it)."""
        with self._lock:
            now = self._clock()
            v = shareable(list(self._views.values()), log_id, min_position, now)
            if v is None:
                self._close(to_close(list(self._views.values()), now, room_for=1))
                if len(self._views) >= VIEWS_MAX:
                    raise TooManyViews(f"{len(self._views)} scan views are open on this node and all are "
                                       "being read; retry")
                vid = secrets.token_bytes(8)
                path = os.path.join(self.data_dir, PREFIX + vid.hex())
                self._checkpoint(path)
                v = View(vid, path, Rdict(path, Options(raw_mode=True)), now, now)
                self._views[vid] = v
            v.readers += 1
            v.used = now
            return v

    def get(self, vid: bytes) -> View:
        """The open view `vid`, with one reader more (`release` it)."""
        with self._lock:
            v = self._views.get(vid)
            if v is None:
                raise ViewGone("the scan's view is closed: it was idle for over "
                               f"{VIEW_IDLE_S:.0f}s, or its storage node restarted; start the scan again")
            v.readers += 1
            v.used = self._clock()
            return v

    def release(self, v: View) -> None:
        with self._lock:
            v.readers -= 1
            v.used = self._clock()

    def reap(self) -> None:
        """Close the views idle past VIEW_IDLE_S (the node calls this every few seconds)."""
        with self._lock:
            self._close(to_close(list(self._views.values()), self._clock()))

    def count(self) -> int:
        with self._lock:
            return len(self._views)

    def close_all(self) -> None:
        with self._lock:
            self._close(list(self._views.values()))

    def _close(self, views: list[View]) -> None:
        for v in views:
            self._views.pop(v.id, None)
            v.db.close()
            shutil.rmtree(v.path, ignore_errors=True)
