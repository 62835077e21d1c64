"""Which log servers hold a new segment (its ensemble), chosen when a writer opens it and
fixed from then on (DESIGN.md, "A segment's replicas are fixed when it opens"): pure, so
that the simulator and the election use the same rule.

BookKeeper's ensemble placement, simplified: the claimant's own server first (its copy
counts toward the ack quorum, and costs no network hop), then the live servers that hold
the fewest segments and write the fewest logs, ties broken by id. A dead server drops out
at the next segment of each log it held (an ensemble change); a new server is filled by
the next segments opened."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from log import limits


class NoEnsemble(Exception):
    """Fewer live servers than an ensemble needs: no segment can open now."""


def choose(claimant: int, live: Iterable[int], load: Mapping[int, int],
           size: int = limits.ENSEMBLE_SIZE, pool: Iterable[int] = ()) -> tuple[int, ...]:
    """The ensemble of a segment `claimant` opens: `size` distinct servers, the claimant
    first, then live servers by `load` (segments held, writers run; a server missing from
    it has none). With too few live servers, servers of the `pool` that are not live fill
    it, lowest id first: an ack quorum of the live ones still takes appends (three
    servers, one down, as always), and the next segment leaves the dead one out."""
    assert size >= 1
    live = set(live)
    others = sorted(live - {claimant}, key=lambda s: (load.get(s, 0), s))
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
