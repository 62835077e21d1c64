"""A log's home: the data center a log is kept in (docs/log.md, "A log's home"). Pure.

A log with a home is written only by a log server of that data center, and every segment
it opens from then on has its ensemble there (spread over the data center's zones and
machines by the placement rule), so its ack quorum never waits on another data center:
what a dataset local to a data center stands on (docs/architecture.md, "Data centers").
A log without one is written and copied anywhere, as before homes.

Set by the operator (`midtown log home LOG DC`, log/zk.py set_home), refused unless the
data center holds an ensemble's worth of the pool's servers on as many machines. A writer
outside its log's new home gives the log up; a writer in it moves its open segment off
servers outside it (an ensemble change, as for servers that share a machine); sealed
segments stay where they are (their entries are read, and truncated, as before)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from fleet import failure_domains
from fleet.failure_domains import Domains
from log import limits

Homes = Mapping[int, str]  # log id -> data center (a log missing: no home)


def home_of(homes: Homes, log_id: int) -> str:
    """The log's data center ("" when it has none)."""
    return homes.get(log_id, "")


def in_home(servers: Iterable[int], log_id: int, homes: Homes, domain_of: Domains) -> list[int]:
    """Those of `servers` (in their order) that may hold the log's new segments: the ones
    in its home, or all of them when it has none."""
    home = home_of(homes, log_id)
    return [s for s in servers if not home or domain_of(s).dc == home]


def may_write(server: int, log_id: int, homes: Homes, domain_of: Domains) -> bool:
    """Whether `server` may write the log (claim it, or keep writing it)."""
    home = home_of(homes, log_id)
    return not home or domain_of(server).dc == home


def outside(replicas: Iterable[int], log_id: int, homes: Homes, domain_of: Domains) -> list[int]:
    """The replicas of a segment that lie outside the log's home (none without one)."""
    inside = set(in_home(replicas, log_id, homes, domain_of))
    return [r for r in replicas if r not in inside]


def rank(pool: Sequence[int], log_id: int, server: int, homes: Homes, domain_of: Domains,
         prefers: Homes | None = None) -> int:
    """The server's rank in the log's preferred order (0 writes it first, log/election.py):
    the pool's order rotated by the log's id, among the servers of its home only, those of
    its preferred data center (`prefers`) first."""
    eligible = in_home(pool, log_id, homes, domain_of)
    assert server in eligible, (server, log_id)
    n = len(eligible)
    rotated = [eligible[(log_id + i) % n] for i in range(n)]
    pref = (prefers or {}).get(log_id, "")
    if pref:
        rotated = ([s for s in rotated if domain_of(s).dc == pref]
                   + [s for s in rotated if domain_of(s).dc != pref])
    return rotated.index(server)


def yields(server: int, log_id: int, prefers: Homes, domain_of: Domains, up: Iterable[int]) -> bool:
    """Whether the log's writer `server` gives the log up for its preferred data center:
    it has one, the writer is not there, and a server there is `up` (registered, staying)."""
    pref = prefers.get(log_id, "")
    return bool(pref) and domain_of(server).dc != pref and any(
        domain_of(s).dc == pref for s in up if s != server)


def check_prefer(log_id: int, dc: str, logs: int, pool: Sequence[int], domain_of: Domains,
                 homes: Homes) -> str | None:
    """What is wrong with preferring data center `dc` ("" clears it) for log `log_id`'s
    writer, naming the argument; None when it can be done."""
    if not 0 <= log_id < logs:
        return f"LOG: {log_id}, this cluster has logs 0..{logs - 1}"
    if not dc:
        return None
    home = homes.get(log_id, "")
    if home and home != dc:
        return (f"LOG: log {log_id} is kept in {home!r}, so its writer is there (midtown log home "
                f"{log_id} --clear lets it go anywhere first)")
    by_dc = failure_domains.data_centers(pool, domain_of)
    return _none_in(dc, by_dc) if dc not in by_dc else None


def _none_in(dc: str, by_dc: Mapping[str, list[int]]) -> str:
    known = sorted(d for d in by_dc if d)
    return (f"DC: {dc!r} holds none of the pool's log servers "
            f"(data centers: {', '.join(known) or 'none named'})")


def check_home(log_id: int, dc: str, logs: int, pool: Sequence[int], domain_of: Domains,
               one_machine: bool = False, size: int = limits.ENSEMBLE_SIZE) -> str | None:
    """What is wrong with giving log `log_id` the home `dc` ("" clears it), naming the
    argument; None when it can be done. On a cluster that says it runs on one machine,
    the servers' count alone."""
    if not 0 <= log_id < logs:
        return f"LOG: {log_id}, this cluster has logs 0..{logs - 1}"
    if not dc:
        return None
    by_dc = failure_domains.data_centers(pool, domain_of)
    if dc not in by_dc:
        return _none_in(dc, by_dc)
    there = by_dc[dc]
    spread = len(failure_domains.machines(there, domain_of))
    if len(there) < size or (spread < size and not one_machine):
        return (f"DC: {dc!r} holds {len(there)} of the pool's log servers on {spread} machine(s); "
                f"a segment's ensemble needs {size} on as many machines")
    return None
