"""Group commit toward the logs: requests for the same log that arrive while an append
is in flight go together in the next Append call (one log entry each). The request
threads run the appends themselves (runtime/group_commit.py): a lone request pays no hand-off."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import Counter

from log import limits as log_limits
from log.client import Appended, LogClient
from runtime.group_commit import GroupCommit

APPEND_TIMEOUT_S = 20.0
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
        self._group: GroupCommit[bytes, Placed] = GroupCommit(
            self._append, size=len, max_size=log_limits.BATCH_BYTES_MAX)

    def append(self, payload: bytes, timeout_s: float) -> Placed:
        """Where the log put the payload, once it has it durably. LogError from the log;
        GroupTimeout if the append could not start within `timeout_s`."""
        return self._group.call(payload, timeout_s)

    def append_many(self, payloads: list[bytes], timeout_s: float) -> list[Placed]:
        """Payloads that already make a batch (a bulk write's records): one Append of their
        own, beside the group commit."""
        return self._append(payloads, timeout_s)

    def _append(self, payloads: list[bytes], timeout_s: float = APPEND_TIMEOUT_S) -> list[Placed]:
        out: list[Placed] = []
        for i in range(0, len(payloads), log_limits.BATCH_ENTRIES_MAX):
            chunk = payloads[i:i + log_limits.BATCH_ENTRIES_MAX]
            APPEND_CALLS.labels(log=str(self.log_id)).inc()
            r: Appended = self.logs.append(self.log_id, chunk, timeout_s=timeout_s)
            out.extend(Placed(r.first_position + j, r.timestamp_ms, r.attempts > 1)
                       for j in range(len(chunk)))
        return out
