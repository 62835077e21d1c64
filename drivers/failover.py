"""The driver of a local scope's fail-over (`midtown dataset fail-over NAME --to DC`): it reads
what the plan needs (catalog/failover.py), writes it in one ZooKeeper transaction, and
waits for the new home's log servers to write the scope's logs. A write that lost a race
with another change is made again from fresh reads; a driver killed before its write
changed nothing, and after it, everything (the servers and storage nodes act on what
ZooKeeper holds)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import grpc
from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, KazooException, NoNodeError

from catalog import datasets, failover, registry
from catalog.failover import FailoverError, Plan, Replica
from fleet import machines
from log import homes
from log import zk as zkpaths
from runtime import world

TRIES = 5
WAIT_S = 0.2


# statuses(hold, logs): each storage node's Status answer (those that answer), asked with
# the fail-over's hold on `logs` (NodeStatusRequest.hold, hold_logs)
Statuses = Callable[[str, Sequence[int]], Mapping[int, Any]]


def fail_over(zk: KazooClient, name: str, to: str, force: bool, statuses: Statuses,
              progress: Callable[[str], None] = lambda _: None) -> Plan:
    """Fail dataset `name`'s scope over to data center `to`; the plan written.
    FailoverError naming the argument when it cannot be done.

    The replicas are held where they say they stand until the plan is written or given up
    (registry.hold_replicas; storage_node/holds.py): a cut made where a source stands holds
    only while the source stays there, and one cut off from ZooKeeper cannot learn of the
    fail-over before it applies more of the old home's log (a Read stream keeps bringing
    what the old writer committed)."""
    hold = _Hold(zk, progress)
    try:
        for _ in range(TRIES):
            plan, version, writes = _prepare(zk, name, to, force, statuses, hold)
            try:
                registry.fail_over(zk, version, plan, world.wall_ms(), writes, hold.path)
            except BadVersionError:
                progress("the cluster changed while the fail-over was read: reading again")
                continue
            except NoNodeError:  # the hold went with this session: the replicas may have moved on
                progress("the hold on the replicas was lost (ZooKeeper session): asking them again")
                hold.path = ""
                continue
            hold.path = ""  # taken away by the transaction
            return plan
        raise FailoverError(f"NAME: the cluster kept changing under the fail-over of {name!r} "
                            f"({TRIES} tries)")
    finally:
        hold.release()


class _Hold:
    """The fail-over's hold on its replicas (registry.hold_replicas), taken as the first
    plan is made and kept for the next tries while it holds the same logs. Letting it go is
    best-effort: one that cannot be deleted (ZooKeeper out of reach) ends with the driver's
    session, and the error that ended the fail-over is the one reported."""

    def __init__(self, zk: KazooClient, progress: Callable[[str], None]) -> None:
        self.zk = zk
        self.progress = progress
        self.path = ""
        self.logs: tuple[int, ...] = ()

    def on(self, logs: tuple[int, ...]) -> str:
        if not self.path or self.logs != logs:
            self.release()
            self.path, self.logs = registry.hold_replicas(self.zk, logs), logs
        return self.path

    def release(self) -> None:
        if self.path:
            path, self.path = self.path, ""
            try:
                registry.release_hold(self.zk, path)
            except KazooException as e:
                self.progress(f"the hold on the replicas ({path}) ends with this ZooKeeper "
                              f"session: not deleted ({type(e).__name__})")


def _prepare(zk: KazooClient, name: str, to: str, force: bool, statuses: Statuses,
             hold: _Hold) -> tuple[Plan, int, list[zkpaths.Write]]:
    """The plan, the key-value topology's version it was made at, and the log service's
    writes; made while `hold` holds the scope's replicas."""
    d = datasets.get(zk, name)
    if d is None:
        raise FailoverError(f"NAME: no dataset {name!r} (midtown dataset list)")
    got = registry.read_kv_versioned(zk)
    topo = zkpaths.read_topology(zk)
    if got is None or topo is None:
        raise FailoverError("no key-value topology in this cluster (midtown cluster init)")
    kv, version = got
    log_where = machines.recorded(zk, machines.LOG_SERVERS)
    node_where = machines.recorded(zk, machines.STORAGE_NODES)
    scope = failover.check(kv.scopes, name, d.scope, to,
                           [w.dc for w in (*log_where.values(), *node_where.values())])
    pool = [s for s in topo.log_servers if s not in zkpaths.leaving(zk)]
    for lg in scope.logs:
        wrong = homes.check_home(lg, to, topo.logs, pool, machines.domains(zk, machines.LOG_SERVERS),
                                 machines.one_machine(zk))
        if wrong:
            raise FailoverError("--to: " + wrong.removeprefix("DC: "))
    registered = [log_where[s].dc for s in zkpaths.servers(zk) if s in log_where]
    reachable = failover.reachable_home(scope, registered)
    if reachable and not force:
        raise FailoverError(reachable)
    sets = registry.read_replica_sets(zk, kv)
    m = registry.read_log_map(zk, kv, topo.logs)
    holders: dict[int, dict[int, set[int]]] = {}  # log -> node -> its shards of the log
    for shard in scope.shards():
        for n in sets.of(shard):
            holders.setdefault(m.of[shard], {}).setdefault(n, set()).add(shard)
    logs = tuple(sorted(scope.logs))
    answers = statuses(hold.on(logs), logs)
    # the holders, answering or not, and every other node that answered (what it applied
    # counts as heard: catalog/failover.py plan)
    replicas = {n: Replica(node_where[n].dc if n in node_where else "", _positions(answers.get(n)))
                for n in {*(n for held in holders.values() for n in held), *answers}}
    metas = {lg: zkpaths.read_metadata(zk, lg) for lg in scope.logs}
    plan = failover.plan(scope, to, holders, replicas, {lg: meta for lg, (meta, _) in metas.items()})
    writes = [w for c in plan.cuts for w in zkpaths.cut_writes(zk, *metas[c.log], c.end, c.last_ts)]
    return plan, version, [*writes, zkpaths.homes_moved(zk, scope.logs, to)]


