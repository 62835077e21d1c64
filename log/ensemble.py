"""Which log servers hold a new segment (its ensemble), chosen when a writer opens it and
fixed from then on (DESIGN.md, "A segment's replicas are fixed when it opens"): pure, so
that the simulator and the election use the same rule.

BookKeeper's ensemble placement, simplified: the claimant's own server first (its copy
counts toward the ack quorum, and costs no network hop), then the live servers that hold
the fewest segments and write the fewest logs, ties broken by id from the claimant's. A dead server drops out
at the next segment of each log it held (an ensemble change); a new server is filled by
the next segments opened. Within that order the placement rule picks
(fleet/failure_domains.py): never two of a segment's servers on one machine, spread over
localities, so that an ack quorum is always on two machines."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from fleet import failure_domains
from fleet.failure_domains import Domains, PlacementError
from log import limits


class NoEnsemble(Exception):
    """Fewer live servers (or machines) than an ensemble needs: no segment can open now."""


def choose(claimant: int, live: Iterable[int], load: Mapping[int, int],
           size: int = limits.ENSEMBLE_SIZE, pool: Iterable[int] = (),
           domain_of: Domains = failure_domains.unknown, one_machine: bool = False) -> tuple[int, ...]:
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
    return _placed(claimant, others, size, domain_of, one_machine)


def _placed(claimant: int, order: Sequence[int], size: int, domain_of: Domains,
            one_machine: bool) -> tuple[int, ...]:
    if 1 + len(order) < size:
        raise NoEnsemble(f"{1 + len(order)} log servers, an ensemble needs {size}")
    try:
        return failure_domains.pick(size, order, domain_of, fixed=(claimant,), one_machine=one_machine,
                                    what="servers of a segment")
    except PlacementError as e:
        raise NoEnsemble(str(e)) from None


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
         size: int = limits.ENSEMBLE_SIZE, domain_of: Domains = failure_domains.unknown,
         one_machine: bool = False) -> tuple[int, ...]:
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
    # The servers of each machine take turns by the claimant's place: with two servers on
    # each machine, the logs whose preferred writers follow each other take the first and
    # the second server of the next machines in turn, so every server holds as many.
    groups: dict[str, list[int]] = {}
    for s in after:
        groups.setdefault(domain_of(s).machine, []).append(s)
    if len(groups) > 1:  # (on one machine, the pool's order as it is)
        after = [s for g in groups.values() for s in g[i % len(g):] + g[:i % len(g)]]
    return _placed(claimant, [*[s for s in after if s in live], *[s for s in after if s not in live]],
                   size, domain_of, one_machine)


def off_machines_of(lost: Iterable[int], live: Sequence[int], domain_of: Domains, one_machine: bool = False,
                    size: int = limits.ENSEMBLE_SIZE) -> list[int]:
    """`live` less every server on a machine where one of `lost` runs (pure). A copy that
    stopped answering is most often a machine that went quiet whole (paused, cut off): its
    other servers are still registered until their sessions expire, and a segment moved
    onto one of them stopped again a second later (issue 68: three ensemble changes in a
    row). Unless that leaves fewer than `size` (or the cluster runs on one machine): then
    `live` as it is."""
    gone = {domain_of(s).machine for s in lost}
    if one_machine or not gone:
        return list(live)
    off = [s for s in live if domain_of(s).machine not in gone]
    return off if len(off) >= size else list(live)
