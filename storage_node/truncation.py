"""When a storage node publishes its position into a log, and how far a log may be
truncated. Pure: the node's shell (storage_node/node.py) does the appends and calls."""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Mapping

from catalog.log_map import Handoff, LogMap
from storage_node.handoff import Place


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
              marked: Container[int], copied_past: Container[int] = ()) -> bool:
    """Whether a node needs a log's entries: it holds one of the shards the log carries or
    carried (`shards_of_log`), or takes one in by a move under way (`incoming`) whose copy
    it has (`marked`), unless its copy of it was taken in this log at or past the
    truncation (`copied_past`: its records before are in the copy; make soak, seed 101607,
    a node taking shard 0 in by a move, its copy at 41, stopped behind log 0's truncation
    to 12)."""
    return any((holds(x) or (x in incoming and x in marked)) and x not in copied_past for x in shards_of_log)


def stint_below(m: LogMap, shard: int, log_id: int, first: int, place: Place | None = None) -> bool:
    """Whether `shard` may have records in `log_id` below position `first` that a node whose
    own state of the shard stands at `place` (None: never handed, in its origin log) has
    still to apply: yes if it takes the shard's records from that log now (from its open
    record if it awaits one: if that may stand below `first`); from another log, no if the
    map's last hand-off of the shard is the one after the node's stint (its generation
    next) and leads to `log_id` at `start`, at or past `first`; yes when stints may lie
    between (the map names the last hand-off alone).

    A hand-off names a `start` at or past the new log's end when it began, so a node that
    held none of that log's shards while it was truncated past its tail needs nothing the
    truncation took (make soak, seed 100717: a node behind log 0's truncation, then given
    a shard of log 0 by a hand-off starting at 59, stopped at 2 < 14 for nothing; seed
    101607: the shard had started in log 0 and gone to log 1, the node had applied that
    hand-off, and the shard came back to log 0 at 41; the node, its tail of log 0 at 9,
    stopped behind the truncation to 12 where it needed nothing)."""
    place = place if place is not None else Place(m.origin(shard))
    if place.log == log_id:
        return place.opened or place.since < first
    h = m.last_handoff(shard)
    return not (h is not None and h.new == log_id and h.old == place.log
                and h.generation == place.generation + 1 and h.start >= first)


def behind(needed: bool, first: int, position: int) -> int | None:
    """What a node whose tail of a log met the log's truncation does: None, stop (it needs
    the entries truncated away, and bootstraps when started again); else the position it
    goes on from (nothing it holds is there: the log's first position still held, `first`,
    or its own `position` if that is further)."""
    return None if needed else max(first, position)
