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

from dataclasses import dataclass
from typing import Any

from catalog.routing import log_of


@dataclass(frozen=True)
class Handoff:
    """A shard handed from log `old` to log `new`: the hand-off record stands at position
    `at` of `old`, and the shard's records in `new` stand at `start` or after."""
    shard: int
    old: int
    at: int
    new: int
    start: int


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

    def log_of(self, shard: int) -> int:
        return self.of[shard]

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
    return LogMap(m.logs + n, m.of, m.version, m.handoffs, m.origins)


def to_json(m: LogMap) -> dict[str, Any]:
    return {"logs": m.logs, "of": list(m.of),
            "handoffs": [{"shard": h.shard, "old": h.old, "at": h.at, "new": h.new, "start": h.start}
                         for h in m.handoffs], **({"origins": list(m.origins)} if m.origins else {})}


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
    handoffs = []
    for h in d.get("handoffs", []):
        try:
            handoffs.append(Handoff(*(int(h[k]) for k in ("shard", "old", "at", "new", "start"))))
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"log map: handoffs: {h!r} lacks a shard, old, at, new or start") from None
    return LogMap(logs, tuple(of), version, tuple(handoffs), tuple(origins))
