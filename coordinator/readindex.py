"""Strong reads in batches, by the ReadIndex rule: the highest position stored by any of a
fence quorum of a log's replicas, asked after the read arrived, bounds every write
acknowledged before it; a replica that has applied the log that far can answer.

Reads that arrive while a round is in flight wait for the next round (the round in
flight may have been asked before they arrived); one round then serves them all: one set
of Tail calls and one read at a storage replica, as etcd batches its ReadIndex requests.
The reading threads run the rounds themselves (runtime/group_commit.py)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from runtime import world
from runtime.group_commit import GroupCommit, GroupTimeout

ROUND_TIMEOUT_S = 2.0


class ReadBatcher:
    def __init__(self, run_round: Callable[[int, list[Any]], list[Any] | None]) -> None:
        """`run_round(log_id, items)` asks the read index *now* and answers every item (a
        list in the same order), or None when the round failed."""
        self.run_round = run_round
        self._lock = world.lock()
        self._groups: dict[int, GroupCommit[Any, Any]] = {}

    def get(self, log_id: int, item: Any, timeout_s: float = ROUND_TIMEOUT_S * 2) -> Any:
        """The item's answer, or None (the caller then reads through the log)."""
        with self._lock:
            g = self._groups.get(log_id)
            if g is None:
                g = self._groups[log_id] = GroupCommit(lambda items: self._round(log_id, items))
        try:
            return g.call(item, timeout_s)
        except GroupTimeout:
            return None
        except Exception:
            return None

    def _round(self, log_id: int, items: list[Any]) -> Sequence[Any]:
        answers = self.run_round(log_id, items)
        return answers if answers is not None else [None] * len(items)
