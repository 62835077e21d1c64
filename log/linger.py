"""Lingering Read streams: a follower that nobody waits on asks its Read stream to let
committed entries wait, up to `ReadRequest.linger_ms`, and travel together, as Kafka's
fetch.max.wait.ms lets a broker hold a fetch until more data is there.

Who asks: a storage node of the host layout tailing another host's writer. Its
coordinators' records are answered by the storage node beside the writer
(Record.answered_beside), so its own apply is on nobody's path; on this machine's cores
it competed with the path (docs/performance.md@71edb5a, "Lingering Read streams"). Fewer, fuller
messages mean one send per batch on the writer's server, one apply per batch on the
follower.

An entry goes at once, whatever the linger, when someone may wait for it:

* the log server was asked to hurry through its position (`Lingering.hurry`): an append
  through the Append call (its coordinator, in another process, waits for a replica's
  answer, and may not have one beside the writer), and a Tail call at the writer's server
  (a ReadIndex round: a strong read then waits for a replica to apply that far), through
  every position the writer has assigned;
* LINGER_ENTRIES_MAX entries wait already (a follower stays well within a storage node's
  health lag, storage_node/limits.py HEALTH_LAG_MAX);
* the oldest waiting entry has waited the linger.

So a lingering stream delays no answer and no strong read; what it delays is a
follower's copy of entries nobody waits on, by at most the linger."""

from __future__ import annotations

import itertools
from collections.abc import Callable

from log.limits import LINGER_MS_MAX  # noqa: F401  (the longest linger a Read may ask for)
from runtime import world

LINGER_ENTRIES_MAX = 256  # entries that go at once, whatever the linger


def linger_left(now: float, since: float, linger_s: float, pending: int, hurried: bool) -> float:
    """How much longer a Read stream may hold its `pending` committed entries, the oldest
    noticed at `since` (seconds, one clock); 0: send them now."""
    if hurried or pending >= LINGER_ENTRIES_MAX:
        return 0.0
    return max(0.0, since + linger_s - now)


class Lingering:
    """The log server's lingering streams, per log: the position through which entries
    must go at once, and where to wake the streams that wait."""

    def __init__(self, logs: int) -> None:
        self._conds = [world.condition() for _ in range(logs)]
        self._hurried = [-1] * logs
        self._waiting: list[dict[int, int]] = [{} for _ in range(logs)]  # ticket -> next position
        self._tickets = itertools.count()

    def hurried(self, log_id: int, position: int) -> bool:
        """Whether the entry at `position` must go at once."""
        return self._hurried[log_id] >= position

    def hurry(self, log_id: int, through: int) -> None:
        """Entries up to `through` go at once, now or when committed."""
        c = self._conds[log_id]
        with c:
            if through > self._hurried[log_id]:
                self._hurried[log_id] = through
                w = self._waiting[log_id]
                if w and through >= min(w.values()):
                    c.notify_all()

    def committed(self, log_id: int, end: Callable[[], int]) -> None:
        """The log's commit point moved (to `end()`): wake the streams that now have
        LINGER_ENTRIES_MAX entries waiting."""
        if not self._waiting[log_id]:
            return
        c = self._conds[log_id]
        with c:
            w = self._waiting[log_id]
            if w and end() - min(w.values()) + 1 >= LINGER_ENTRIES_MAX:
                c.notify_all()

    def wait(self, log_id: int, position: int, timeout_s: float) -> None:
        """A stream whose next entry is at `position` lingers: until hurried, until
        LINGER_ENTRIES_MAX entries wait, or for `timeout_s`."""
        c = self._conds[log_id]
        ticket = next(self._tickets)
        with c:
            if self.hurried(log_id, position):
                return
            self._waiting[log_id][ticket] = position
            try:
                c.wait(timeout_s)
            finally:
                del self._waiting[log_id][ticket]
