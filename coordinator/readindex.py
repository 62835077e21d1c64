"""Strong reads in batches, by the ReadIndex rule: the highest position stored by any of a
fence quorum of a log's replicas, asked after the read arrived, bounds every write
acknowledged before it; a replica that has applied the log that far can answer.

Reads that arrive while a round is in flight wait for the next round (the round in
flight may have been asked before they arrived); one round then serves them all: one set
of Tail calls and one read at a storage replica, as etcd batches its ReadIndex requests."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

ROUND_TIMEOUT_S = 2.0


class ReadBatcher:
    def __init__(self, run_round: Callable[[int, list[Any]], list[Any] | None]) -> None:
        """`run_round(log_id, items)` asks the read index *now* and answers every item (a
        list in the same order), or None when the round failed."""
        self.run_round = run_round
        self._lock = threading.Lock()
        self._waiting: dict[int, list[tuple[Any, Future[Any]]]] = {}
        self._busy: set[int] = set()

    def get(self, log_id: int, item: Any, timeout_s: float = ROUND_TIMEOUT_S * 2) -> Any:
        """The item's answer, or None (the caller then reads through the log)."""
        fut: Future[Any] = Future()
        with self._lock:
            self._waiting.setdefault(log_id, []).append((item, fut))
            start = log_id not in self._busy
            if start:
                self._busy.add(log_id)
        if start:
            threading.Thread(target=self._rounds, args=(log_id,), daemon=True).start()
        try:
            return fut.result(timeout_s)
        except FutureTimeout:
            return None

    def _rounds(self, log_id: int) -> None:
        while True:
            with self._lock:
                batch = self._waiting.pop(log_id, [])
                if not batch:
                    self._busy.discard(log_id)
                    return
            try:
                answers = self.run_round(log_id, [item for item, _ in batch])
            except Exception:
                answers = None
            for i, (_, f) in enumerate(batch):
                f.set_result(answers[i] if answers is not None else None)
