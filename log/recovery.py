"""Recovery decisions: where an unsealed segment ends.

Order of steps (the writer core drives them, see writer.py):
  1. The new writer has bumped the epoch in ZooKeeper (versioned write).
  2. It fences the last segment's replicas; it proceeds with the first `fence_quorum`
     replicas that accept (R). The old writer can now reach at most ack_quorum - 1
     replicas, so it can never again acknowledge anything.
  3. It reads every member of R from max LAC (over R) to max last (over R).
  4. `decide_end` below: the segment ends at the last position p such that every position
     from max LAC through p is held by some member of R. A position held by no member of R
     is held by at most ensemble - |R| = ack_quorum - 1 replicas, so it was never
     acknowledged, and neither was anything after it (acks are given in order).
  5. Entries after max LAC up to the end are re-replicated to an ack quorum.
  6. The end is sealed in ZooKeeper in the same versioned write that opens the new segment.
     From then on the decision is the same for every reader.
Entries are never invented during recovery, only copied: within a segment a position has
exactly one possible content (the segment's writer created it), so copies never conflict."""

from __future__ import annotations

from dataclasses import dataclass

from log.entry import Entry


@dataclass(frozen=True, slots=True)
class TailView:
    """What one fenced replica told the recovering writer about the segment."""

    lac: int
    last: int
    entries: dict[int, Entry]  # the entries it holds in the range read
    first: int = 0  # its truncation point: every position below was committed
    first_ts: int = 0  # the highest timestamp it truncated away


@dataclass(frozen=True, slots=True)
class Decision:
    end: int  # inclusive; first - 1 for an empty segment
    last_ts: int
    to_replicate: tuple[Entry, ...]  # entries after max LAC through end


def known_committed(views: list[TailView]) -> int:
    """The highest position known to be committed: the max LAC, or below a truncation point
    (only committed entries are ever truncated)."""
    return max(max(v.lac for v in views), max(v.first for v in views) - 1)


def read_range(views: list[TailView], first: int) -> tuple[int, int]:
    """The range [lo, hi] the writer must read from each fenced replica. It starts at the
    highest known committed position (for its timestamp) or the segment's first position."""
    max_last = max(v.last for v in views)
    lo = max(known_committed(views), first)
    return lo, max(max_last, lo - 1)


def decide_end(views: list[TailView], first: int, base_ts: int) -> Decision:
    """Apply step 4 to the fenced quorum's answers (each read over `read_range`)."""
    assert views, "a decision needs the fenced quorum's answers"
    known = known_committed(views)
    lo, hi = read_range(views, first)
    end = first - 1
    last_ts = base_ts
    tail: list[Entry] = []
    # Every position at or below `known` was acknowledged: it is certainly in the segment.
    if known >= first:
        end = known
        held = [v.entries[known] for v in views if known in v.entries]
        last_ts = max([base_ts] + [v.first_ts for v in views] + [e.timestamp_ms for e in held])
    for p in range(max(lo, known + 1), hi + 1):
        held = [v.entries[p] for v in views if p in v.entries]
        if not held:
            break
        end = p
        last_ts = held[0].timestamp_ms
        tail.append(held[0])
    assert end >= min(known, first - 1) or known < first
    return Decision(end=end, last_ts=last_ts, to_replicate=tuple(tail))
