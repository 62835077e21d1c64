"""A dataset's scope: the data center it is local to, or global (docs/operations.md, "Data
centers"). Pure.

The key-value store's shards are laid out in scopes. Global is the first range of shards,
0..G-1, carried by the logs no local scope names; each local scope (`midtown scope add DC
--shards N --logs L,...`) is a range of N shards taken from the top of the global range,
carried only by its logs, each kept in that data center (log/homes.py); `midtown scope
grow DC --logs L,...` gives it more of global's logs (more write capacity for it); `midtown
scope remove DC` gives its shards and logs back to global (remove). A strong dataset
is created in one scope (`midtown dataset create NAME --scope DC`) and its keys hash over
its scope's shards only (catalog/routing.py), a range it records when it is created: its
writes go through logs whose ensembles, ack quorum and writer stand in that data center,
so a local dataset never waits on another one. Shards of different scopes never share a
log: a hand-off (`shard handoff`, `cluster rebalance`) keeps a shard on its scope's logs.

A scope's range is fixed once laid out: a scope takes only shards no dataset's keys hash
over (so in practice, scopes are laid out before the global datasets are created), and a
scope is removed only once no dataset is in it, the last laid out first. The layout is kept in the key-value
topology (catalog/registry.py, /midtown/kv "scopes")."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from fleet.failure_domains import VALUE_RE

GLOBAL = "global"


class ScopeError(ValueError):
    """A scope that cannot be laid out or used as asked; the text names the argument."""


@dataclass(frozen=True)
class Scope:
    """Local scope `dc`: shards first..first+count-1, carried by logs `logs`, kept in data
    center `home` (`dc`, its name, until `midtown dataset fail-over` moves it:
    catalog/failover.py)."""
    dc: str
    first: int
    count: int
    logs: tuple[int, ...]
    home: str = ""

    @property
    def where(self) -> str:
        """The data center the scope is kept in now."""
        return self.home or self.dc

    def shards(self) -> range:
        return range(self.first, self.first + self.count)


Layout = tuple[Scope, ...]  # the local scopes, highest shards first: each taken from the top of global


def global_count(layout: Layout, shards: int) -> int:
    """How many shards global keeps (0..n-1)."""
    return shards - sum(s.count for s in layout)


def find(layout: Layout, name: str) -> Scope | None:
    return next((s for s in layout if s.dc == name), None)


def range_of(layout: Layout, name: str, shards: int) -> tuple[int, int]:
    """(first shard, count) of scope `name`; ScopeError naming --scope if it is none."""
    if name == GLOBAL:
        return 0, global_count(layout, shards)
    s = find(layout, name)
    if s is None:
        known = ", ".join([GLOBAL, *(x.dc for x in layout)])
        raise ScopeError(f"scope: {name!r} is not one of this cluster's scopes ({known}; midtown scope add "
                         "lays one out)")
    return s.first, s.count


def scope_of_shard(layout: Layout, shard: int) -> str:
    return next((s.dc for s in layout if shard in s.shards()), GLOBAL)


def scope_of_log(layout: Layout, log_id: int) -> str:
    return next((s.dc for s in layout if log_id in s.logs), GLOBAL)


def home_of_shard(layout: Layout, shard: int) -> str:
    """The data center a shard's scope is kept in ("" for global)."""
    return next((s.where for s in layout if shard in s.shards()), "")


def moved(layout: Layout, name: str, to: str) -> Layout:
    """`layout` with local scope `name` kept in data center `to` from now on."""
    return tuple(replace(s, home="" if to == s.dc else to) if s.dc == name else s for s in layout)


def answering(layout: Layout, shard: int, replicas: Iterable[int],
              dc_of: Mapping[int, str]) -> tuple[int, ...]:
    """The replicas of `shard` that answer coordinators, once scopes are laid out: those in
    a local scope's data center (`dc_of`: each storage node's), whose answers a write then
    waits for without leaving it (the others apply the log as it comes, no call waiting on
    them); every replica of a global shard, so that the one nearest the coordinator, in
    the writer's data center, answers first rather than two that may both be across data
    centers (catalog/routing.py answers_for). Empty: the rule without scopes (no layout,
    or none of a local shard's replicas in its data center: they answer as before, rather
    than none)."""
    if not layout:
        return ()
    home = home_of_shard(layout, shard)
    return tuple(r for r in replicas if dc_of.get(r) == home) if home else tuple(replicas)


def logs_of(layout: Layout, name: str, kv_logs: int) -> tuple[int, ...]:
    """The key-value logs (0..kv_logs-1) that carry scope `name`'s shards."""
    if name != GLOBAL:
        s = find(layout, name)
        return s.logs if s is not None else ()
    taken = {lg for s in layout for lg in s.logs}
    return tuple(lg for lg in range(kv_logs) if lg not in taken)


def groups(layout: Layout, shards: int, kv_logs: int) -> list[tuple[range, tuple[int, ...]]]:
    """(shards, logs) of every scope, global first: what catalog/log_map.py spread keeps
    apart."""
    out = [(range(global_count(layout, shards)), logs_of(layout, GLOBAL, kv_logs))]
    return out + [(s.shards(), s.logs) for s in layout]


def misplaced(layout: Layout, of: Sequence[int]) -> list[int]:
    """The shards carried by a log outside their scope (`of`: each shard's log)."""
    return [sh for sh, lg in enumerate(of) if scope_of_log(layout, lg) != scope_of_shard(layout, sh)]


