"""Re-replication of a sealed segment that lost a replica (BookKeeper's auto-recovery),
as pure decisions: which segment moves from which dead server to which live one, and when
the move may be recorded. The servers run it in log/rereplicator.py (in the simulation too:
tests/sim/writers.py), where a server being decommissioned counts as dead too.

The rule that keeps it safe: a sealed segment's committed entries are exactly the
positions first..end (its recorded end), each with one content. A move copies those
entries, and only those, from the segment's live replicas to the new server; the
metadata names the new server in place of the dead one (a versioned write) only once the
new server holds every one of them above the truncation point. A move that dies half-way
has changed no metadata: the old replica set stands, and the move starts again."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from fleet import failure_domains
from fleet.failure_domains import Domains
from log.entry import Entry
from log.metadata import LogMetadata, Segment


@dataclass(frozen=True, slots=True)
class Move:
    epoch: int  # the sealed segment's
    dead: int
    target: int


def plan(meta: LogMetadata, live: Iterable[int], load: Mapping[int, int],
         domain_of: Domains = failure_domains.unknown, one_machine: bool = False,
         started: Mapping[int, int] = {}, targets: Iterable[int] | None = None) -> list[Move]:
    """One move for each sealed segment with a replica that is not live: to the least
    loaded live server that holds no copy of it, on a machine that holds none of the
    copies that stay (the placement rule, fleet/failure_domains.py; spread over
    localities first); none when there is no such server. `started`: segment epoch ->
    the target of a move begun before and not recorded, taken again while the rule allows
    it (rather than a server less loaded now), so that a move that stopped half-way
    leaves no partial copy behind on a server the metadata never names. `targets`: the
    live servers a copy may move to (the log's home: log/homes.py; None: any live one)."""
    live = set(live)
    may_take = live if targets is None else live & set(targets)
    out = []
    for seg in meta.segments:
        if not seg.sealed:
            continue
        dead = [r for r in seg.replicas if r not in live]
        if not dead:
            continue
        stay = [r for r in seg.replicas if r != dead[0]]
        again = started.get(seg.epoch)
        spare = sorted(may_take - set(seg.replicas), key=lambda s: (s != again, load.get(s, 0), s))
        try:
            picked = failure_domains.pick(len(stay) + 1, spare, domain_of, fixed=stay,
                                          one_machine=one_machine)
        except failure_domains.PlacementError:
            continue  # nowhere to go by the rule: the segment waits for a machine
        out.append(Move(seg.epoch, dead[0], picked[-1]))
    return out


def committed_range(seg: Segment, truncated_before: int) -> range:
    """The positions of a sealed segment's committed entries still held (above truncation)."""
    assert seg.sealed and seg.end is not None
    return range(max(seg.first, truncated_before), seg.end + 1)


def to_copy(seg: Segment, truncated_before: int, held: Mapping[int, Entry]) -> list[Entry]:
    """What to copy: the committed entries among `held` (one source's entries of the
    segment, by position). Entries past the recorded end were never committed: left."""
    return [held[p] for p in committed_range(seg, truncated_before) if p in held]


def complete(seg: Segment, truncated_before: int, target_has: Iterable[int]) -> bool:
    """Whether the new server holds every committed entry: only then is the move recorded."""
    has = set(target_has)
    return all(p in has for p in committed_range(seg, truncated_before))


def recorded(meta: LogMetadata, move: Move) -> LogMetadata:
    """The metadata with the move's target in place of its dead replica (the segment's
    replicas keep their order; the versioned write of it is the caller's)."""
    segs = []
    for seg in meta.segments:
        if seg.epoch == move.epoch:
            assert seg.sealed, "only a sealed segment's replicas change"
            assert move.dead in seg.replicas and move.target not in seg.replicas
            seg = replace(seg, replicas=tuple(move.target if r == move.dead else r for r in seg.replicas))
        segs.append(seg)
    return replace(meta, segments=tuple(segs))
