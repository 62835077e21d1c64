"""Group commit toward the logs: requests for the same log that arrive while an append
is in flight go together in the next Append call (one log entry each)."""

from __future__ import annotations

import threading
from collections import deque
from concurrent.futures import Future

from log import limits as log_limits
from log.client import LogClient, LogError


class Appender:
    def __init__(self, logs: LogClient, log_id: int) -> None:
        self.logs = logs
        self.log_id = log_id
        self._q: deque[tuple[bytes, Future[tuple[int, int]]]] = deque()
        self._cv = threading.Condition()
        threading.Thread(target=self._run, name=f"appender-{log_id}", daemon=True).start()

    def submit(self, payload: bytes) -> Future[tuple[int, int]]:
        """The future resolves to (position, timestamp_ms) once the log has it durably."""
        fut: Future[tuple[int, int]] = Future()
        with self._cv:
            self._q.append((payload, fut))
            self._cv.notify()
        return fut

    def _take(self) -> list[tuple[bytes, Future[tuple[int, int]]]]:
        with self._cv:
            while not self._q:
                self._cv.wait()
            batch: list[tuple[bytes, Future[tuple[int, int]]]] = []
            size = 0
            while self._q and len(batch) < log_limits.BATCH_ENTRIES_MAX:
                nxt = len(self._q[0][0])
                if batch and size + nxt > log_limits.BATCH_BYTES_MAX:
                    break
                item = self._q.popleft()
                size += nxt
                batch.append(item)
            return batch

    def _run(self) -> None:
        while True:
            batch = self._take()
            try:
                r = self.logs.append(self.log_id, [p for p, _ in batch], timeout_s=20)
            except LogError as e:
                for _, fut in batch:
                    fut.set_exception(e)
                continue
            except Exception as e:  # never leave a waiter hanging
                for _, fut in batch:
                    fut.set_exception(e)
                continue
            for i, (_, fut) in enumerate(batch):
                fut.set_result((r.first_position + i, r.timestamp_ms))
