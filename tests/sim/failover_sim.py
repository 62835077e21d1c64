"""A data center lost and a local scope failed over, in the whole cluster's simulation
(tests/sim/faults.py Faults.failover; docs/operations.md, "A data center lost").

The cluster has nine log servers, three in each data center (server s in dc<s mod 3>),
the storage nodes as always (node n in dc<n mod 3>: every shard has a replica in each
data center, nodes 0 and 3 sharing dc0's machine) and the coordinator in dc1. Before the
datasets, the operator keeps log 1 in dc0 (`midtown log home`) and lays out scope dc0 on
it (`midtown scope add`: the top two shards); the local dataset `loc` is made in it, and an
application writes it (an increment of a key of its own per write) beside the global
dataset's clients. A few seconds in, dc0 loses power whole (its log servers and storage
nodes: what they had not synced is lost); the operator fails the scope over to dc1 or
dc2 with the real driver (drivers/failover.py, with --force half the time, else once the
home's log servers are gone from ZooKeeper), and a little later dc0 comes back: its nodes
learn they are condemned, stop, take a copy and apply the log again.

Checked at the end (check_failover, with the whole cluster's checks):
- the log's committed positions are the positions up to the cut, as the log held them
  before (`precut`), then the new home's: the model applies those and every replica of
  every shard ends equal to it (a condemned replica that did not take a copy, or a source
  behind the cut, holds something else);
- a fail-over loses no more than it reports: every acknowledged write of the local dataset
  missing at the end stands past the cut and at or below the last position the report
  names (lost for sure, or kept aside on the old home's servers), and what it said was lost
  for sure is at least what the replicas that answered it had applied;
- no write of the local dataset counts twice, and the global dataset stays linearizable
  through the loss (the whole cluster's checks)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Any

import grpc

from catalog import datasets, log_map, registry, scopes
from catalog.failover import FailoverError, Plan
from coordinator.records import record_for
from drivers import failover
from log import zk as zkpaths
from log.metadata import LogMetadata
from midtown import errors
from midtown.client import Client
from midtown.model import Op as SdkOp
from midtown_pb import kv_pb2 as pb
from record.model import Incr
from runtime import world
from storage_node import keys
from tests.sim.cluster_shape import COORDINATOR, LOGS, NODES, PKEYS, SHARDS, Write
from tests.sim.links import _PeerCalls
from tests.sim.store import MemState

HOME = 0  # the scope's home data center (dc0), lost
SCOPE_LOG = 1  # the log kept there
SCOPE_SHARDS = 2  # the scope's shards: the top of the six
LOCAL = "loc"  # the local dataset
LOG_SERVERS = 9  # three in each data center: a log is kept in one only on three machines of it
COORDINATOR_DC = 1
FAIL_OVER_S = 60.0  # the operator's tries, until a new home has a replica serving


class FailoverSim:
    """NodeSim's fail-over scenario (a mixin: the run's state is NodeSim's)."""

    admin: Any
    counts: dict[str, int]
    violations: list[str]
    rng: Any
    storage: dict[int, Any]
    servers: Any
    down: set[int]
    lost: set[int]
    nodes: dict[int, Any]
    told: dict[bytes, tuple[str, Any]]
    sent: dict[str, list[bytes]]
    acked_appends: dict[int, list[tuple[float, int]]]
    running: Callable[[], AbstractContextManager[None]]  # (WriterSim's: the check waits for its tasks)
    first_logs: tuple[int, ...]

    def init_failover(self) -> None:
        self.lost_dc: int | None = None  # the data center down whole now
        self.behind: int | None = None  # the data center cut off a moment before the loss
        self.local_writes: list[Write] = []
        self.plan: Plan | None = None
        self.failed_over_at = 0.0  # when its write was made
        self.precut: LogMetadata | None = None  # the scope's log as it was before its cut
        if self.faults.failover:  # type: ignore[attr-defined]
            self.counts.update(dict.fromkeys(("data centers lost", "fail-overs", "fail-over tries refused",
                                              "local writes acknowledged", "acknowledged writes lost",
                                              "positions lost for sure", "nodes condemned",
                                              "nodes restarted to take a copy"), 0))

    def lay_out_scope(self) -> None:
        """As an operator lays a scope out before any dataset: log 1 kept in dc0, scope dc0
        of the top shards on it, each shard on its scope's logs (as the hand-offs `scope add`
        makes would put them: nothing is written yet, so the map is written whole)."""
        homes = zkpaths.set_home(self.admin, SCOPE_LOG, f"dc{HOME}")
        kv = registry.add_scope(self.admin, f"dc{HOME}", SCOPE_SHARDS, [SCOPE_LOG], homes,
                                lambda: datasets.used_shards(self.admin))
        m = registry.read_log_map(self.admin, kv, LOGS)
        of = list(m.of)
        for sh, _, to in log_map.spread(m, None, scopes.groups(kv.scopes, kv.shards, m.logs)):
            of[sh] = to
        registry.write_log_map(self.admin, replace(m, of=tuple(of)), "scopes laid out before the datasets")
        self.first_logs = tuple(of)

    def dc_lost(self, dc: int | None) -> bool:
        """Whether data center `dc` is down whole now (its processes are not restarted then)."""
        return dc is not None and dc == self.lost_dc

    # --- the application ------------------------------------------------------------------

    def local_writer(self, stop: Any) -> None:
        """An application writing the local dataset, one increment of a key of its own
        (m<i>) per write, through the loss, the fail-over and the home's return."""
        with self.running():
            db: Client = self.sdk("local")  # type: ignore[attr-defined]
            self.cluster_up(stop)  # type: ignore[attr-defined]
            d = datasets.get(self.admin, LOCAL)
            assert d is not None
            while not stop.is_set():
                i = len(self.local_writes)
                pk = self.rng.choice(PKEYS)
                w = Write(record_for(d, b"", COORDINATOR, pk, (Incr(b"m%d" % i, 1),), b"", SHARDS))
                self.local_writes.append(w)
                self.sent["local"] = w.request_ids
                try:
                    db.batch(LOCAL, [SdkOp.incr(pk, b"m%d" % i, 1)], timeout=4.0)
                    w.acked, w.done_at = True, world.monotonic()
                    self.counts["local writes acknowledged"] += 1
                except (errors.Unavailable, errors.DeadlineExceeded):
                    pass  # its outcome unknown: the home lost, or not failed over yet
                except errors.MidtownError as e:
                    self.violations.append(f"a write of {LOCAL!r} refused: {type(e).__name__}: {e}")
                world.sleep(self.rng.uniform(0, 0.1))

    # --- the loss and the fail-over --------------------------------------------------------

    def lose_home(self, stop: Any) -> None:
        """dc0 loses power whole a few seconds in; the operator fails its scope over; dc0
        comes back a little later, its processes on their disks."""
        with self.running():
            self.cluster_up(stop)  # type: ignore[attr-defined]
            world.sleep(self.rng.uniform(2.0, 6.0))
            # The other data centers' replicas apply the log asynchronously: half the time the
            # one without the coordinator is cut off a moment before the loss (the home goes
            # on acknowledging), so they stand at different positions when it goes
            self.behind = None
            if self.rng.random() < 0.5:
                self.behind = 3 - HOME - COORDINATOR_DC
                self.cut_off(self.behind, self.rng.uniform(1.0, 3.0))  # type: ignore[attr-defined]
                world.sleep(self.rng.uniform(0.3, 0.8))
            self.lost_dc = HOME
            self.counts["data centers lost"] += 1
            for s in self.servers:
                if self.dc_of_server(s) == HOME and s not in self.down:  # type: ignore[attr-defined]
                    self.crash_server(s)  # type: ignore[attr-defined]
            for n in NODES:
                if self.dc_of_server(n) == HOME and n in self.storage:  # type: ignore[attr-defined]
                    self.stop_node(n, power=True)  # type: ignore[attr-defined]
            self.fail_over()
            world.sleep(self.rng.uniform(0.5, 3.0))
            self.lost_dc = None
            for s in self.servers:
                if self.dc_of_server(s) == HOME and s in self.down and s not in self.lost:  # type: ignore
                    self.restart_server(s)  # type: ignore[attr-defined]
            for n in NODES:
                if self.dc_of_server(n) == HOME and n not in self.storage:  # type: ignore[attr-defined]
                    self.start_node(n)  # type: ignore[attr-defined]

    def fail_over(self) -> None:
        """`midtown dataset fail-over loc --to DC` (the real driver, in an operator's process
        of its own), with --force half the time, else tried until the home's log servers'
        sessions expired; tried again while the new home's replica does not answer."""
        others = [f"dc{d}" for d in range(3) if d != HOME]
        # (with one behind, half the time that one: the cut is then below what the other applied)
        behind = self.behind is not None and self.rng.random() < 0.5
        to = f"dc{self.behind}" if behind else self.rng.choice(others)
        force = self.rng.random() < 0.5
        give_up = world.monotonic() + FAIL_OVER_S
        zk = self.ens.client()  # type: ignore[attr-defined]
        with self.sched.process("operator-failover"):  # type: ignore[attr-defined]
            zk.start()
        answered: dict[int, int] = {}  # node -> the last position of the scope's log it applied

        def statuses(hold: str, logs: Sequence[int]) -> dict[int, Any]:
            out = {}
            answered.clear()
            for n in NODES:
                try:
                    want = pb.NodeStatusRequest(durable=True, hold=hold, hold_logs=logs)
                    st = _PeerCalls(self).call(f"sim-storage:{n}", "Status", want, 5)
                except grpc.RpcError:
                    continue  # down, or cut off: it says nothing
                out[n] = st
                if st.started:  # (one starting says nothing: drivers/failover.py _positions)
                    answered[n] = int(st.log_positions[SCOPE_LOG]) - 1
            return out
        while True:
            world.sleep(self.rng.uniform(0.2, 1.0))
            precut, _ = zkpaths.read_metadata(zk, SCOPE_LOG)
            try:
                with self.sched.process("operator-failover"):  # type: ignore[attr-defined]
                    plan = failover.fail_over(zk, LOCAL, to, force, statuses)
            except FailoverError as e:
                said = str(e)
                if not ("is reachable" in said or "that answers" in said or "kept changing" in said) \
                        or world.monotonic() > give_up:
                    self.violations.append(f"the fail-over of {LOCAL!r} to {to} refused: {said}")
                    return
                self.counts["fail-over tries refused"] += 1
                if "that answers" in said:  # its replica there down or starting: the other one
                    to = others[1 - others.index(to)]
                continue
            break
        self.plan, self.precut, self.failed_over_at = plan, precut, world.monotonic()
        cut = plan.cuts[0]
        self.counts["fail-overs"] += 1
        self.counts["positions lost for sure"] += cut.lost_for_sure
        self.counts["nodes condemned"] += len(plan.condemned)
        heard = max(answered.values(), default=-1)
        if heard > cut.heard:
            self.violations.append(f"the fail-over of {LOCAL!r} reported positions {cut.end + 1}.."
                                   f"{cut.heard} "
                                   f"lost for sure; the replicas that answered it had applied up to {heard} "
                                   f"({answered})")
        # (the coordinator's ReadIndex check: what it heard acknowledged past the cut is lost,
        # as reported, not a position the new home's log must reach)
        self.acked_appends[SCOPE_LOG] = [(t, p) for t, p in self.acked_appends.get(SCOPE_LOG, [])
                                         if p <= cut.end]

    # --- the end checks ----------------------------------------------------------------------

    def meta_at(self, meta: LogMetadata, p: int) -> LogMetadata:
        """The metadata position `p` of the log is read by: the log's before its cut, for a
        position at or below the cut (the cut dropped the segments wholly below it)."""
        if self.plan is not None and self.precut is not None and meta.log_id == SCOPE_LOG \
                and p <= self.plan.cuts[0].end:
            return self.precut
        return meta

    def lost_answer(self, rid: bytes, position: int) -> bool:
        """Whether a node's answer of a write (at `position`) is one the fail-over lost:
        a write of the local dataset, past the cut."""
        return self.plan is not None and position > self.plan.cuts[0].end and any(
            rid in w.request_ids for w in self.local_writes)

    def check_failover(self, model: MemState) -> set[bytes]:
        """The local writes' counts, and those the fail-over lost held against its report;
        the request ids lost (their clients' answers are not the log's now)."""
        if not self.counts.get("fail-overs"):
            return set()
        assert self.plan is not None
        cut = self.plan.cuts[0]
        d = datasets.get(self.admin, LOCAL)
        assert d is not None
        # What the last segment's servers keep aside past the cut (`midtown scope list` reads
        # it from them: drivers/failover.py kept_aside), read from their disks
        metas = [self.store_of(s).load().get(SCOPE_LOG) for s in cut.servers]
        kept = max((m.segments[cut.segment].last for m in metas
                    if m is not None and cut.segment in m.segments), default=cut.end)
        reported = max(cut.heard, kept)
        lost: set[bytes] = set()
        for i, w in enumerate(self.local_writes):
            v = model.get(keys.value_key(w.record.shard, d.id, w.record.partition_key, b"m%d" % i))
            n = 0 if v is None else int(v.value)
            if n > 1:
                self.violations.append(f"local write {w.request_ids!r} counted {n} times")
                return lost
            if n == 1 or not w.acked:
                continue
            told = [self.told[rid][1] for rid in w.request_ids if rid in self.told]
            at = told[0].position if told else -1
            if w.done_at is None or w.done_at > self.failed_over_at or not cut.end < at <= reported:
                self.violations.append(
                    f"local write {w.request_ids!r}, acknowledged at position {at} at {w.done_at} s, is "
                    "lost; "
                    f"the fail-over at {self.failed_over_at:.3f} s cut the log at {cut.end} and reported "
                    f"{cut.end + 1}..{reported} lost ({cut.lost_for_sure} for sure, kept aside up to {kept})")
                return lost
            lost.update(w.request_ids)
            self.counts["acknowledged writes lost"] += 1
        return lost
