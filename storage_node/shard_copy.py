"""A copy of one shard taken in by a storage node (a shard move's destination,
catalog/shard_moves.py): where it stands, and what the node's tail of the shard's log
and its skip marks become. Pure: the storage node's apply loop runs it
(storage_node/apply_loop.py install), driven through moves and rebuilds under faults by
the whole-cluster simulation (tests/sim/nodes.py).

A node keeps one position per log (where its tail resumes) and, per shard, a *mark*: the
shard's records below its mark are already in the node's state (they came with a copy)
and are skipped. A copy of shard s taken at log position p holds exactly the shard's
records below p. To install it, where t is the node's tail of the log (if it tails it):

- t at or past p: the node first brings the copy forward, applying the shard's records
  between p and t to it (catch_up), then marks s at t. Its tail never goes back, so a
  position it published stays true. (A first design moved the tail back to p; the
  simulator found that a move given up after such an install left a published position
  above the node's tail, and the log was truncated past what it had to read.)
- t before p, the node holding another shard of the log: it marks s at p; the tail goes
  on, skipping s's records below p.
- otherwise (no tail, or one kept from shards it held before, which means nothing: the
  log may be truncated past it; the simulator found that too): the tail starts at p.

The log holds p..t meanwhile: a log is not truncated while one of its shards is being
copied (catalog/shard_moves.py truncation_point), and p was at or past the truncation
point when the copy was taken. So each held shard's state is always that of its records
below max(tail, mark).

A node that lost its state, when no peer holds every shard it holds, is rebuilt the same
way, shard by shard (storage_node/rebuild.py): a copy of each of its shards, each taken at
a position of its own, then one tail per log that starts at the lowest (rebuild)."""

from __future__ import annotations

from collections.abc import Mapping

from catalog.log_map import LogMap
from storage_node.handoff import Place


def in_current_stint(place: Place | None, shard: int, log_map: LogMap) -> bool:
    """Whether a copy of `shard` whose place is `place` (None: never handed over) stands
    in the shard's stint as `log_map` has it, with no hand-off of it under way. A copy that
    does not lacks records: taken by a source that had not applied the shard's last
    hand-off, it is of the stint before, in the log the shard left; taken before the
    source applied the new stint's open record, it stands at the source's position while
    the shard's records after the open record still wait there. A rebuild takes such a
    copy again (storage_node/rebuild.py); a move's destination refuses it and tries another
    source, then the mover again (storage_node/shard_intake.py): installed, it applied the
    old log from the copy on, met the hand-off, and stopped in the new log at the shard's
    next record, having read past its open record when it did not hold the shard (the
    whole-cluster simulation, make sim SEED=100149 and SEED=100298)."""
    log_id, generation, opened = ((log_map.origin(shard), 0, True) if place is None
                                  else (place.log, place.generation, place.opened))
    return (opened and log_map.handing_of(shard) is None and log_id == log_map.log_of(shard)
            and generation == log_map.stint(shard)[0])


def tail(position: int, followed: bool, holds_others: bool) -> int | None:
    """The node's tail of a log, for an install: its position there if it follows the log,
    or holds another shard of it (a node still starting follows none yet: its position is
    where it will resume, and a copy must not move it past that shard's records; the
    whole-cluster simulation found a node that skipped them, tests/sim/nodes.py); else
    None (a position kept from shards it held before means nothing)."""
    return position if followed or holds_others else None


def catch_up(tail: int | None, copy_at: int) -> range:
    """The log positions whose records of the shard are applied to the copy before it is
    installed: those between the copy and the node's tail, if it is past the copy."""
    return range(copy_at, tail) if tail is not None and tail > copy_at else range(0)


def install(tail: int | None, copy_at: int, shard: int, marks: Mapping[int, int],
            holds_others: bool) -> tuple[int, dict[int, int]]:
    """(the node's tail position in the log, its new marks) once a copy of `shard` taken
    at `copy_at` is installed (brought forward to the tail first, catch_up). `tail`: the
    node's tail of the log, None if it tails it not; `holds_others`: whether it holds
    another shard of the log."""
    out = dict(marks)
    if tail is not None and tail >= copy_at:
        out[shard] = tail
        return tail, out
    out[shard] = copy_at
    if tail is not None and holds_others:
        return tail, out
    return copy_at, out


def applies(marks: Mapping[int, int], shard: int, position: int) -> bool:
    """Whether a record of `shard` at `position` is still to apply (not in a copy)."""
    return position >= marks.get(shard, 0)


def effective(tail: int | None, marks: Mapping[int, int], shard: int) -> int:
    """The log position a held shard's state stands at: its records below it are applied."""
    return max(tail or 0, marks.get(shard, 0))


def rebuild(copies: Mapping[int, int]) -> tuple[int, dict[int, int]]:
    """(the tail, the marks) of a node rebuilt from copies of its shards of one log, taken
    at the positions `copies` (shard -> position), with no state of the log before: the
    tail starts at the lowest copy, and each shard is marked at its own, so its records
    below it (in the copy) are skipped and the others applied. Every copy must be at or
    past any position the node published before it lost its state, so the log is never
    truncated past the tail (storage_node/rebuild.py asks its sources for that)."""
    if not copies:
        raise ValueError("copies: none")
    return min(copies.values()), dict(copies)
