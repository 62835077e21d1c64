"""Which key-value log carries each shard: the shard -> log map. Pure; ZooKeeper keeps it
(catalog/registry.py, /midtown/log_map, versioned, each version also written to its
history), and coordinators, storage nodes and the SDK's routing read it as they read the
replica sets.

A cluster starts with `shard mod logs` (catalog/routing.py log_of): its map is that rule,
version -1, until a change is written. A shard moves from one log to another only by a
hand-off at one position of its old log (docs/log.md, "Adding logs and handing shards
over"): the map then names its new log and keeps the shard's last hand-off (where it
stands in the old log, and from which position of the new log the shard's records come).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from catalog.routing import log_of


@dataclass(frozen=True)
class Handoff:
    """A shard handed from log `old` to log `new`: the hand-off record stands at position
    `at` of `old`, and the shard's records in `new` stand at `start` or after. In `new` the
    shard is at `generation` (log/seals.py); a write at position q of it gets version
    q + 1 + `version_base`, and its log time is at least `ts_floor`
    (storage_node/handoff.py: what every replica computes from the hand-off record)."""
    shard: int
    old: int
    at: int
    new: int
    start: int
    generation: int = 0
    version_base: int = 0
    ts_floor: int = 0


@dataclass(frozen=True)
class Handing:
    """A hand-off under way (docs/log.md, step 7): shard `shard` goes from log `old` to log
    `new`, and its hand-off record is in `old` at or after position `scan_from` (the driver
    that takes it up again looks for it there; once found, at `at`, stamped `ts`, naming
    `start` of the new log: -1 until then); its writes wait until it is done. The old log
    is not truncated past `scan_from` until the record is found (the driver holds its
    truncation point there, log/zk.py hold_truncation), and the new log's truncation waits
    for the shard's holders (storage_node/bookkeeping.py)."""
    shard: int
    old: int
    new: int
    scan_from: int
    at: int = -1
    ts: int = 0
    start: int = 0


@dataclass(frozen=True)
class LogMap:
    """`logs`: the key-value logs (0..logs-1); `of[s]`: the log that carries shard s;
    `handoffs`: each handed-over shard's last hand-off; `version`: ZooKeeper's version of
    the node it was read from (-1: none written, `shard mod logs`); `origins[s]`: the log
    shard s was in before its first hand-off (empty: `of`, no shard was ever handed over).
    A replica that has applied none of a shard's hand-offs takes its records from there."""
    logs: int
    of: tuple[int, ...]
    version: int = -1
    handoffs: tuple[Handoff, ...] = ()
    origins: tuple[int, ...] = ()
    handing: tuple[Handing, ...] = ()

    def log_of(self, shard: int) -> int:
        return self.of[shard]

    def last_handoff(self, shard: int) -> Handoff | None:
        """The shard's last hand-off, if it is in the log that hand-off took it to."""
        h = next((h for h in self.handoffs if h.shard == shard), None)
        return h if h is not None and h.new == self.of[shard] else None

    def stint(self, shard: int) -> tuple[int, int, int]:
        """(generation, version base, time floor) of the shard in its log now."""
        h = self.last_handoff(shard)
        return (h.generation, h.version_base, h.ts_floor) if h is not None else (0, 0, 0)

    def may_carry(self, shard: int, log_id: int) -> bool:
        """Whether `log_id` carries, or carried, `shard` as far as this map knows (its log,
        its first one, either end of its last hand-off or of one under way)."""
        ends = [(h.old, h.new) for h in self.handoffs if h.shard == shard]
        ends += [(h.old, h.new) for h in self.handing if h.shard == shard]
        return log_id in (self.of[shard], self.origin(shard), *(x for e in ends for x in e))

    def handing_of(self, shard: int) -> Handing | None:
        """The shard's hand-off under way, if any: its writes wait for it."""
        return next((h for h in self.handing if h.shard == shard), None)

    def origin(self, shard: int) -> int:
        """The log shard `shard` was in before it was ever handed over."""
        return self.origins[shard] if self.origins else self.of[shard]

    def shards_of_log(self, log_id: int) -> tuple[int, ...]:
        """The shards that travel in `log_id`."""
        return tuple(s for s, lg in enumerate(self.of) if lg == log_id)

    def logs_of(self, shards: Any) -> tuple[int, ...]:
        """The logs that carry one of `shards`, sorted."""
        return tuple(sorted({self.of[s] for s in shards}))


def first(shards: int, logs: int) -> LogMap:
    """The map of a cluster no change was written for: shard mod logs."""
    return LogMap(logs, tuple(log_of(s, logs) for s in range(shards)))


