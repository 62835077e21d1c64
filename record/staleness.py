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
