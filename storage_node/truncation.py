"""When a storage node publishes its position into a log, and how far a log may be
truncated. Pure: the node's shell (storage_node/node.py) does the appends and calls."""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Mapping

from catalog.log_map import Handoff, LogMap


def needs_publish(last_data_position: int | None, published: int | None) -> bool:
    """Publish when key-value records were applied at or after the last published position
    (a log that only carries position records needs no more of them)."""
    if last_data_position is None:
        return False
    return last_data_position >= (published or 0)


def truncation_point(positions: Mapping[tuple[int, int], int], log_id: int,
                     members: Iterable[int]) -> int | None:
    """Below this position every member has applied and synced the log; None while any
    member has not reported (a node that is down holds truncation back)."""
    known = [positions.get((log_id, m)) for m in members]
    if not known or any(k is None for k in known):
        return None
    return min(k for k in known if k is not None)


def handed_holders(log_id: int, handoffs: Iterable[Handoff], holders_of: Callable[[int], Iterable[int]],
                   positions: Mapping[tuple[int, int], int]) -> set[int]:
    """The holders of shards handed from `log_id` to another log that a truncation of it
    still waits for (docs/log.md step 6): each shard's, until every one of them has
    published a position of `log_id` past the hand-off record (they apply the shard's
    records before it from this log, and the record itself)."""
    out: set[int] = set()
    for h in handoffs:
        nodes = set(holders_of(h.shard))
        if h.old == log_id and any(positions.get((log_id, n), -1) <= h.at for n in nodes):
            out |= nodes
    return out


def needs_log(shards_of_log: Iterable[int], holds: Callable[[int], bool], incoming: Container[int],
              marked: Container[int]) -> bool:
    """Whether a node needs a log's entries: it holds one of the shards the log carries or
    carried (`shards_of_log`), or takes one in by a move under way (`incoming`) whose copy
    it has (`marked`)."""
    return any(holds(x) or (x in incoming and x in marked) for x in shards_of_log)


def stint_below(m: LogMap, shard: int, log_id: int, first: int) -> bool:
    """Whether `shard` may have records in `log_id` below position `first`: yes unless its
    only stint there is the one its first hand-off opened (generation 1: from the log it
    started in, `origin`, another) at `start` or later, `start` at or past `first`. A hand-off
    names a `start` at or past the new log's end when it began, so a node that held none of
    that log's shards while it was truncated past its tail needs nothing the truncation took
    (make soak, seed 100717: a node behind log 0's truncation, then given a shard of log 0 by
    a hand-off starting at 59, stopped at 2 < 14 for nothing). A shard handed more than once
    may have had an earlier stint in the log that the map no longer names: it may."""
    h = m.last_handoff(shard)
    return not (h is not None and h.new == log_id and h.generation == 1 and m.origin(shard) != log_id
                and h.start >= first)


def behind(needed: bool, first: int, position: int) -> int | None:
    """What a node whose tail of a log met the log's truncation does: None, stop (it needs
    the entries truncated away, and bootstraps when started again); else the position it
    goes on from (nothing it holds is there: the log's first position still held, `first`,
    or its own `position` if that is further)."""
    return None if needed else max(first, position)