def _positions(status: Any) -> dict[int, tuple[int, int]] | None:
    """A node's positions as its Status says them; None when it did not answer, or answered
    while it starts: a node bootstrapping or rebuilding (its store lost) has no state yet
    that its positions describe (the whole-cluster simulation's seed 21: a node rebuilding
    after its disk was lost said position 0, and was taken for a source standing at -1)."""
    if status is None or not status.started:
        return None
    times = list(status.log_times) or [0] * len(status.log_positions)
    return {lg: (int(p), int(ts)) for lg, (p, ts) in enumerate(zip(status.log_positions, times))}


def writing_in(zk: KazooClient, plan: Plan) -> list[int]:
    """The scope's logs not yet written by a log server of the new home."""
    where = machines.recorded(zk, machines.LOG_SERVERS)
    out = []
    for cut in plan.cuts:
        w = zkpaths.read_writer(zk, cut.log)
        if not (w and zkpaths.writer_is_live(zk, cut.log) and where.get(int(w["server"])) is not None
                and where[int(w["server"])].dc == plan.to):
            out.append(cut.log)
    return out


def scope_datasets(zk: KazooClient, scope: str) -> list[str]:
    """The datasets of `scope` (all fail over together: they share its shards)."""
    return [n for n in datasets.names(zk) if (d := datasets.get(zk, n)) is not None and d.scope == scope]


def report(plan: Plan, moved: list[str]) -> dict[str, Any]:
    """What the command prints: per log, where it was cut and what is lost for sure."""
    return {"scope": plan.scope, "from": plan.origin, "to": plan.to, "datasets": moved,
            "logs": [{"log": c.log, "cut_at": c.end,
                      "lost": f"{c.end + 1}..{c.heard}" if c.lost_for_sure else "",
                      "lost_entries": c.lost_for_sure, "sources": list(c.sources)} for c in plan.cuts],
            "rebuilt": list(plan.condemned),
            "unheard": (f"what {plan.origin!r} acknowledged past what any surviving replica applied stays on "
                        f"its log servers, kept aside, never applied (midtown scope list says how far it "
                        "goes once they answer)")}


def kept_aside(zk: KazooClient, tail: Callable[[str, int, int], int],
               records: list[dict]) -> dict[str, list[dict]]:
    """Per failed-over scope, its latest fail-over's logs: where each was cut, what a
    survivor applied past the cut (lost for sure) and what the old home's log servers hold
    past it, kept aside and never applied ("" when they hold nothing past it; "unknown", or
    "a..b at least", while some of them do not answer). `tail(addr, log, segment epoch)`: a
    log server's last stored position in that segment of the log."""
    latest = {r["scope"]: r for r in records}
    servers = zkpaths.servers(zk)
    out: dict[str, list[dict]] = {}
    for scope, r in latest.items():
        rows = []
        for c in r["logs"]:
            held = []
            for sid in c.get("servers", ()):  # the log's last segment's servers then (re-replication
                try:                           # may name others in the metadata since)
                    at = servers.get(sid)
                    held.append(tail(at["addr"], c["log"], c["segment"]) if at else None)
                except grpc.RpcError:  # a server that does not answer says nothing
                    held.append(None)
            most = max((h for h in held if h is not None), default=c["end"])
            past = f"{c['end'] + 1}..{most}" if most > c["end"] else ""
            aside = (past if None not in held else f"{past} at least" if past else "unknown")
            rows.append({"log": c["log"], "cut_at": c["end"], "lost_for_sure": c["heard"] - c["end"],
                         "kept_aside": aside, "from": r["from"], "to": r["to"]})
        out[scope] = rows
    return out
