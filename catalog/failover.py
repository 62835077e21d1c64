"""A local scope failed over to another data center (`midtown dataset fail-over NAME --to DC`;
docs/operations.md, "A data center lost"). Pure: what to write and what it loses.

A local scope's logs have their ensembles, ack quorum and writer in its home data center
(log/homes.py), and its replicas elsewhere apply them asynchronously. With the home lost,
nothing of those logs past what the other data centers applied can be read: the fail-over
cuts each log there and starts it again in the new home. Per log:

- the cut: the highest position at which the new home's replicas of the scope's shards,
  taken together, hold every shard (the replicas standing exactly there are the
  *sources*). Their state is the state after exactly that prefix of the log;
- what is lost: every position past the cut. Those a surviving replica applied (in any
  data center) were acknowledged and are lost for sure; past them, what the home
  acknowledged that no surviving replica heard stays on the home's log servers, kept aside
  (the cut seals the home's segment below it: log/metadata.py cut), never applied;
- the condemned: every other replica of the log's shards (behind the cut, past it, or not
  reachable to say) takes a copy from a source before it applies the log again
  (storage_node/node.py; it stops to do so when it learns it).

The log's metadata is cut and raised to a new epoch (its old writer can change nothing
more), its truncation point raised past the cut (nobody reads below it from servers that
are gone), the scope's logs given the new home, the scope kept there, and this record kept
in the key-value topology: all in one ZooKeeper transaction (drivers/failover.py)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from catalog import scopes
from catalog.scopes import Layout, Scope
from log.metadata import LogMetadata


class FailoverError(ValueError):
    """A fail-over that cannot be done as asked; the text names the argument."""


@dataclass(frozen=True)
class Replica:
    """A storage node as the fail-over sees it: its data center, and per log its next
    position to apply and the log time of the last it applied (None: it did not answer)."""
    dc: str
    positions: Mapping[int, tuple[int, int]] | None


@dataclass(frozen=True)
class LogCut:
    log: int
    end: int  # the last position kept: the log goes on at end + 1
    last_ts: int  # the log time of the entry at `end`
    heard: int  # the highest position a surviving replica applied (>= end)
    sources: tuple[int, ...]  # the replicas standing exactly at the cut
    segment: int  # the epoch of the log's last segment then, and its servers (what the home
    servers: tuple[int, ...]  # kept past the cut is read from them: drivers/failover.py kept_aside)

    @property
    def lost_for_sure(self) -> int:
        """Positions acknowledged (a surviving replica applied them) past the cut."""
        return self.heard - self.end


@dataclass(frozen=True)
class Plan:
    scope: str
    origin: str  # the home it leaves
    to: str
    cuts: tuple[LogCut, ...]
    condemned: tuple[int, ...]  # storage nodes to take a copy from a source

    def to_json(self) -> dict:
        return {"scope": self.scope, "from": self.origin, "to": self.to,
                "logs": [{"log": c.log, "end": c.end, "last_ts": c.last_ts, "heard": c.heard,
                          "sources": list(c.sources), "segment": c.segment, "servers": list(c.servers)}
                         for c in self.cuts],
                "condemned": list(self.condemned)}


def check(layout: Layout, name: str, dataset_scope: str, to: str, known_dcs: Iterable[str]) -> Scope:
    """The local scope dataset `name` (of scope `dataset_scope`) would leave, once a fail-over
    of it to `to` makes sense; FailoverError naming the argument if not."""
    if dataset_scope == scopes.GLOBAL:
        raise FailoverError(f"NAME: dataset {name!r} is global: its logs span data centers and keep their "
                            "writes through the loss of one; only a local dataset fails over")
    scope = scopes.find(layout, dataset_scope)
    if scope is None:
        raise FailoverError(f"NAME: dataset {name!r} is in scope {dataset_scope!r}, which this cluster does "
                            "not lay out")
    known = sorted({d for d in known_dcs if d})
    if to not in known:
        raise FailoverError(f"--to: {to!r} is not a data center of this cluster (data centers: "
                            f"{', '.join(known) or 'none named'})")
    if to == scope.where:
        raise FailoverError(f"--to: scope {scope.dc!r} (dataset {name!r}) is kept in {to!r} already")
    return scope


def reachable_home(scope: Scope, registered_dcs: Iterable[str]) -> str | None:
    """Why the scope's home still looks reachable (a log server there is registered: its
    writer may still acknowledge writes), or None."""
    n = sum(1 for d in registered_dcs if d == scope.where)
    if not n:
        return None
    return (f"{scope.where!r} is reachable: {n} of its log servers are registered in ZooKeeper, so its "
            f"writer may still acknowledge writes of scope {scope.dc!r}; a fail-over now loses every write "
            f"{scope.where!r} acknowledges after the new home's replicas stop reading (reported then, kept "
            "aside on its servers); --force does it anyway")


def plan(scope: Scope, to: str, holders: Mapping[int, Mapping[int, Iterable[int]]],
         replicas: Mapping[int, Replica], metas: Mapping[int, LogMetadata]) -> Plan:
    """The fail-over of `scope` to `to`. `holders`: per log of the scope, the storage nodes
    holding one of the shards it carries, with those shards; `replicas`: every such node as
    seen now, and any other that answered (a node tails a log whose shards it no longer
    holds: what it applied was acknowledged too, and past the cut is lost for sure: the
    whole-cluster simulation's seed 194, a node at 27 holding none of the scope's shards,
    25..27 reported as nothing lost); `metas`: each log's metadata. FailoverError naming
    --to when the new home's replicas cannot restart a log."""
    cuts = []
    condemned: set[int] = set()
    for lg in scope.logs:
        held = holders.get(lg, {})
        nodes = sorted(held)
        at = {n: p[lg] for n in nodes if (p := replicas[n].positions) is not None and lg in p}
        there = {n: at[n] for n in at if replicas[n].dc == to}
        if not there:
            raise FailoverError(f"--to: no storage node in {to!r} that answers holds a shard of log {lg} "
                                f"(scope {scope.dc!r}): the new home must hold the scope's data")
        end, last_ts = _cut(lg, there, held)
        sources = tuple(n for n in nodes if n in at and at[n][0] == end + 1)
        # What the home kept past the cut is read from its last segment's servers: the cut
        # may stand at or below an earlier segment's end (or below the first: nothing of the
        # log reached the new home), where no server holds what came after
        seg = metas[lg].segments[-1] if metas[lg].segments else None
        every = {n: p[lg] for n, r in replicas.items() if (p := r.positions) is not None and lg in p}
        cuts.append(LogCut(lg, end, last_ts, max(_heard(every, there), end), sources, seg.epoch if seg else 0,
                           seg.replicas if seg else ()))
        condemned |= _condemned(nodes, sources, at)
    return Plan(scope.dc, scope.where, to, tuple(cuts), tuple(sorted(condemned)))


