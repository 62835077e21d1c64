"""Which log servers hold a new segment (its ensemble), chosen when a writer opens it and
fixed from then on (DESIGN.md, "A segment's replicas are fixed when it opens"): pure, so
that the simulator and the election use the same rule.

BookKeeper's ensemble placement, simplified: the claimant's own server first (its copy
counts toward the ack quorum, and costs no network hop), then the live servers that hold
the fewest segments and write the fewest logs, ties broken by id from the claimant's. A dead server drops out
at the next segment of each log it held (an ensemble change); a new server is filled by
the next segments opened."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from log import limits


class NoEnsemble(Exception):
    """Fewer live servers than an ensemble needs: no segment can open now."""


def choose(claimant: int, live: Iterable[int], load: Mapping[int, int],
           size: int = limits.ENSEMBLE_SIZE, pool: Iterable[int] = ()) -> tuple[int, ...]:
    """The ensemble of a segment `claimant` opens: `size` distinct servers, the claimant
    first, then live servers by `load` (segments held, writers run; a server missing from
    it has none), equal loads in id order from the claimant's. With too few live servers,
    servers of the `pool` that are not live fill it, lowest id first: an ack quorum of the
    live ones still takes appends (three servers, one down, as always), and the next
    segment leaves the dead one out."""
    assert size >= 1
    live = set(live)
    # Ties go to the servers that follow the claimant's id, wrapping around: logs claimed at
    # once by different servers (a cluster starting, nothing loaded yet) spread over the
    # pool instead of all landing on the lowest ids.
    span = max(live | set(pool) | {claimant}) + 1
    others = sorted(live - {claimant}, key=lambda s: (load.get(s, 0), (s - claimant) % span))
    others += sorted(set(pool) - live - {claimant})
    picked = (claimant, *others[: size - 1])
    if len(picked) < size:
        raise NoEnsemble(f"{len(picked)} log servers, an ensemble needs {size}")
    return picked


def loads(ensembles: Iterable[tuple[int, ...]], writers: Iterable[int] = ()) -> dict[int, int]:
    """Each server's load from the ensembles of the logs' open segments and the logs it
    writes (a writer costs more than a copy: count it twice)."""
    out: dict[int, int] = {}
    for ens in ensembles:
        for s in ens:
            out[s] = out.get(s, 0) + 1
    for w in writers:
        out[w] = out.get(w, 0) + 2
    return out


def ring(claimant: int, live: Iterable[int], pool: Sequence[int],
         size: int = limits.ENSEMBLE_SIZE) -> tuple[int, ...]:
    """The ensemble of a log's preferred writer (its rank 0 in the pool's order): itself and
    the live servers that follow it in the pool's order, wrapping around (with too few
    live, the others, as `choose`). Logs' preferred writers rotate through the pool, so
    their ensembles spread evenly with no load to read: a cluster starting, where every
    server claims at once and none sees the others' claims yet, gets 3/N of the segments
    on each server."""
    live = set(live)
    assert claimant in pool
    i = list(pool).index(claimant)
    after = [*pool[i + 1:], *pool[:i]]
    picked = (claimant, *[s for s in after if s in live], *[s for s in after if s not in live])[:size]
    if len(picked) < size:
        raise NoEnsemble(f"{len(picked)} log servers, an ensemble needs {size}")
    return picked
