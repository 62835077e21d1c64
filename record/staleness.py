"""Bounded-staleness reads (docs/architecture.md, "Reads near the caller"): when a replica
may answer a read that asks to be no staler than `bound_ms`, by the log time it has
applied and its own clock. Pure.

Log time is the writer's wall clock, stamped never decreasing (log/writer.py), so a
write acknowledged at real time t was stamped at most t + MAX_CLOCK_OFFSET_MS (every
writer's clock within the offset of real time; a stamp raised above the clock by a
previous writer's stamp is that writer's clock, within the offset too). A read beginning
at real time t0 must see every write acknowledged before t0 - bound, stamped at most
t0 - bound + offset. The replica's clock reads at least t0 - offset when it answers, so
it may answer when the log time it has applied the shard's log up to (`applied_ms`: the
stamp of the last entry it applied; time marks move an idle log's) is past
`now - bound + 2 * offset` by its clock: then every such write's stamp is below
`applied_ms`, and stamps never decreasing with positions (entries appended together share
one), the write stands before the last entry applied here. (Strictly past: an entry applied
whose stamp equals the write's may stand before it.)

A shard handed to another log reads by the log this replica applies it from. A replica
that has not yet applied the hand-off has applied the old log only to below the hand-off
record's stamp, which is at most the offset past the real time the record was sequenced,
before any write of the shard the new log took; so for a write the new log acknowledged
before t0 - bound, that stamp is below t0 - bound + offset, and the rule refuses the
replica, as for a write of the old log."""

from __future__ import annotations

# How far apart the cluster's wall clocks may be from real time, at most (CockroachDB's
# --max-offset rests on 500 ms between nodes; ours bounds each clock within 250 ms of real
# time, so any two within 500 ms). A bound below twice this is never served by a replica:
# such a read goes to the writer as a strong one.
MAX_CLOCK_OFFSET_MS = 250

# The largest bound a read may ask for: a day (a larger one is a unit mistake).
MAX_STALENESS_MS = 86_400_000


def oldest_allowed_ms(now_ms: int, bound_ms: int, offset_ms: int = MAX_CLOCK_OFFSET_MS) -> int:
    """The log time a replica must have applied past, by its clock `now_ms`, to answer a
    read bounded by `bound_ms`."""
    return now_ms - bound_ms + 2 * offset_ms


def fresh_enough(applied_ms: int, now_ms: int, bound_ms: int, offset_ms: int = MAX_CLOCK_OFFSET_MS) -> bool:
    """Whether a replica that has applied its log up to log time `applied_ms` may answer a
    read bounded by `bound_ms` (> 0) now (`now_ms`, its own clock)."""
    return bound_ms > 0 and applied_ms > oldest_allowed_ms(now_ms, bound_ms, offset_ms)


# How long a replica that saw its log's stamps run ahead of its clock serves no bounded read
# of that log (ClockWatch), and how long a check of its clock against the log's writer's
# (a Tail answer within the offsets) lets it serve them.
CLOCK_DOUBT_S = 10.0
CLOCK_TRUST_S = 10.0


def lag_ms(writer_clock_ms: int, applied_ms: int, missing: int) -> int:
    """How far behind its log's writer a replica is in log time (the metric
    midtown_storage_lag_ms): the writer's clock as it answered, less the stamp of the last
    entry the replica applied, while it misses `missing` entries; 0 when it misses none (an
    idle log's replica is not behind, however old its last stamp)."""
    return max(0, writer_clock_ms - applied_ms) if missing > 0 else 0


class ClockWatch:
    """What a replica knows of its own clock against its logs' writers' (docs/architecture.md,
    "Reads near the caller"). A stamp of the writer's clock (an entry's, or the clock it
    says in its answer to a Tail call) was read before it reached this replica, so `stamp -
    now` when it arrives (`now`: this replica's clock) is at most how far the writer's clock
    stands ahead of this one. The rule above holds while that is at most 2 *
    MAX_CLOCK_OFFSET_MS (each clock within the offset of real time). A replica serves bounded
    reads of a log only within CLOCK_TRUST_S of a Tail answer that showed the writer's
    clock within that (its entries cannot: read behind, their stamps are old whatever the
    clocks), and none for CLOCK_DOUBT_S after any stamp further ahead (its clock, or the
    writer's, is off by more than the rule allows): those go to the writer as strong reads.
    Clocks the rule allows are never doubted; a clock off the other way (this one ahead)
    only makes it refuse reads it could serve. A check, not a proof: clocks further apart
    than the rule allows go unseen while every answer takes longer to arrive than the
    excess (the node asks its writers every 2 s: a link slower than that, one way)."""

    def __init__(self) -> None:
        self._doubt: dict[int, tuple[float, int]] = {}  # log -> (doubted until, monotonic s; how far ahead)
        self._trusted: dict[int, float] = {}  # log -> until when (monotonic s) its last check lets it serve

    def note(self, log_id: int, stamp_ms: int, now_ms: int, mono_s: float,
             checked: bool = False) -> int | None:
        """A stamp of `log_id`'s writer's clock (`checked`: its clock in a Tail answer, read
        as the answer left it) seen now; how far ahead it ran, when that begins a doubt
        (None otherwise: within the offsets, or doubted already)."""
        ahead = stamp_ms - now_ms
        if ahead <= 2 * MAX_CLOCK_OFFSET_MS:
            if checked:
                self._trusted[log_id] = mono_s + CLOCK_TRUST_S
            return None
        began = log_id not in self._doubt or self._doubt[log_id][0] <= mono_s
        self._doubt[log_id] = (mono_s + CLOCK_DOUBT_S, ahead)
        return ahead if began else None

    def doubt(self, log_id: int, mono_s: float) -> str | None:
        """Why this replica serves no bounded read of `log_id` now (None: it may)."""
        d = self._doubt.get(log_id)
        if d is not None and d[0] > mono_s:
            return (f"log {log_id}'s writer's clock ran {d[1]} ms ahead of this replica's, more than "
                    f"the {2 * MAX_CLOCK_OFFSET_MS} ms two clocks may stand apart")
        if self._trusted.get(log_id, -1.0) <= mono_s:
            return (f"its clock has not been checked against log {log_id}'s writer's in the last "
                    f"{CLOCK_TRUST_S:.0f} s")
        return None
