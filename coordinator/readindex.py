"""The ReadIndex rule, batched: the highest position stored by any of a fence quorum of a
log's replicas, asked after the read arrived, bounds every write acknowledged before it.

Reads that arrive while a round of Tail calls is in flight wait for the next round (the
round in flight may have been asked before they arrived); one round then serves them all,
as etcd batches its ReadIndex requests."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future

ROUND_TIMEOUT_S = 1.5


class ReadIndex:
    def __init__(self, ask: Callable[[int], int | None]) -> None:
        """`ask(log_id)` performs one round of Tail calls (None when too few answered)."""
        self.ask = ask
        self._lock = threading.Lock()
        self._waiting: dict[int, list[Future[int | None]]] = {}
        self._busy: set[int] = set()

    def get(self, log_id: int, timeout_s: float = ROUND_TIMEOUT_S * 2) -> int | None:
        fut: Future[int | None] = Future()
        with self._lock:
            self._waiting.setdefault(log_id, []).append(fut)
            start = log_id not in self._busy
            if start:
                self._busy.add(log_id)
        if start:
            threading.Thread(target=self._rounds, args=(log_id,), daemon=True).start()
        try:
            return fut.result(timeout_s)
        except TimeoutError:
            return None

    def _rounds(self, log_id: int) -> None:
        while True:
            with self._lock:
                batch = self._waiting.pop(log_id, [])
                if not batch:
                    self._busy.discard(log_id)
                    return
            try:
                idx = self.ask(log_id)  # asked now: after every read in `batch` arrived
            except Exception:
                idx = None
            for f in batch:
                f.set_result(idx)