def add(layout: Layout, dc: str, count: int, logs: Iterable[int], shards: int, kv_logs: int,
        homes: Mapping[int, str], used: Iterable[tuple[str, int, int]]) -> Layout:
    """`layout` with local scope `dc` of `count` shards (the top of global's) on `logs`.
    `homes`: each log's data center (log/homes.py); `used`: (dataset name, first shard,
    count) of every dataset. ScopeError naming the argument when it cannot be done."""
    if not VALUE_RE.match(dc):
        raise ScopeError(f"DC: {dc!r} is not a data center's name (letters, digits, '.', '_' and '-', "
                         "starting with a letter or digit)")
    if dc == GLOBAL:
        raise ScopeError(f"DC: {GLOBAL!r} is the scope of the logs no data center keeps; name a data center")
    if find(layout, dc) is not None:
        raise ScopeError(f"DC: scope {dc!r} exists already (midtown scope list)")
    g = global_count(layout, shards)
    if not 1 <= count < g:
        raise ScopeError(f"--shards: {count}, must be between 1 and {g - 1} (global keeps {g} shards now "
                         "and at least one)")
    logs = _global_logs_kept_in(layout, logs, kv_logs, homes, dc)
    taken = range(g - count, g)
    for name, first, n in used:
        n = n or shards  # a dataset made before scopes hashes over every shard
        if first < taken.stop and taken.start < first + n:
            raise ScopeError(f"--shards: dataset {name!r} hashes its keys over shards "
                             f"{first}..{first + n - 1}, "
                             f"and scope {dc!r} would take {taken.start}..{taken.stop - 1}: a scope takes "
                             "only shards no dataset uses (lay scopes out before the global datasets)")
    return (*layout, Scope(dc, g - count, count, logs))


def more_logs(layout: Layout, dc: str, logs: Iterable[int], kv_logs: int, homes: Mapping[int, str]) -> Layout:
    """`layout` with scope `dc` carried by `logs` too (`midtown scope grow DC --logs L,...`):
    each one of global's, kept in the data center the scope is kept in now (its hand-offs
    then spread the scope's shards over all its logs, and global's off the new ones).
    ScopeError naming the argument when it cannot be done."""
    s = find(layout, dc)
    if s is None:
        raise ScopeError(f"DC: no scope {dc!r} (midtown scope list; midtown scope add {dc} lays one out)")
    added = _global_logs_kept_in(layout, logs, kv_logs, homes, s.where, mine=s)
    return tuple(replace(x, logs=tuple(sorted({*x.logs, *added}))) if x.dc == dc else x for x in layout)


def remove(layout: Layout, dc: str, shards: int, used: Iterable[tuple[str, int, int]]) -> Layout:
    """`layout` without local scope `dc` (`midtown scope remove DC`): its shards and logs
    go back to global. Only a scope no dataset is in, and the last laid out (its shards
    are the top of global's: global's range stays one range, 0..G-1); ScopeError naming
    DC when it cannot be done. `used` as for add."""
    s = find(layout, dc)
    if s is None:
        raise ScopeError(f"DC: no scope {dc!r} (midtown scope list)")
    for name, first, n in used:
        n = n or shards
        if first < s.first + s.count and s.first < first + n:
            raise ScopeError(f"DC: dataset {name!r} is in scope {dc!r} (its keys hash over shards "
                             f"{first}..{first + n - 1}); a scope is removed only once no dataset is "
                             f"in it (midtown dataset drop {name}, or keep the scope)")
    last = min(layout, key=lambda x: x.first)
    if last.dc != dc:
        raise ScopeError(f"DC: scope {dc!r} was laid out before scope {last.dc!r}, whose shards lie "
                         f"between it and global's; remove {last.dc!r} first (scopes go back to global "
                         "from the last laid out)")
    return tuple(x for x in layout if x.dc != dc)


def _global_logs_kept_in(layout: Layout, logs: Iterable[int], kv_logs: int, homes: Mapping[int, str],
                         where: str, mine: Scope | None = None) -> tuple[int, ...]:
    """`logs`, sorted, once each is a key-value log of global's kept in `where` and global
    keeps another; ScopeError naming --logs if not (`mine`: the scope they are for)."""
    out = tuple(sorted(set(logs)))
    if not out:
        raise ScopeError("--logs: name at least one of the key-value store's logs")
    for lg in out:
        if not 0 <= lg < kv_logs:
            raise ScopeError(f"--logs: log {lg} is not one of the key-value store's logs 0..{kv_logs - 1} "
                             "(midtown log add gives it more)")
        if mine is not None and lg in mine.logs:
            raise ScopeError(f"--logs: log {lg} carries scope {mine.dc!r} already")
        if scope_of_log(layout, lg) != GLOBAL:
            raise ScopeError(f"--logs: log {lg} carries scope {scope_of_log(layout, lg)!r} already")
        if homes.get(lg, "") != where:
            kept = f"is kept in {homes[lg]!r}" if homes.get(lg) else "has no home"
            raise ScopeError(f"--logs: log {lg} {kept}; a scope's logs are kept in its data center "
                             f"(midtown log home {lg} {where})")
    if not set(logs_of(layout, GLOBAL, kv_logs)) - set(out):
        raise ScopeError("--logs: global would keep none of the key-value store's logs (midtown log add "
                         "gives it more)")
    return out


def to_json(layout: Layout) -> list[dict]:
    return [{"dc": s.dc, "first": s.first, "count": s.count, "logs": list(s.logs),
             **({"home": s.home} if s.home else {})} for s in layout]


def from_json(d: object) -> Layout:
    if not isinstance(d, list):
        return ()
    return tuple(Scope(str(s["dc"]), int(s["first"]), int(s["count"]), tuple(int(x) for x in s["logs"]),
                       str(s.get("home", ""))) for s in d)
