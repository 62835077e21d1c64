"""Group commit toward the logs: requests for the same log that arrive while an append
is in flight go together in the next Append call (one log entry each). The request
threads run the appends themselves (runtime/group_commit.py): a lone request pays no hand-off."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client import Counter

from log import limits as log_limits
from log.client import NONE, Appended, LogClient, Tags
from runtime import refusals, world
from runtime.group_commit import GroupCommit
from runtime.refusals import Refusal

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
    log_id: int = -1  # the log it was placed in
    # The shard's stint in the log it was placed in (catalog/log_map.py LogMap.stint): a
    # put's version is its position + 1 + version_base, its log time at least ts_floor.
    version_base: int = 0
    ts_floor: int = 0


class Sealed(Exception):
    """The log refused the append whole: a record in it is of a shard outside its stint
    there (handed over, or another generation: log/seals.py). Nothing of it is in the log:
    each record may be sent again, by the shard -> log map read again."""


# One record to append: its payload, its caller's deadline (world.monotonic()), its shard
# and the shard's generation as the coordinator's map has it.
Item = tuple[bytes, float, int, int]


class Appender:
    def __init__(self, logs: LogClient, log_id: int,
                 answered_beside: Callable[[int, int], bool] = lambda log_id, shard: True) -> None:
        """`answered_beside(log, shard)`: whether the storage node of this process answers
        the shard's records alone (Coordinator.answered_beside); an append in the writer's
        process of a shard it does not hurries the log's lingering followers (Tags.hurry),
        whose answer is then waited for."""
        self.logs = logs
        self.log_id = log_id
        self._beside = answered_beside
        self._group: GroupCommit[Item, Placed] = GroupCommit(
            self._batch, size=lambda item: len(item[0]), max_size=log_limits.BATCH_BYTES_MAX)

    def append(self, payload: bytes, timeout_s: float, shard: int = NONE, generation: int = 0) -> Placed:
        """Where the log put the payload (a record of `shard`, at `generation`), once it
        has it durably, within `timeout_s`. Refusal from the log (an append that ran out
        of time among them); Sealed; GroupTimeout if the append could not start within
        `timeout_s`."""
        return self._group.call((payload, world.monotonic() + timeout_s, shard, generation), timeout_s)

    def append_many(self, items: list[Item], timeout_s: float) -> list[Placed]:
        """Records that already make a batch (a bulk write's): one Append of their own,
        beside the group commit."""
        return self._append(items, timeout_s)

    def _batch(self, items: list[Item]) -> list[Placed]:
        """One group's append, within the earliest deadline among its callers: none of them
        waits past its own (a caller that joined later may see its append fail sooner than
        it had to, and retries; its outcome is unknown, as after any failed append)."""
        budget = max(0.0, min(d for _, d, _, _ in items) - world.monotonic())
        return self._append(items, budget)

    def _append(self, items: list[Item], timeout_s: float) -> list[Placed]:
        deadline = world.monotonic() + timeout_s
        out: list[Placed] = []
        for i in range(0, len(items), log_limits.BATCH_ENTRIES_MAX):
            chunk = items[i:i + log_limits.BATCH_ENTRIES_MAX]
            APPEND_CALLS.labels(log=str(self.log_id)).inc()
            left = max(0.0, deadline - world.monotonic())
            shards = tuple(s for _, _, s, _ in chunk)
            tags = Tags(shards, tuple(g for _, _, _, g in chunk),
                        hurry=any(s != NONE and not self._beside(self.log_id, s) for s in set(shards)))
            try:
                r: Appended = self.logs.append(self.log_id, [p for p, _, _, _ in chunk], timeout_s=left,
                                               tags=tags)
            except Refusal as e:
                if e.reason == refusals.SEALED:
                    raise Sealed(e.message) from None
                raise
            out.extend(Placed(r.first_position + j, r.timestamp_ms, r.attempts > 1, self.log_id)
                       for j in range(len(chunk)))
        return out
