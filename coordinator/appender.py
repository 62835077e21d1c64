"""Group commit toward the logs: requests for the same log that arrive while an append
is in flight go together in the next Append call (one log entry each). The request
threads run the appends themselves (runtime/group_commit.py): a lone request pays no hand-off."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import Counter

from log import limits as log_limits
from log.client import Appended, LogClient
from runtime import world
from runtime.group_commit import GroupCommit

APPEND_CALLS = Counter("midtown_coordinator_log_appends_total",
                       "Append calls a coordinator made to the logs (each carries one or more records)",
                       ["log"])


@dataclass(frozen=True, slots=True)
class Placed:
    position: int
    timestamp_ms: int
    # The log client sent it more than once (an attempt's outcome was unknown): an earlier
    # copy may be in the log too, at a lower position, and that copy is the one applied.
    maybe_earlier_copy: bool


class Appender:
    def __init__(self, logs: LogClient, log_id: int) -> None:
        self.logs = logs
        self.log_id = log_id
        # Each item: a payload and its caller's deadline (world.monotonic()).
        self._group: GroupCommit[tuple[bytes, float], Placed] = GroupCommit(
            self._batch, size=lambda item: len(item[0]), max_size=log_limits.BATCH_BYTES_MAX)

    def append(self, payload: bytes, timeout_s: float) -> Placed:
        """Where the log put the payload, once it has it durably, within `timeout_s`.
        LogError from the log (an append that ran out of time among them); GroupTimeout if
        the append could not start within `timeout_s`."""
        return self._group.call((payload, world.monotonic() + timeout_s), timeout_s)

    def append_many(self, payloads: list[bytes], timeout_s: float) -> list[Placed]:
        """Payloads that already make a batch (a bulk write's records): one Append of their
        own, beside the group commit."""
        return self._append(payloads, timeout_s)

    def _batch(self, items: list[tuple[bytes, float]]) -> list[Placed]:
        """One group's append, within the earliest deadline among its callers: none of them
        waits past its own (a caller that joined later may see its append fail sooner than
        it had to, and retries; its outcome is unknown, as after any failed append)."""
        budget = max(0.0, min(d for _, d in items) - world.monotonic())
        return self._append([p for p, _ in items], budget)

    def _append(self, payloads: list[bytes], timeout_s: float) -> list[Placed]:
        deadline = world.monotonic() + timeout_s
        out: list[Placed] = []
        for i in range(0, len(payloads), log_limits.BATCH_ENTRIES_MAX):
            chunk = payloads[i:i + log_limits.BATCH_ENTRIES_MAX]
            APPEND_CALLS.labels(log=str(self.log_id)).inc()
            left = max(0.0, deadline - world.monotonic())
            r: Appended = self.logs.append(self.log_id, chunk, timeout_s=left)
            out.extend(Placed(r.first_position + j, r.timestamp_ms, r.attempts > 1)
                       for j in range(len(chunk)))
        return out