def _heard(at: Mapping[int, tuple[int, int]], there: Mapping[int, tuple[int, int]]) -> int:
    """The highest position a node that answered applied (`at`: every one; `there`: the
    new home's, which alone decide the cut), wherever it is: past the cut, an acknowledged
    write lost for sure, which the report must count."""
    return max(p for p, _ in at.values()) - 1


def _condemned(nodes: Iterable[int], sources: Iterable[int],
               at: Mapping[int, tuple[int, int]]) -> set[int]:
    """The replicas that must take a copy from a source: every one not standing exactly at
    the cut (`at`: where the answering ones stand): behind it, past it with writes the log
    no longer has, or silent."""
    return set(nodes) - set(sources)


def _cut(lg: int, there: Mapping[int, tuple[int, int]], held: Mapping[int, Iterable[int]]) -> tuple[int, int]:
    """(position, its log time): the highest at which the new home's replicas standing
    exactly there hold every shard of the log (`held`: node -> its shards of the log)."""
    needed = {sh for shards in held.values() for sh in shards}
    for nxt in sorted({p for p, _ in there.values()}, reverse=True):
        standing = [n for n, (p, _) in there.items() if p == nxt]
        if needed <= {sh for n in standing for sh in held.get(n, ())}:
            return nxt - 1, max(there[n][1] for n in standing)
    where = ", ".join(f"node {n} at {p - 1}" for n, (p, _) in sorted(there.items()))
    raise FailoverError(f"--to: the new home's replicas of log {lg} ({where}) hold the scope's shards "
                        "only at different positions: none of its positions has a copy of every shard; "
                        "add replicas there or wait until they agree")


def record(plan: Plan, at_ms: int, hold: str = "") -> dict:
    """What the key-value topology keeps of a fail-over (`scope list`, and the condemned
    nodes' rule); `hold`: the ZooKeeper node that held its replicas where they said they
    stand (storage_node/holds.py), which its transaction took away."""
    return {**plan.to_json(), "at_ms": at_ms, "hold": hold}


def written(records: Iterable[Mapping], hold: str) -> bool:
    """Whether the fail-over that held replicas by `hold` was written (else it was given up)."""
    return any(r.get("hold") == hold for r in records)


def cuts_of(records: Iterable[Mapping], log: int) -> list[tuple[int, int]]:
    """The cuts of `log` the records made: (the last position kept, the epoch of the log's
    last segment then)."""
    return [(int(c["end"]), int(c.get("segment", 0))) for r in records for c in r.get("logs", ())
            if int(c["log"]) == log]


def before_cut(cuts: Iterable[tuple[int, int]], position: int, epoch: int) -> bool:
    """Whether an entry at `position` written at `epoch` is one its log no longer has (`cuts`:
    the log's, cuts_of): past a cut, by a writer of before it (the log went on at end + 1
    with writers of higher epochs than any segment it had). A Read stream opened before the
    fail-over may still bring such entries from the old home's writer."""
    return any(position > end and epoch <= segment for end, segment in cuts)


def condemned(records: Iterable[Mapping], log: int | None = None) -> set[int]:
    """The storage nodes that must take a copy before applying again, by the records kept
    (of `log`'s shards: those of the records that cut it). Only their copies of the cut
    logs' shards are wrong; of every other shard they hold the log's state."""
    return {int(n) for r in records if log is None or log in cut_logs([r])
            for n in r.get("condemned", ())}


def cut_logs(records: Iterable[Mapping], node: int | None = None) -> set[int]:
    """The logs the records cut (those that condemned `node`): a condemned node takes its
    shards of them again (storage_node/rebuild.py retake)."""
    return {int(c["log"]) for r in records
            if node is None or node in {int(n) for n in r.get("condemned", ())} for c in r.get("logs", ())}


def pardoned(records: Iterable[Mapping], node: int) -> list[dict]:
    """The records with `node` off their condemned lists (it took its copy)."""
    return [{**r, "condemned": [n for n in r.get("condemned", ()) if int(n) != node]} for r in records]
