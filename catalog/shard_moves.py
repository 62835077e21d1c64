"""Moving a shard's replica from one storage node to another, online (issue 32): the
protocol's decisions, pure. The seeded simulator runs it (tests/sim/moves.py) through
crashes of the mover, the source and the destination at every step; `midtown shard move`
(cli/shards.py) runs it against the cluster (docs/storage.md).

A move is kept in ZooKeeper beside the replica sets, one per shard at a time, and every
step is a versioned write, so a mover that dies is replaced by any other, which reads the
move and goes on from its phase:

  copying  The destination takes a copy of the shard from a replica, as of one log
           position p (storage_node/shard_copy.py). Meanwhile the shard's log is not
           truncated at all: p is at or above the truncation point when the copy is taken,
           and stays held.
  tailing  The destination holds the copy at p (installed atomically; the mover records
           p once the destination has published its positions again since, so that no
           position it published before the copy counts) and applies the shard's records
           from p on.
           The log is truncated below the destination's position, as below any holder's.
  joined   The destination is in the replica set (versioned write of the sets): it
           answers for the shard. Only a destination with an installed copy may join.
  done     The replica that leaves (if any) is taken out of the set, only once the
           destination has applied as far as the leaving replica had; then the move's
           record is marked ended (catalog/registry.py ENDED) and the leaving node
           deletes its copy.

A move may be given up before it joins (`abort`): its record is marked ended, the destination drops
its copy, and the replica set never changed."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

# What a move copies at unless told (MB/s; 0: no limit), as production stores pace their
# rebalancing copies by default (CockroachDB's kv.snapshot_rebalance.max_rate, Cassandra's
# stream throughput): `midtown-bench moves` on this 2-core machine measured a steady
# workload's put p99 during an unpaced move at 2.7x and 4.9x its p99 without, and 1.0x and
# 1.8x at 32 MB/s (docs/operations.md).
RATE_MB_S_DEFAULT = 32.0

COPYING, TAILING, JOINED, DONE = "copying", "tailing", "joined", "done"


@dataclass(frozen=True, slots=True)
class Move:
    shard: int
    dest: int
    leaving: int | None  # the replica that leaves once the destination is in (None: one more copy)
    phase: str = COPYING
    copied_at: int | None = None  # the copy's log position, from TAILING on


def start(sets: tuple[int, ...], shard: int, dest: int, leaving: int | None) -> Move:
    """A new move: ValueError naming the field when it makes no sense."""
    if dest in sets:
        raise ValueError(f"to: node {dest} holds shard {shard} already")
    if leaving is not None and leaving not in sets:
        raise ValueError(f"from: node {leaving} does not hold shard {shard}")
    return Move(shard, dest, leaving)


def may_record_copy(installed_after: int, published: int) -> bool:
    """Whether the mover may record the destination's installed copy (and so let the log
    be truncated below the destination's published position): only once the destination
    has published its positions since it installed the copy. Installing a copy may move
    its tail back (storage_node/shard_copy.py); a position published before is then too
    high, and truncating below it would take records the destination has still to apply
    (the simulator found this: 25 of 200 seeds truncated past a destination).
    `installed_after`: how many times the destination had published when it installed
    the copy; `published`: how many times it has now."""
    return published > installed_after


def copied(m: Move, position: int) -> Move:
    """The destination installed a copy at `position` (and published since: may_record_copy)."""
    assert m.phase == COPYING
    return replace(m, phase=TAILING, copied_at=position)


def may_join(m: Move) -> bool:
    """Only a destination whose copy is installed joins the replica set."""
    return m.phase == TAILING and m.copied_at is not None


def joined(m: Move) -> Move:
    assert may_join(m)
    return replace(m, phase=JOINED)


def joined_sets(sets: tuple[int, ...], m: Move) -> tuple[int, ...]:
    return tuple(sorted({*sets, m.dest}))


def may_finish(m: Move, positions: Mapping[int, int]) -> bool:
    """Whether the leaving replica may go: the destination has joined and applied the
    shard's log at least as far as the leaving replica had (`positions`: each node's
    position in the shard's log, as last reported)."""
    if m.phase != JOINED:
        return False
    if m.leaving is None:
        return True
    mine, theirs = positions.get(m.dest), positions.get(m.leaving)
    return mine is not None and (theirs is None or mine >= theirs)


def finished_sets(sets: tuple[int, ...], m: Move) -> tuple[int, ...]:
    return tuple(n for n in sets if n != m.leaving)


def finished(m: Move) -> Move:
    assert m.phase == JOINED
    return replace(m, phase=DONE)


def truncation_point(holders_low: int | None, moves: list[Move],
                     positions: Mapping[int, int]) -> int | None:
    """How far a log may be truncated: below every holder's position (`holders_low`,
    storage_node/truncation.py), never while a move of one of its shards is copying, and
    below each moving destination's position from then on (None: not at all now)."""
    if holders_low is None:
        return None
    low = holders_low
    for m in moves:
        p = positions.get(m.dest)
        if m.phase == COPYING or p is None:
            return None
        low = min(low, p)
    return low