def with_more_logs(m: LogMap, n: int, service_logs: int) -> LogMap:
    """`m` with `n` more key-value logs (the next `n` of the log service's `service_logs`),
    no shard on them yet (same version: the write checks it). ValueError naming N when
    there are not that many."""
    if n < 1:
        raise ValueError(f"N: {n}, must be 1 or more")
    if m.logs + n > service_logs:
        raise ValueError(f"N: the key-value store uses {m.logs} of the log service's {service_logs} logs, "
                         f"so at most {service_logs - m.logs} more can be added (growing the log "
                         f"service itself is not built yet: docs/log.md)")
    return LogMap(m.logs + n, m.of, m.version, m.handoffs, m.origins, m.handing)


def spread(m: LogMap, max_handoffs: int | None = None,
           groups: Sequence[tuple[Sequence[int], Sequence[int]]] | None = None) -> list[tuple[int, int, int]]:
    """The hand-offs (shard, from log, to log) that leave every shard on one of its group's
    logs and every log carrying as many of its group's shards as the others to within one
    (`cluster rebalance`), as few as that takes. `groups`: (shards, logs) pairs, the scopes
    (catalog/scopes.py groups; None: one group, every shard over every log). The hand-offs
    under way first (they are finished, not undone), then each shard on a log outside its
    group to the emptiest of its group's, then, while two logs of a group differ by more
    than one, the highest shard of the fullest log to the emptiest (the lowest log on a
    tie). At most `max_handoffs` (None: all)."""
    of = list(m.of)
    plan = [(h.shard, h.old, h.new) for h in sorted(m.handing, key=lambda h: h.shard)]
    for shard, _, new in plan:
        of[shard] = new
    if groups is None:
        groups = [(range(len(of)), range(m.logs))]

    def count(shards: Sequence[int], lg: int) -> int:
        return sum(1 for s in shards if of[s] == lg)

    for shards, logs in groups:
        for shard in shards:
            if of[shard] not in logs:
                to = min(logs, key=lambda lg: (count(shards, lg), lg))
                plan.append((shard, of[shard], to))
                of[shard] = to
    for shards, logs in groups:
        while max_handoffs is None or len(plan) < max_handoffs:
            counts = {lg: count(shards, lg) for lg in logs}
            full = max(logs, key=lambda lg: (counts[lg], -lg))
            empty = min(logs, key=lambda lg: (counts[lg], lg))
            if counts[full] - counts[empty] <= 1:
                break
            moved = {p[0] for p in plan}
            there = [s for s in shards if of[s] == full]
            shard = max([s for s in there if s not in moved] or there)
            of[shard] = empty
            plan.append((shard, full, empty))
    return plan[:max_handoffs] if max_handoffs is not None else plan


def to_json(m: LogMap) -> dict[str, Any]:
    return {"logs": m.logs, "of": list(m.of), "handoffs": [dataclasses.asdict(h) for h in m.handoffs],
            **({"origins": list(m.origins)} if m.origins else {}),
            **({"handing": [dataclasses.asdict(h) for h in m.handing]} if m.handing else {})}


def from_json(d: Any, version: int) -> LogMap:
    """The map as written (ValueError naming the field that is wrong: a map no writer of
    Midtown's made)."""
    if not isinstance(d, dict):
        raise ValueError("log map: not a JSON object")
    logs: Any = d.get("logs")
    of: Any = d.get("of")
    if not isinstance(logs, int) or logs < 1:
        raise ValueError(f"log map: logs: {logs!r}, must be a number of logs, 1 or more")
    origins: Any = d.get("origins", [])
    for name, shards in (("of", of), ("origins", origins or of)):
        if not isinstance(shards, list) or len(shards) != len(of or ()) or not shards or not all(
                isinstance(x, int) and not isinstance(x, bool) and 0 <= x < logs for x in shards):
            raise ValueError(f"log map: {name}: each shard's log must be one of 0..{logs - 1}")
    handoffs = tuple(_each(Handoff, d, "handoffs"))
    handing = tuple(_each(Handing, d, "handing"))
    return LogMap(logs, tuple(of), version, handoffs, tuple(origins), handing)


def _each(cls: Any, d: dict[str, Any], name: str) -> Iterator[Any]:
    """Each `cls` of the list `name` of `d`: its fields numbers, the required ones there."""
    fields = dataclasses.fields(cls)
    for h in d.get(name, []):
        try:
            yield cls(**{f.name: int(h[f.name]) for f in fields
                         if f.name in h or f.default is dataclasses.MISSING})
        except (KeyError, TypeError, ValueError):
            need = ", ".join(f.name for f in fields if f.default is dataclasses.MISSING)
            raise ValueError(f"log map: {name}: {h!r} lacks one of {need}") from None
