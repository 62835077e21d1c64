"""The log's writers as the servers run them, in the seeded simulation (issue 51): the real
`WriterDriver` (log/driver.py: its thread, inbox, ticks, LAC pushes and heartbeats) around
the real writer core, replicas' real cores, the log's metadata written through log/zk.py on
the simulated ZooKeeper, all on the simulator's world backend (tests/sim/scheduler.py). The
writers reach the replicas through their server's real peers (log/peers.py: an outlet per
replica batching appends, its own replica in process) over the simulator's backend of the
replication's network port (_Link, log/replica_link.py), which delays, drops and
duplicates messages and their replies, cuts replicas off, and (link_cuts) cuts servers off
from one another in pairs. The driver runs the writer core, so its loop is under test.

A client appends all the time; writers crash (their process killed mid-step: the driver's
thread dies wherever it is) and another server claims the log with the next epoch, as the
election does. With `elections`, whole log servers run instead (log/node.py Node, as the
server process wires it: the real election with registration by runtime/membership.py,
watches on the metadata, the writer node and the servers, vacant-log claims, the
followers' takeover after failed probes; the replica side with its epoch check, catch-up,
re-replication), and a fault either kills a whole server, whose ZooKeeper session then
expires, restarting it later from its replica store, or pauses it (SIGSTOP), past its
session timeout or not, and lets it run again.

With whole servers, the clients are the real log client (log/client.py LogClient: the
writer found through ZooKeeper and its watch, redirects, retries of unknown outcomes, an
attempt given up when the writer node names another server) over the simulator's backend of
the log client's network port (_LogLink, log/client_link.py), whose calls are answered by
the servers' own gRPC services (log/server.py, through tests/sim/grpc_port.py: requests and
answers as bytes, deadlines carried, refusals as statuses) in the servers' processes, as
the writers' calls to their peers' replicas are; and readers run ReadIndex rounds
(LogClient.read_index) beside them.

The checks: every append acknowledged by any writer is, at the end, at its position with its
payload on the replicas, and no position has two different copies; with the log client, each
append ends (acknowledged or failed) by its deadline, and a ReadIndex round started after an
append was acknowledged returns its position or more (or None: the reader goes through the
log)."""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator, Sequence
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass, field
from dataclasses import replace as dc_replace
from typing import Any

import grpc
from kazoo.client import KazooState

from catalog import registry
from fleet import failure_domains, machines
from fleet.failure_domains import Domain
from log import codec, lease, limits, reading, rereplicate
from log import read_index as ri
from log import server as log_server
from log import zk as zkpaths
from log.client import LogClient
from log.client_link import LogState, Placement, one_by_one, placement, states
from log.codec import add_reply_from_pb, add_to_pb
from log.driver import Busy, WriterDriver, WriterFailed
from log.entry import Entry
from log.limits import FIRST_POSITION
from log.messages import Fence, FenceReply
from log.messages import Result as Answer
from log.metadata import LogMetadata, Segment
from log.metrics import ENSEMBLE_CHANGES
from log.node import Node
from log.peers import Peers
from log.quorum import AckTracker
from log.replica import ReplicaCore
from log.replica_link import NoAnswer, OwnReplica, Refused, answer_of, on_the_wire
from log.seals import FIRST, NONE, UNTAGGED, Seals, Stint, Tags
from log.store import MemStore
from log.store_identity import StoreLost
from log.writer import ChangeEnsemble, Send, State, Writer
from midtown_pb import log_pb2 as pb
from runtime import refusals, world
from runtime.refusals import Refusal
from runtime.stubs import CallFailed
from runtime.transport import KEEPALIVE_MS
from tests.sim import broken, grpc_port
from tests.sim.broken import Swap, swapped
from tests.sim.scheduler import Scheduler
from tests.sim.zookeeper import Client, Ensemble, Late

LOG = 0
BROKEN = ("ends-at-lac", "past-lac", "no-fence", "ack-before-quorum", "fences-own-ensemble", "skip-fence",
          "no-wait", "expired", "no-fencing", "trust-cache", "any-servers", "record-first", "by-load",
          "no-store-check", "takeover-unseals", "any-generation")


@dataclass
class Config:
    seconds: float = 20.0  # simulated
    crashes: int = 3  # writers killed, each followed by a claim by another server
    clients: int = 3
    isolations: int = 6  # a replica cut off from everyone for up to a second
    # With elections: two servers cut off from each other (both ways) for up to 3 s, each
    # still reaching the others (a "bridge": Jepsen's partial partitions), the log's
    # writer's server one of them most of the time
    link_cuts: int = 0
    drop: float = 0.05  # a call or its reply lost (the writers' Fence and ReadRange calls)
    duplicate: float = 0.05  # ... delivered twice
    stream_break: float = 0.01  # a replication stream's call lost with its stream
    delay_max_s: float = 0.02
    # A broken variant (BROKEN; broken_rules): "no-store-check" (with elections and wipes)
    # starts a server on whatever store it finds (log/store_identity.py not asked)
    broken: str = ""
    # Whole log servers (log/node.py Node: the real election, membership, peers, catch-up,
    # re-replication, the replica side's epoch check) instead of writers claimed by the simulation.
    elections: bool = False
    servers: int = 3  # in the pool; with more than three (elections), segments change ensembles
    # With elections: a crashed server restarts on an empty store half the time (its disk lost)
    wipes: bool = False
    # Logs in the cluster (elections): the checks here are on LOG's; nodes.py's on every one
    logs: int = 1
    # With elections: the servers on this many machines (server s on machine s % machines,
    # recorded as fleet/machines.py records them; 0: each its own, none recorded). No
    # segment may have two servers on one machine (checked every 0.1 s).
    machines: int = 0
    # ZooKeeper's notices (session state, watches) reach every process up to this late
    # (tests/sim/zookeeper.py Late): the protocol must not lean on their being on time
    late_notices_s: float = 0.0
    # With elections: each append names one of SEAL_SHARDS shards, and a hand-off's driver
    # seals them in the log and opens them again (log/seals.py, docs/log.md "Adding logs
    # and handing shards over" step 3): nothing of a shard is committed while it is sealed
    seals: bool = False
    # With elections: the writers' read lease (log/lease.py; 0: none, every strong read a
    # ReadIndex round, as MIDTOWN_READ_LEASE_S=0 runs a server)
    lease_s: float = lease.LEASE_S_DEFAULT


# Bridges: links cut in pairs (Config.link_cuts), in runs long enough, and with few enough
# crashes, that writers hold the log for log/takeover.py's SETTLE_S and their followers
# take it over from them while they still run and reach the rest (make sim SIM_ARGS=--bridges)
BRIDGES: dict[str, Any] = {"link_cuts": 8, "crashes": 1, "seconds": 30.0}
# Data centers (the whole cluster's Faults.data_centers): a message between two takes this
# much longer one way (tens of milliseconds a round trip, as between regions near each other)
DC_ONE_WAY_S = (0.01, 0.03)


@dataclass
class Result:
    violations: list[str]
    acked: int
    writers: int
    switches: int
    simulated_s: float
    replicate_calls: int = 0  # calls on the outlets' streams to peers
    replicated: int = 0  # appends (AddEntries) they carried
    takeovers: int = 0  # new writers while the old one's server was still registered (elections)
    live_takeovers: int = 0  # ... while it ran too, neither down nor paused (link_cuts)
    wiped: int = 0  # servers restarted on an empty store (wipes)
    ensemble_changes: int = 0  # open segments the writers moved (the servers' own metric)
    refused: int = 0  # ... that refused to start
    appends_failed: int = 0  # the log client's appends that ended in an error (elections)
    read_indexes: int = 0  # ReadIndex rounds that returned an index (elections)
    followed: int = 0  # positions a follow through the log client delivered (elections)
    lease_reads: int = 0  # strong reads answered by a writer's read lease (elections)
    sealed_refusals: int = 0  # appends refused whole, their shard sealed (seals)
    hand_offs: int = 0  # shards sealed or opened again (seals)
    buggified: dict[str, int] = field(default_factory=dict)  # fault points enabled -> times fired
    failures: list[str] = field(default_factory=list)


# --- broken variants (Config.broken): a rule of the real code swapped for the run ---------

_decide, _change_ensemble = Writer._decide, Writer.change_ensemble
_on_ensemble_changed, _on_metadata_written = Writer.on_ensemble_changed, Writer.on_metadata_written
_read_index, _to_copy, _start = ri.read_index, rereplicate.to_copy, Writer.start
_admit = Seals.admit


def _ends_at_lac(self: Writer) -> None:
    """A recovery that seals the old segment at the highest LAC its fence quorum reported,
    without reading what lies past it: appends acknowledged before their LAC reached the
    replicas are lost."""
    for r in self._quorum:
        self._reads[r] = {}
    _decide(self)


def _changes_past_lac(self: Writer, replicas: tuple[int, ...]) -> None:
    """An ensemble change that closes the segment at the last entry sent, not at the last
    one acknowledged."""
    self.lac, self.lac_ts = self.next_position - 1, self.last_ts
    _change_ensemble(self, replicas)


def _changes_without_fence(self: Writer, new: LogMetadata | None, version: int = -1) -> None:
    """An ensemble change that appends in the new segment right after its metadata write,
    without fencing the old segment's replicas at the new epoch (a ReadIndex round from a
    stale cache then misses what the new segment acknowledged)."""
    _on_ensemble_changed(self, new, version)
    if self.state is State.CHANGING and self._changed_from is not None:
        self._outbox = [o for o in self._outbox if not (isinstance(o, Send) and isinstance(o.msg, Fence))]
        for r in self._changed_from.replicas[:2]:
            self._fenced_old(r, FenceReply(Answer.OK, self.epoch))  # as if they answered


def _acks_before_quorum(self: Writer, ok: bool, new_version: int = -1) -> None:
    """A writer that acknowledges an append once one replica holds it, not an ack quorum."""
    _on_metadata_written(self, ok, new_version)
    if self.state is State.WRITING:
        self._tracker = AckTracker(1, self.lac)


def _fences_own_ensemble(self: Writer) -> Segment | None:
    """A new writer that fences and recovers the replicas of the ensemble it is about to
    open rather than the last segment's (a fence quorum of the wrong servers)."""
    seg = self.metadata.last_segment
    return None if seg is None or seg.sealed else dc_replace(seg, replicas=self.replicas)


def _trusts_cache(meta: LogMetadata, replies: Any, fresh: bool,
                  ack_quorum: int = limits.ACK_QUORUM) -> int | None:
    """A ReadIndex round that trusts cached metadata without its epoch check."""
    return _read_index(meta, replies, True, ack_quorum)


def _records_part(seg: Segment, truncated_before: int, held: Any) -> list[Entry]:
    """What a broken re-replication copies: some prefix of the segment's committed entries."""
    out = _to_copy(seg, truncated_before, held)
    return out[: world.choice(range(len(out) + 1))]


SEAL_SHARDS = 3


def broken_rules(sim: WriterSim, variant: str) -> list[Swap]:
    """The rules a broken variant swaps in for the run (none for "no-store-check", which
    the server's start skips: WriterSim.server)."""
    def any_enough(meta: LogMetadata, replies: Any, ack_quorum: int = limits.ACK_QUORUM) -> bool:
        seg = meta.last_segment
        return seg is not None and len(replies) >= limits.fence_quorum(len(seg.replicas), ack_quorum)

    def any_index(meta: LogMetadata, replies: Any, fresh: bool,
                  ack_quorum: int = limits.ACK_QUORUM) -> int | None:
        seg = meta.last_segment
        if seg is None or not any_enough(meta, replies):
            return None
        return max([seg.first - 1, *(r.last for r in replies.values())])
    # a ReadIndex round that takes any fence quorum of the pool's servers
    any_servers = [(ri, "replicas_to_ask", lambda meta: sim.servers), (ri, "enough", any_enough),
                   (ri, "read_index", any_index)]
    return {
        "ends-at-lac": [(Writer, "_decide", _ends_at_lac)],
        "past-lac": [(Writer, "change_ensemble", _changes_past_lac)],
        "no-fence": [(Writer, "on_ensemble_changed", _changes_without_fence)],
        "ack-before-quorum": [(Writer, "on_metadata_written", _acks_before_quorum)],
        "fences-own-ensemble": [(Writer, "recovering_segment", property(_fences_own_ensemble))],
        "skip-fence": [(Writer, "start", lambda w, now_ms: _skips_fence(sim, w, now_ms))],
        "no-wait": [(Writer, "on_fence_reply", broken.no_lease_wait)],
        "expired": [(Writer, "lease_index", broken.serves_expired)],
        "no-fencing": [(ReplicaCore, "_fence_rule", broken.admits_all)],
        "trust-cache": [(ri, "read_index", _trusts_cache)],
        "any-servers": any_servers,
        # a re-replication recorded whatever part of the segment its copy holds
        "record-first": [(rereplicate, "to_copy", _records_part), (rereplicate, "complete", lambda *a: True)],
        # ensembles, their changes and re-replication placed by load alone, blind to machines
        "by-load": [(machines, "domains", lambda zk, role: failure_domains.unknown)],
        # a writer taking the log over that does not read the log's list of sealed shards
        "takeover-unseals": [(_Host, "read_seals", lambda host, log_id: {}), (Node, "read_seals",
                                                                             lambda node, log_id: {})],
        # a writer that admits a shard's records whatever generation their sender named
        "any-generation": [(Seals, "admit", _any_generation)],
    }.get(variant, [])


def _any_generation(self: Seals, tags: Tags) -> None:
    if tags.seal == NONE and tags.open == NONE:
        tags = dc_replace(tags, generations=tuple(self.stints.get(s, FIRST).generation for s in tags.shards))
    _admit(self, tags)


def _skips_fence(sim: WriterSim, w: Writer, now_ms: int) -> None:
    """A new writer that seals the last segment where its own server's replica's LAC says,
    without fencing or recovering it: the old writer goes on acknowledging."""
    seg = w.recovering_segment
    if seg is None or w.metadata.writer not in sim.nodes:
        _start(w, now_ms)
        return
    w._now_ms = now_ms
    own = sim.nodes[w.metadata.writer].replica
    w._seal(max(own.lac(w.log_id, seg.epoch), seg.first - 1), 0)


class _Host:
    """What a writer's driver needs from its server (log/driver.py WriterHost), wired to
    the simulated network and ZooKeeper instead of gRPC and kazoo."""

    def __init__(self, sim: WriterSim, server: int, zk: Client) -> None:
        self.sim, self.server_id, self.zk = sim, server, zk
        # The server's real peers (log/peers.py: outlets batching, spare followers lingering)
        # over the simulated network: its own replica in process, the others' by _Link.
        own = OwnReplica(lambda msgs: [sim.handle(server, m) for m in msgs])
        self.peers = Peers(server, own, lambda to: _Link(sim, to), world.event())

    def zk_ok(self) -> bool:
        return self.zk.connected

    def session_ok(self) -> bool:
        return bool(self.zk.state != KazooState.LOST)

    def write_metadata(self, meta: LogMetadata, version: int) -> tuple[bool, int]:
        v = zkpaths.cas_metadata(self.zk, meta, version)
        return (False, -1) if v is None else (True, v)

    def announce_writer(self, log_id: int, epoch: int) -> None:
        pass

    def notify(self, log_id: int) -> None:
        pass

    def send(self, driver: WriterDriver, to: int, msg: Any) -> None:
        self.peers.send(driver, to, msg)

    def dispatch_reply(self, core: Writer, replica: int, req: Any, rep: Any) -> None:
        core.on_reply(replica, req, rep)

    def change_ensemble(self, log_id: int, change: ChangeEnsemble) -> tuple[LogMetadata | None, int]:
        return None, -1  # no ensemble changes here: the pool is the ensemble

    def read_seals(self, log_id: int) -> dict[int, Stint]:
        return zkpaths.read_seals(self.zk, log_id)  # type: ignore[arg-type]


class _Link:
    """The simulator's backend of the replication's network port (log/replica_link.py): a
    message to replica `to` and its reply back, each after a delay, each perhaps dropped or
    delivered twice, none to or from a replica cut off, down or paused."""

    def __init__(self, sim: WriterSim, to: int, frm: int | None = None) -> None:
        self.sim, self.to, self.frm = sim, to, frm

    def wire(self) -> None:
        self.sim.delay(self.sim.dc_of_server(self.frm), self.sim.dc_of_server(self.to))

    def ask(self, msg: Any, reply: Callable[[Any], None]) -> None:
        sim, to = self.sim, self.to

        def there() -> None:
            self.wire()
            if not sim.reachable(to, self.frm):
                return
            try:
                rep = sim.handle(to, msg)
            except (NoAnswer, Refused):
                return  # as if lost: the writer's tick sends again
            for _ in range(sim.copies()):
                world.spawn("reply", lambda: back(rep))

        def back(rep: Any) -> None:
            self.wire()
            if sim.reachable(to, self.frm):
                reply(rep)  # into the writer's inbox: a dead or paused writer's waits there

        # In flight, a message is the network's: it outlives its sender (a dead writer's
        # late message still reaches the replicas), and the sender never takes on the
        # process of a replica that is down or paused.
        with sim.sched.process("network"):
            for _ in range(sim.copies()):
                world.spawn("request", there)

    def call(self, msg: Any, timeout_s: float) -> Any:
        """A call and its wait (the election's probes): no answer from a replica cut off,
        down or paused, nor when either way is lost."""
        sim, to = self.sim, self.to
        self.wire()
        if not sim.reachable(to, self.frm) or not sim.copies():
            world.sleep(0.0 if to in sim.down else timeout_s)
            raise NoAnswer(f"log server {to}")
        rep = sim.handle(to, msg)
        self.wire()
        if not sim.reachable(to, self.frm):
            raise NoAnswer(f"log server {to}")
        return rep

    def replicate(self, msgs: list[Any]) -> list[Any] | None:
        """A call on the stream to `to` (the sender's outlet waits for it). A stream loses
        nothing, but it breaks now and then (`stream_break`), and a replica cut off or
        paused answers nothing until the call's timeout; a dead one's connection is refused
        at once. Lost either way, the writers send again."""
        sim, to = self.sim, self.to
        self.wire()
        if not sim.reachable(to, self.frm) or sim.rng.random() < sim.cfg.stream_break:
            world.sleep(0.0 if to in sim.down else limits.REPLICA_RPC_TIMEOUT_S)
            return None
        try:  # a call on the stream: the server handles its messages together (Node.local_batch)
            req = pb.ReplicateRequest(requests=[add_to_pb(m) for m in msgs])
            replies = (sim.replica_call(to, "Replicate", req,
                                        lambda rep: [add_reply_from_pb(r) for r in rep.responses])
                       if sim.cfg.elections else [sim.handle(to, m) for m in msgs])
        except (NoAnswer, Refused):
            return None  # the stream failed with it
        sim.replicate_calls += 1
        sim.replicated += len(msgs)
        self.wire()
        return replies if sim.reachable(to, self.frm) else None


class _PendingAppend:
    """An Append in flight on the simulated network: its outcome when the reply came, or
    DEADLINE_EXCEEDED once its timeout has passed without one (the server died, was
    paused or cut off, or a message was lost)."""

    def __init__(self, timeout_s: float) -> None:
        self.reply: futures.Future[Placement] = world.future()
        self.deadline = world.monotonic() + timeout_s

    def result(self, wait_s: float) -> Placement:
        left = self.deadline - world.monotonic()
        if left <= 0 and not self.reply.done():
            raise Refusal(grpc.StatusCode.DEADLINE_EXCEEDED, "no answer within the call's timeout")
        try:
            return self.reply.result(timeout=min(wait_s, max(left, 0.0)))
        except futures.TimeoutError:
            raise TimeoutError from None

    def cancel(self) -> None:
        pass


class _LogLink:
    """The simulator's backend of the log client's network port (log/client_link.py): each
    call answered in server `sim:N`'s process by its own Log service (`WriterSim.log_call`),
    each way after a delay; a call to a server that is down is refused (`refused`, as a
    connection is); one to a server paused or cut off is answered by nothing, as is one
    lost with its connection (as often as a replication stream breaks: a call on a live
    connection is not lost by itself). A failed call is the Refusal its status reads as
    (Refusal.of_call), as the log client's gRPC backend reads it."""

    def __init__(self, sim: WriterSim) -> None:
        self.sim = sim

    def _call(self, addr: str, reply: futures.Future[Any], answer: Callable[[int], Any],
              refused: Callable[[], None]) -> None:
        sim, to = self.sim, int(addr.split(":")[1])
        carry(sim, reply, lambda: None if to in sim.down else sim.proc(to), lambda: answer(to),
              refused, lambda: sim.reachable(to), lossy=True)

    def append(self, addr: str, log_id: int, payloads: list[bytes], timeout_s: float,
               tags: Tags = UNTAGGED) -> _PendingAppend:
        req = codec.tags_to_pb(pb.AppendRequest(log_id=log_id, payloads=payloads), tags)
        deadline = world.monotonic() + timeout_s

        def answer(to: int) -> Placement | Refusal:
            r = self.sim.log_call(to, "Append", req, deadline)
            if isinstance(r, Refusal):
                return r
            if log_id == LOG:  # acknowledged by the server, whether or not its caller still waits
                self.sim.server_acks += [(r.epoch, r.first_position + i, p) for i, p in enumerate(payloads)]
            return placement(r)
        call = _PendingAppend(timeout_s)
        self._call(addr, call.reply, answer, lambda: call.reply.set_exception(
            Refusal(grpc.StatusCode.UNAVAILABLE, f"{addr}: connection refused")))
        return call

    def tail(self, addr: str, log_id: int) -> futures.Future[ri.TailReply]:
        reply: futures.Future[ri.TailReply] = world.future()
        req, deadline = pb.TailRequest(log_id=log_id), world.monotonic() + limits.TAIL_CALL_TIMEOUT_S

        def answer(to: int) -> ri.TailReply | Refusal:
            r = self.sim.log_call(to, "Tail", req, deadline)
            return r if isinstance(r, Refusal) else ri.TailReply(int(r.last), int(r.epoch), int(r.clock_ms))
        self._call(addr, reply, answer, lambda: reply.set_exception(ConnectionRefusedError(addr)))
        return reply

    def read(self, addr: str, log_id: int, position: Callable[[], int], linger_ms: int) -> _Entries:
        req = pb.ReadRequest(log_id=log_id, from_position=position(), follow=True, linger_ms=linger_ms)
        return _Entries(self.sim, int(addr.split(":")[1]), req)

    def _blocking(self, addr: str, method: str, req: Any, timeout_s: float) -> Any:
        """A call and its wait."""
        reply: futures.Future[Any] = world.future()
        deadline = world.monotonic() + timeout_s
        refused = Refusal(grpc.StatusCode.UNAVAILABLE, f"{addr}: connection refused")
        self._call(addr, reply, lambda to: self.sim.log_call(to, method, req, deadline),
                   lambda: reply.set_result(refused))
        try:
            r = reply.result(timeout_s)
        except futures.TimeoutError:
            raise Refusal(grpc.StatusCode.DEADLINE_EXCEEDED, f"{addr}: no answer") from None
        if isinstance(r, Refusal):
            raise r
        return r

    def read_range(self, addr: str, log_id: int, start: int, max_entries: int, timeout_s: float | None,
                   wait: bool, follow: bool = False) -> list[Any]:
        assert not follow, "the simulation follows through read()"
        req = pb.ReadRequest(log_id=log_id, from_position=start, max_entries=max_entries)
        return [e for resp in self._blocking(addr, "Read", req, 60 if timeout_s is None else timeout_s)
                for e in resp.entries]

    def truncate(self, addr: str, log_id: int, before: int) -> int:
        req = pb.TruncateRequest(log_id=log_id, before_position=before)
        return int(self._blocking(addr, "Truncate", req, 10).first_position)

    def status(self, addr: str) -> list[LogState]:
        return states(self._blocking(addr, "Status", pb.StatusRequest(), 5))

    def statuses(self, addrs: Sequence[str]) -> list[list[LogState] | Refusal]:
        return one_by_one(self, addrs)  # (one after another, as the seeds were found)


def carry(sim: WriterSim, reply: futures.Future[Any], proc: Callable[[], str | None],
          answer: Callable[[], Any], refused: Callable[[], None], up: Callable[[], bool],
          lossy: bool) -> None:
    """A unary call on the simulated network: after a delay it reaches the process `proc()`
    (None: down, the call `refused()`; a stopped one takes it once it runs again), unless
    that is cut off (`up()` false) or, if `lossy`, its connection breaks (as often as a
    replication stream does: the call fails a second or two later, as `refused()`);
    `answer()` runs there, and its value (an exception: the call's error) comes back into
    `reply` after a delay, on the same conditions. Between data centers (data_centers) it
    takes longer, and while they are cut off from each other it is held until they are not,
    unless the call has ended meanwhile (`across`)."""
    frm = sim.here()  # the caller's data center (None: none, or no data centers)

    def to_dc() -> int | None:
        return sim.dc_of(proc()) if frm is not None else None

    def there() -> None:
        sim.delay(frm, to_dc())
        p = proc()
        if p is None:
            refused()
            return
        # A stopped process reads the call from its socket once it runs again; so does one
        # stopped again while the call was held between data centers cut off (it was lost
        # there, and its caller waited for its deadline: the whole-cluster simulation's seed
        # 66 with a fail-over, a rebuild's copy asked with an hour's)
        while True:
            while sim.sched.paused(p):  # (at least a millisecond: the clock's floats must move on)
                world.sleep(max(0.001, sim.sched.paused_until[p] - world.monotonic()))
            if not up() or not sim.across(frm, to_dc, reply.done):
                return
            if not sim.sched.paused(p):
                break
        if lossy and sim.rng.random() < sim.cfg.stream_break:
            reset()
            return
        try:
            ctx = sim.sched.process(p)
        except RuntimeError:  # it went down meanwhile
            return
        with ctx:
            world.spawn("answer", lambda: back(answer()))

    def back(rep: Any) -> None:
        sim.delay(frm, to_dc())
        if not up() or not sim.across(frm, to_dc, reply.done) or reply.done():
            return
        if lossy and sim.rng.random() < sim.cfg.stream_break:
            reset()
            return
        (reply.set_exception if isinstance(rep, BaseException) else reply.set_result)(rep)

    def reset() -> None:
        """The connection broke: gRPC's keepalive sees it within a second or two, and the
        call fails (UNAVAILABLE, as `refused`)."""
        world.sleep(sim.rng.uniform(1.0, 2.0))
        if not reply.done():
            refused()

    with sim.sched.process("network"):
        world.spawn("call", there)


class _Entries:
    """A Read stream on the simulated network, served in the server's process by its Log
    service's Read (log/server.py: the committed entries, lingering as asked), each
    message after a delay; the stream fails UNAVAILABLE when the server is down at the
    start or dies (its connection reset) or breaks now and then, and stays silent while
    the server is paused or cut off, until cancelled (the follow cancels it when another
    writer is named: the server's Read sees its call inactive and ends)."""
    in_process = False

    def __init__(self, sim: WriterSim, to: int, req: pb.ReadRequest) -> None:
        self.sim, self.req = sim, req
        self.ends = (sim.here(), sim.dc_of_server(to))  # the reader's data center and the server's
        self.batches: Any = world.queue()
        self.ctx = grpc_port.Context(None)
        self.proc = sim.proc(to)
        if to in sim.down:
            self.batches.put(Refusal(grpc.StatusCode.UNAVAILABLE, f"sim:{to}: connection refused"))
            return
        self._open(to)

    def _open(self, to: int) -> None:
        """The server's process serves the stream; a stopped one once it runs again (the
        call waits in its socket meanwhile)."""
        sim = self.sim
        try:
            with sim.sched.process(self.proc):
                world.spawn("read-stream", lambda: self._serve(to))
        except RuntimeError:  # stopped (or dead: the reader sees its connection reset)
            def later() -> None:
                world.sleep(max(0.001, sim.sched.paused_until.get(self.proc, 0.0) - world.monotonic()))
                if self.ctx.is_active() and self.proc not in sim.sched.dead:
                    self._open(to)
            with sim.sched.process("network"):
                world.spawn("read-stream-waits", later)

    def _serve(self, to: int) -> None:
        sim = self.sim
        for resp in grpc_port.streamed(sim.log_services(to), "/midtown.log.v1.Log/Read", self.req, self.ctx,
                                       pb.ReadResponse.FromString):
            if isinstance(resp, CallFailed):  # as the gRPC Read ends (OUT_OF_RANGE: truncated; ...)
                self.batches.put(Refusal.of_call(resp))
                return
            sim.delay(*self.ends)
            if sim.dc_cut(*self.ends):  # held back; past a second, gRPC's keepalive ends the stream
                cut = world.monotonic()
                if not sim.across(self.ends[0], lambda: self.ends[1],
                                  lambda: world.monotonic() - cut >= KEEPALIVE_MS / 1000):
                    self.ctx.cancelled = True
                    self.batches.put(Refusal(grpc.StatusCode.UNAVAILABLE, "keepalive ping unanswered"))
                    return
            if sim.rng.random() < sim.cfg.stream_break:
                self.ctx.cancelled = True  # the server's side of the stream ends with it
                self.batches.put(Refusal(grpc.StatusCode.UNAVAILABLE, "stream broken"))
                return
            self.batches.put(list(resp.entries))

    def __iter__(self) -> Any:
        while True:
            if self.ctx.cancelled:
                raise Refusal(grpc.StatusCode.CANCELLED, "cancelled")
            try:
                item = self.batches.get(timeout=0.5)
            except Exception:  # queue.Empty: is the server still there?
                if self.proc in self.sim.sched.dead:
                    raise Refusal(grpc.StatusCode.UNAVAILABLE, "connection reset") from None
                continue
            if isinstance(item, Refusal):
                raise item
            yield item

    def cancel(self) -> None:
        self.ctx.cancelled = True


class WriterSim:
    follows = True  # with elections: a follow from the log's first position, checked (follower)

    def __init__(self, seed: int, cfg: Config | None = None) -> None:
        self.cfg = cfg or Config()
        self.sched = Scheduler(seed)
        self.rng = self.sched.rng
        self.ens = Ensemble(late=Late(seed, self.cfg.late_notices_s) if self.cfg.late_notices_s else None)
        self.servers = tuple(range(self.cfg.servers))
        self.stores = {s: self.new_store(s) for s in self.servers}
        self.replicas = {s: ReplicaCore(s, self.stores[s], log_count=1) for s in self.servers}
        self.acks: list[tuple[int, int, bytes]] = []  # (epoch, position, payload)
        # ... of every Append a server answered as acknowledged (its client may have given up)
        self.server_acks: list[tuple[int, int, bytes]] = []
        self.writers: list[tuple[str, WriterDriver]] = []  # of LOG, the log the checks here are on
        self.other_writers: list[WriterDriver] = []  # of the other logs (Config.logs)
        self.violations: list[str] = []
        self.cut_until = {s: 0.0 for s in self.servers}  # a replica isolated until then
        # Data centers (the whole cluster's Faults.data_centers; 0: none): each cut off from
        # the others until then (dc_cut_until)
        self.dcs = 0
        self.dc_cut_until: list[float] = []
        self.coordinator_dc = 0  # the data center the coordinator runs in
        self.links_cut: dict[frozenset[int], float] = {}  # two servers cut off from each other until then
        self.down: set[int] = set()  # servers crashed (elections)
        self.incarnation = {s: 0 for s in self.servers}
        self.nodes: dict[int, Node] = {}  # whole servers (nodes), the newest of each
        self.services: dict[int, tuple[Node, Any]] = {}  # each one's gRPC services (log/server.py)
        self.sessions: dict[str, int] = {}  # a server process -> its first ZooKeeper session
        self.takeovers = 0  # writers that replaced one whose server was still registered
        self.live_takeovers = 0  # ... while that server ran, neither down nor paused
        self.wiped = 0  # servers restarted on an empty store
        self.refused = 0  # ... that refused to start (log/store_identity.py)
        self.lost: set[int] = set()  # servers down for good (refused to start)
        self.replicate_calls = self.replicated = 0
        self.appends_failed = 0  # the log client's appends that ended in an error (elections)
        self.read_indexes = 0  # ReadIndex rounds that returned an index (elections)
        self.follow_delivered = 0  # positions the follow delivered (elections)
        self.appending = 0  # the log client's appenders still running
        self.lease_reads = 0  # strong reads answered by a writer's read lease (elections)
        self.sealed_refusals = 0  # appends refused whole: their shard was sealed (seals)
        self.hand_offs_made = 0  # shards sealed or opened again (seals)
        self.generation: dict[int, int] = {}  # each shard's, as the senders' newest map has it (seals)
        # Each server's boot clock (its writers' read leases) runs at one end of the drift
        # log/lease.py allows (drawn from a generator of their own: the other draws stay)
        d, clocks = lease.DRIFT_MAX, random.Random(seed * 7919 + 1)
        self.sched.rates = {f"server-{s}": clocks.choice((1 - d, 1 + d)) for s in self.servers}
        # Where each server runs (the truth, for the check), recorded as a server records it
        self.machine_of = failure_domains.lookup(
            {s: Domain(f"m{s % self.cfg.machines}") for s in self.servers} if self.cfg.machines else {})

    # --- the network --------------------------------------------------------------------

    def handle(self, to: int, msg: Any) -> Any:
        """Replica `to` handles a writer's message: with whole servers, through its
        server's Replica service (`replica_call`; NoAnswer or Refused raised as
        log/replica_link.py reads a failed call), else its core."""
        if self.cfg.elections:
            name, req, conv = on_the_wire(msg)
            return self.replica_call(to, name, req, conv)
        return self.replicas[to].on_request(msg)

    def log_services(self, to: int) -> Any:
        """Server `to`'s Log and Replica services as its gRPC server runs them (log/server.py
        service_handlers: a request and its answer cross as bytes, a refusal is a status)."""
        node = self.nodes[to]
        got = self.services.get(to)
        if got is None or got[0] is not node:
            got = self.services[to] = (node, log_server.service_handlers(node))
        return got[1]

    def log_call(self, to: int, method: str, req: Any, deadline: float) -> Any:
        """A call of server `to`'s Log service: its answer (a stream's messages together), or
        the Refusal its status reads as (Refusal.of_call, as the log client's gRPC backend
        reads a failed call)."""
        # (a Read that is not a follow: its messages together)
        parse = pb.ReadResponse.FromString if method == "Read" else None
        out = grpc_port.answered(self.log_services(to), f"/midtown.log.v1.Log/{method}", req,
                                 grpc_port.Context(deadline), parse)
        return Refusal.of_call(out) if isinstance(out, CallFailed) else out

    def replica_call(self, to: int, method: str, req: Any, conv: Callable[[Any], Any]) -> Any:
        """A call of server `to`'s Replica service, its reply read by `conv`, or NoAnswer /
        Refused as log/replica_link.py reads a call that failed."""
        ctx = grpc_port.Context(world.monotonic() + limits.REPLICA_RPC_TIMEOUT_S)
        with self.sched.clock_of(self.proc(to)):  # its promises timed on its own clock
            out = grpc_port.unary(self.log_services(to), f"/midtown.log.v1.Replica/{method}", req, ctx)

        def result() -> Any:
            if isinstance(out, CallFailed):
                raise out
            return out
        return answer_of(to, result, conv, lambda: None)

    def reachable(self, to: int, frm: int | None = None) -> bool:
        """Whether replica `to` can be reached (from server `frm`, if one sent)."""
        now = world.monotonic()
        return now >= self.cut_until[to] and to not in self.down and not (
            self.cfg.elections and self.sched.paused(self.proc(to))) and (
            frm is None or now >= self.links_cut.get(frozenset((frm, to)), 0.0) and
            not self.dc_cut(self.dc_of_server(frm), self.dc_of_server(to)))

    def delay(self, a: int | None = None, b: int | None = None) -> None:
        """A message's time on the wire; between data centers `a` and `b`, when they
        differ (data_centers), a trip between them besides."""
        world.sleep(self.rng.uniform(0, self.cfg.delay_max_s))
        if a is not None and b is not None and a != b:
            world.sleep(self.rng.uniform(*DC_ONE_WAY_S))

    # --- data centers (tests/sim/faults.py Faults.data_centers) -------------------------------

    def dc_of_server(self, s: int | None) -> int | None:
        """The data center of log server (or storage node) `s`: s mod 3 (None: none)."""
        return None if not self.dcs or s is None else s % self.dcs

    def dc_of(self, proc: str | None) -> int | None:
        """The data center process `proc` runs in: a log server's or a storage node's by its
        id (server s in data center s mod 3), the coordinator's coordinator_dc; none for the
        rest (the applications and operators' tools reach every data center, as does the
        network's own task). None too without data centers."""
        if not self.dcs or proc is None:
            return None
        kind, _, rest = proc.partition("-")
        if kind in ("server", "writer", "storage"):
            return self.dc_of_server(int(rest.split("-")[0]))
        return self.coordinator_dc if kind == "coordinator" else None

    def here(self) -> int | None:
        """The data center of the process making a call now."""
        return self.dc_of(self.sched.current_process()) if self.dcs else None

    def across(self, a: int | None, b: Callable[[], int | None], given_up: Callable[[], bool]) -> bool:
        """A message of a call between data centers `a` and `b()` sent while they are cut
        off from each other: TCP sends it again until it gets through once they are not
        (True), unless its caller has given the call up meanwhile (False: the connection
        closed with it)."""
        while self.dc_cut(a, b()):
            world.sleep(0.25)
            if given_up():
                return False
        return True

    def dc_cut(self, a: int | None, b: int | None) -> bool:
        """Whether data centers `a` and `b` are cut off from each other now (one of them is
        cut off from the rest)."""
        if a is None or b is None or a == b:
            return False
        now = world.monotonic()
        return now < self.dc_cut_until[a] or now < self.dc_cut_until[b]

    def copies(self) -> int:
        r = self.rng.random()
        return 0 if r < self.cfg.drop else 2 if r < self.cfg.drop + self.cfg.duplicate else 1

    # --- the roles ----------------------------------------------------------------------

    def claim(self, server: int) -> WriterDriver | None:
        """`server` takes the log: the next epoch by a versioned write, a driver started."""
        proc = f"writer-{server}-{len(self.writers)}"
        with self.sched.process(proc):
            zk = self.ens.client()
            zk.start()
            meta, version = zkpaths.read_metadata(zk, LOG)
            new = meta.bump(server)
            v = zkpaths.cas_metadata(zk, new, version)
            if v is None:
                return None
            core = Writer(LOG, new.epoch, new, v, self.servers, time_marks=True)
            d = WriterDriver(_Host(self, server, zk), core)
            d.start()
        self.writers.append((proc, d))
        return d

    def proc(self, s: int) -> str:
        """The process of server `s` now (elections)."""
        return f"server-{s}-{self.incarnation[s] - 1}"

    def new_store(self, s: int) -> MemStore:
        """Log server `s`'s replica store, empty (a new disk)."""
        return MemStore()

    def server(self, s: int) -> None:
        """Log server `s` whole (log/node.py Node, as Node.open wires it, but for the
        simulated ZooKeeper, its replica store kept in memory across its crashes, and its
        peers reached over the simulated network)."""
        proc = f"server-{s}-{self.incarnation[s]}"
        self.incarnation[s] += 1
        with self.sched.process(proc):
            zk = self.ens.client()
            zk.start()
            topo = zkpaths.read_topology(zk)
            assert topo is not None
            node = Node(s, f"sim:{s}", zk, topo, self.stores[s],  # type: ignore[arg-type]
                        lease_s=self.cfg.lease_s, peer_links=lambda to: _Link(self, to, s))
            made = node.election.new_driver

            def new_driver(core: Writer) -> WriterDriver:
                d = made(core)
                if core.log_id != LOG:  # another log's: only settled at the end (nodes.py)
                    self.other_writers.append(d)
                    return d
                self._count_takeover(s)
                self.writers.append((proc, d))
                return d
            node.election.new_driver = new_driver
            if self.cfg.broken == "no-store-check":
                node.check_store = lambda: None  # type: ignore[method-assign]
            try:
                node.start()
            except StoreLost:  # its disk was lost: it stays down (the operator decommissions it)
                self.refused += 1
                self.lost.add(s)
                self.down.add(s)
                self.sched.crash(proc)
                return
            self.nodes[s] = node
            self.zks[s] = zk
            self.sessions[proc] = zk.client_id[0]

    def _count_takeover(self, s: int) -> None:
        """A new writer on server `s`: a takeover if the previous writer's server is still
        registered under the session it wrote with (dead or paused, its session not yet
        expired: log/takeover.py's followers did not wait for ZooKeeper; or running, its
        writer too, cut off from its followers), read from the ensemble's state, not
        through a client, so nothing under test is disturbed."""
        if not self.writers:
            return
        old_proc, old = self.writers[-1]
        o = old.node.server_id  # type: ignore[attr-defined]
        reg = self.ens.nodes.get(f"{zkpaths.SERVERS}/{o}")
        session = self.sessions.get(old_proc)
        if o != s and reg is not None and session is not None and reg.owner == session:
            if o in self.down or self.sched.paused(old_proc):
                self.takeovers += 1
            elif not old.failed.is_set():  # a writer that runs, across a link cut
                self.live_takeovers += 1

    def crash_server(self, s: int) -> None:
        """Server `s` dies: its tasks stop, and ZooKeeper expires its session after the timeout."""
        self.down.add(s)
        self.sched.crash(self.proc(s))
        zk = self.zks[s]
        zk.started = False

        def expire() -> None:
            world.sleep(self.ens.session_timeout_s)
            self.ens.expire(zk)
        world.spawn("zk-expiry", expire)

    def restart_server(self, s: int) -> None:
        self.down.discard(s)
        self.server(s)

    def current(self) -> WriterDriver | None:
        """The driver clients send to: the newest writing (as the SDK routes to the writer
        node's server); a stale one refuses or fails, and the client tries again."""
        live = [d for proc, d in self.writers if not d.failed.is_set()]
        return max(live, key=lambda d: d.epoch, default=None)

    def log_client(self) -> LogClient:
        zk = self.ens.client()
        zk.start()
        return LogClient(zk=zk, link=_LogLink(self))

    @contextmanager
    def running(self) -> Iterator[None]:
        """A client's or a fault's task, which the check waits for: it runs its last
        call out (to its deadline) after the stop, and what that call appends is in
        the logs the check reads."""
        self.appending += 1
        try:
            yield
        finally:
            self.appending -= 1

    def while_running(self, task: Callable[[Any], None], stop: Any) -> None:
        with self.running():
            task(stop)

    def appender(self, name: str, stop: Any) -> None:
        """A client appending through the real log client, one payload at a time."""
        client = self.log_client()
        with self.running():
            self._append_until(client, name, stop)

    def _append_until(self, client: LogClient, name: str, stop: Any) -> None:
        n = 0
        while not stop.is_set():
            shard, gen = NONE, 0
            if self.cfg.seals:  # one in five from a sender whose map is older than the newest
                shard = self.rng.randrange(SEAL_SHARDS)
                gen = self.generation.get(shard, 0)
                gen = self.rng.randint(0, gen) if self.rng.random() < 0.2 else gen
            payload = f"{name}-{n}" + (f"/s{shard}g{gen}" if self.cfg.seals else "")
            n += 1
            start = world.monotonic()
            try:
                r = client.append(LOG, [payload.encode()], timeout_s=5, tags=Tags((shard,), (gen,)))
                self.acks.append((r.epoch, r.first_position, payload.encode()))
                self.acked_at.append((world.monotonic(), r.first_position))
            except Refusal as e:
                if e.reason == refusals.SEALED:
                    self.sealed_refusals += 1  # refused whole: in the log nowhere after the seal
                else:
                    self.appends_failed += 1  # an unknown outcome: not acknowledged, so not checked
            took = world.monotonic() - start
            if took > 5 + 0.1:
                self.violations.append(f"an append took {took:.2f} s, past its 5 s deadline")
            world.sleep(self.rng.uniform(0, 0.05))

    def follower(self, stop: Any) -> None:
        """A follow of the log through the real log client (LogClient.follow, log/follow.py),
        as a storage node's tail thread does: each committed position once, in order."""
        client = self.log_client()

        def deliver(entries: Any) -> None:
            for e in entries:
                if e.position != self.followed_next:
                    self.violations.append(f"the follow delivered position {e.position}, "
                                           f"expecting {self.followed_next}")
                self.followed[e.position] = e.payload
                self.followed_next = e.position + 1

        def behind(why: str) -> None:
            self.violations.append(f"the follow was told it is behind a truncation: {why}")
            stop.wait()
        client.follow(LOG, lambda: self.followed_next, deliver, behind, stop)

    def reader(self, stop: Any) -> None:
        """ReadIndex rounds: each must cover every append acknowledged before it began."""
        client = self.log_client()
        while not stop.is_set():
            start = world.monotonic()
            before = max((p for t, p in self.acked_at if t < start), default=-1)
            idx = client.read_index(LOG)
            if idx is not None:
                self.read_indexes += 1
                if idx < before:
                    self.violations.append(f"a ReadIndex round started at {start:.3f} s returned {idx}, "
                                           f"below position {before}, acknowledged before it")
            world.sleep(self.rng.uniform(0, 0.2))

    def lease_reader(self, stop: Any) -> None:
        """Strong reads by a writer's read lease (log/lease.py), as a coordinator in the
        writer's process makes them (LogClient.read_index_by: Node.lease_index, no call),
        at a server that runs a writer of the log, now and then an old one that has not
        noticed it was replaced: the index must cover every append acknowledged, and every
        entry a writer made visible by sealing a segment, before the read."""
        while not stop.is_set():
            world.sleep(self.rng.uniform(0, 0.1))
            live = sorted((d.epoch, s) for s, node in self.nodes.items() if s not in self.down
                          and (d := node.writers.get(LOG)) is not None and not d.failed.is_set())
            if not live:
                continue
            s = live[0][1] if self.rng.random() < 0.5 else self.rng.choice(live)[1]
            # A read that comes while the process is stopped is served as it runs again,
            # racing what else woke it meanwhile (its ZooKeeper session's news among them)
            self.sched.spawn("lease-read", lambda s=s: self.lease_read(s), process=self.proc(s))

    def lease_read(self, s: int) -> None:
        before = max((p for _, p in self.acked_at), default=-1)
        sealed = max((seg.end for seg in self.metadata_now().segments if seg.end is not None), default=-1)
        idx = self.nodes[s].lease_index(LOG)
        if idx is None:
            return
        self.lease_reads += 1
        for what, last in (("acknowledged", before), ("sealed", sealed)):
            if idx < last:
                self.violations.append(f"server {s} answered a strong read by its lease at {idx}, missing "
                                       f"{what} position {last}")

    def metadata_now(self) -> LogMetadata:
        """The log's metadata as ZooKeeper holds it now, read from its state (no client:
        nothing under test is disturbed)."""
        return LogMetadata.from_json(self.ens.nodes[zkpaths.log_path(LOG)].data)

    def watch_segments(self, stop: Any) -> None:
        """After every change of the metadata (looked at every 0.1 s): no segment has two
        servers on one machine (with machines); every committed entry of a sealed segment
        is held by an ack quorum of the servers the metadata names for it, unless one of
        them lost its disk; and a server that re-replication put in a sealed segment's
        place holds every committed entry of it (log/rereplicate.py: recorded only then)."""
        seen: dict[int, tuple[tuple[int, ...], bool]] = {}  # segment epoch -> (its servers, sealed)
        while not stop.is_set():
            world.sleep(0.1)
            for seg in self.metadata_now().segments:
                was = seen.get(seg.epoch)
                if was == (seg.replicas, seg.sealed):
                    continue
                seen[seg.epoch] = seg.replicas, seg.sealed
                if failure_domains.shared(seg.replicas, self.machine_of) and (
                        was is None or not failure_domains.shared(was[0], self.machine_of)):
                    self.violations.append(f"segment {seg.epoch}'s servers {seg.replicas} share a machine")
                if not seg.sealed or self.lost & set(seg.replicas):
                    continue
                moved_in = set(seg.replicas) - set(was[0]) if was is not None and was[1] else set()
                self.check_copies(seg, moved_in)

    def check_copies(self, seg: Segment, moved_in: set[int]) -> None:
        """(Positions below the log's truncation point, as ZooKeeper has it, need no copy:
        a replica drops them when it hears of it, and one re-replicated there after it
        need not hold them.)"""
        assert seg.end is not None
        node = self.ens.nodes.get(zkpaths.truncate_path(LOG))
        truncated = int(json.loads(node.data)["before"]) if node is not None and node.data else 0
        for p in range(max(seg.first, truncated), seg.end + 1):
            has = [r for r in seg.replicas if self.store_of(r).get(LOG, seg.epoch, p) is not None
                   or p < getattr(self.store_of(r).load().get(LOG), "first", 0)]
            if len(has) < limits.ACK_QUORUM or moved_in - set(has):
                self.violations.append(f"committed position {p} of segment {seg.epoch} is held by {has} of "
                                       f"its servers {seg.replicas}" + (f" ({sorted(moved_in)} re-replicated "
                                                                          "there)" if moved_in else ""))
                return

    def client(self, name: str, stop: Any) -> None:
        n = 0
        while not stop.is_set():
            maybe = self.current() if self.cfg.elections else self.writers[-1][1]
            if maybe is None:
                world.sleep(0.1)
                continue
            d = maybe
            payload = f"{name}-{n}".encode()
            n += 1
            try:
                r = d.submit([payload]).result(timeout=5)
                self.acks.append((r.epoch, r.first_position, payload))
            except (WriterFailed, Busy, TimeoutError):
                pass  # an unknown outcome: not acknowledged, so not checked
            world.sleep(self.rng.uniform(0, 0.05))

    def main(self) -> Result:
        self.admin = self.ens.client()
        self.admin.start()
        # As the runner makes a cluster: the key-value logs leased from the start (log/zk.py
        # Topology.leased_below; create_kv then asks nothing more of the log).
        zkpaths.create_cluster(self.admin, self.cfg.logs, list(self.servers),
                               leased_below=self.kv_logs() if self.cfg.elections else 0)
        for srv in self.servers if self.cfg.machines or self.dcs else ():
            machines.record(self.admin, machines.LOG_SERVERS, srv, self.machine_of(srv))
        if self.cfg.elections:
            self.create_kv()
        self.zks: dict[int, Client] = {}
        if self.cfg.elections:
            for s in self.servers:
                self.server(s)
        else:
            self.claim(0)
        stop = world.event()
        self.acked_at: list[tuple[float, int]] = []  # (when, position) of the log client's acks
        self.start_more(stop)
        for c in range(self.cfg.clients):
            if self.cfg.elections:  # the servers' own Append answers, through the real log client
                world.spawn(f"client-{c}", lambda c=c: self.appender(f"c{c}", stop))
            else:
                world.spawn(f"client-{c}", lambda c=c: self.client(f"c{c}", stop))
        if self.cfg.seals:
            assert self.cfg.elections, "seals: the servers' Append answers, with elections"
            world.spawn("hand-offs", lambda: self.hand_offs(stop))
        if self.cfg.elections:
            world.spawn("reader", lambda: self.reader(stop))
            world.spawn("lease-reader", lambda: self.lease_reader(stop))
            world.spawn("segments", lambda: self.watch_segments(stop))
        if self.cfg.elections and self.follows:
            self.followed: dict[int, bytes] = {}
            self.followed_next = FIRST_POSITION
            self.follow_stop = world.event()
            self.follower(self.follow_stop)
        world.spawn("isolations", self.isolate)
        if self.cfg.link_cuts:
            world.spawn("link-cuts", self.cut_links)
        step = self.cfg.seconds / (self.cfg.crashes + 1)
        for _ in range(self.cfg.crashes):
            world.sleep(self.rng.uniform(0.5 * step, step))
            if self.cfg.elections:
                s = self.mostly_the_writers()
                if self.rng.random() < 0.5:
                    self.crash_server(s)
                    world.sleep(self.rng.uniform(0.5, 0.5 * step))
                    # A disk lost, unless one is lost already (three servers keep a quorum
                    # with one gone for good; the operator would replace it)
                    if self.cfg.wipes and not self.lost and self.rng.random() < 0.5:
                        self.stores[s] = self.new_store(s)
                        self.wiped += 1
                    self.restart_server(s)
                else:  # a SIGSTOP: past the session timeout or not, its session cut as long
                    seconds = self.rng.uniform(0.5, 2 * self.ens.session_timeout_s)
                    self.sched.pause(self.proc(s), seconds)
                    self.ens.partition(self.zks[s], seconds)
                continue
            proc, _ = self.writers[-1]
            self.sched.crash(proc)
            while self.claim(self.rng.choice(self.servers)) is None:
                world.sleep(0.1)
        world.sleep(step)
        stop.set()
        while self.appending:  # each ends its last append by its deadline: every ack is in
            world.sleep(0.1)
        self.after_faults()
        world.sleep(1)  # the last writer settles: its LAC reaches the replicas
        self.check()
        return Result(self.violations, len(self.acks), len(self.writers), self.sched.switches,
                      self.sched.now, replicate_calls=self.replicate_calls, replicated=self.replicated,
                      takeovers=self.takeovers, live_takeovers=self.live_takeovers, wiped=self.wiped,
                      refused=self.refused,
                      appends_failed=self.appends_failed, read_indexes=self.read_indexes,
                      followed=self.follow_delivered, lease_reads=self.lease_reads,
                      sealed_refusals=self.sealed_refusals, hand_offs=self.hand_offs_made,
                      buggified=dict(self.sched.buggified))

    def store_of(self, s: int) -> Any:
        """Server `s`'s store, as a check reads it (a server down: its disk's)."""
        return self.stores[s]

    def hand_offs(self, stop: Any) -> None:
        """A hand-off's driver, as docs/log.md step 3 has it: a shard sealed (the log
        service's list first, then the hand-off record, appended until acknowledged), and
        later opened again at its next generation (an open record, the list, an open
        record again: a writer that took the log over after the first read the shard as
        sealed), which the senders then learn (as from the map). Each step retried until
        done, as the driver taken up again after a crash would."""
        zk = self.ens.client()
        zk.start()
        client = LogClient(zk=zk, link=_LogLink(self))
        sealed: set[int] = set()
        n = 0

        def record(kind: str, shard: int, tags: Tags) -> None:
            nonlocal n
            while True:
                n += 1
                try:
                    client.append(LOG, [f"{kind}/s{shard}/{n}".encode()], timeout_s=5, tags=tags)
                    return
                except Refusal:
                    world.sleep(0.1)

        while not stop.is_set():
            world.sleep(self.rng.uniform(0.2, 2.0))
            shard = self.rng.randrange(SEAL_SHARDS)
            gen = self.generation.get(shard, 0)
            if shard not in sealed:
                zkpaths.change_seal(zk, LOG, shard, Stint(gen, to=1))
                record("seal", shard, Tags((shard,), seal=shard, to=1, generation=gen))
                sealed.add(shard)
            else:
                opening = Tags((shard,), open=shard, generation=gen + 1)
                record(f"open{gen + 1}", shard, opening)
                zkpaths.change_seal(zk, LOG, shard, Stint(gen + 1))
                record(f"open{gen + 1}", shard, opening)
                sealed.discard(shard)
                self.generation[shard] = gen + 1
            self.hand_offs_made += 1

    def check_seals(self, meta: LogMetadata, end: int) -> None:
        """Every committed entry of a shard stands in the shard's stint of the generation
        its sender named: after the record that opened it at that generation (none for
        generation 0), before the next hand-off record (seals)."""
        stint: dict[int, tuple[int, int]] = {}  # shard -> (generation, position of its hand-off or -1)
        for p in range(FIRST_POSITION, end + 1):
            held = self.held(meta, p)
            if len(held) != 1:
                continue  # reported by check()
            kind, _, rest = next(iter(held)).decode().partition("/s")
            if not rest:
                continue  # a time mark
            shard, _, gen = rest.split("/")[0].partition("g")
            s, (at_gen, sealed) = int(shard), stint.get(int(shard), (0, -1))
            if kind == "seal":
                stint[s] = (at_gen, sealed if sealed >= 0 else p)
            elif kind.startswith("open"):
                stint[s] = (int(kind[4:]), -1)
            elif sealed >= 0:
                self.violations.append(f"position {p} holds {kind!r} of shard {shard}, sealed at "
                                       f"{sealed} (its hand-off record)")
            elif int(gen) != at_gen:
                self.violations.append(f"position {p} holds {kind!r} of shard {shard} at generation "
                                       f"{gen}, in its stint of generation {at_gen}")

    def kv_logs(self) -> int:
        """The logs the key-value store uses: here, every log."""
        return self.cfg.logs

    def create_kv(self) -> None:
        """The key-value topology (catalog/registry.py), before the servers start: the log
        is a key-value log, whose writers mark time when idle and hold read leases while
        strong reads ask (log/election.py)."""
        registry.create_kv(self.admin, 1, [], logs=self.kv_logs())

    def after_faults(self) -> None:
        """Once the faults and the workload have ended, before the checks (tests/sim/nodes.py)."""

    def start_more(self, stop: Any) -> None:
        """More roles beside the log's, until `stop` is set (tests/sim/nodes.py)."""

    def isolate(self) -> None:
        for _ in range(self.cfg.isolations):
            world.sleep(self.rng.uniform(0, self.cfg.seconds / self.cfg.isolations))
            s = self.rng.choice(self.servers)
            self.cut_until[s] = world.monotonic() + self.rng.uniform(0.1, 1.0)

    def mostly_the_writers(self) -> int:
        """A server for a fault: seven times in ten the current writer's, else any not lost."""
        d = self.current()
        return (d.node.server_id if d is not None and self.rng.random() < 0.7  # type: ignore[attr-defined]
                else self.rng.choice([x for x in self.servers if x not in self.lost]))

    def cut_links(self) -> None:
        for _ in range(self.cfg.link_cuts):
            world.sleep(self.rng.uniform(0, self.cfg.seconds / self.cfg.link_cuts))
            a = self.mostly_the_writers()
            b = self.rng.choice([x for x in self.servers if x != a])
            self.links_cut[frozenset((a, b))] = world.monotonic() + self.rng.uniform(0.5, 3.0)

    def settled(self, log_id: int = LOG) -> WriterDriver | None:
        """The writer of the log's newest epoch once it has recovered (its LAC then covers
        every committed position), waiting for one up to 30 s."""
        deadline = world.monotonic() + 30
        while world.monotonic() < deadline:
            epoch = zkpaths.read_metadata(self.admin, log_id)[0].epoch
            mine = [d for _, d in self.writers] if log_id == LOG else [
                d for d in self.other_writers if d.core.log_id == log_id]
            d = next((d for d in mine if d.epoch == epoch and not d.failed.is_set()), None)
            if d is not None and d.core.state is State.WRITING:
                return d
            world.sleep(0.5)
        return None

    def wait_follow(self, final: WriterDriver) -> None:
        """The follow reaches the settled writer's committed end within 10 s, then stops."""
        end = reading.committed_end(zkpaths.read_metadata(self.admin, LOG)[0], final.core.lac)
        deadline = world.monotonic() + 10
        while self.followed_next <= end and world.monotonic() < deadline:
            world.sleep(0.1)
        self.follow_stop.set()
        if self.followed_next <= end:
            self.violations.append(f"the follow reached position {self.followed_next - 1} only, "
                                   f"of {end} committed")

    def check_followed(self, meta: LogMetadata, end: int) -> None:
        """What the follow delivered up to the committed end is what the replicas hold."""
        for p, payload in self.followed.items():
            if p > end:
                continue  # delivered from a newer writer than the one checked
            held = self.held(meta, p)
            if held != {payload}:
                self.violations.append(f"the follow delivered {payload!r} at {p}; the replicas hold {held}")
        self.follow_delivered += len(self.followed)

    def held(self, meta: LogMetadata, p: int) -> set[bytes]:
        """The payloads the replicas hold at position `p` of the log `meta` describes."""
        seg = meta.segment_of(p)
        return {e.payload for s in self.servers
                if seg is not None and (e := self.store_of(s).get(meta.log_id, seg.epoch, p)) is not None}

    def check(self) -> None:
        final = self.settled()
        if final is None:
            self.violations.append("no writer recovered the log within 30 s of the end")
            return
        if self.cfg.elections:
            if self.follows:
                self.wait_follow(final)
            final = self.settled() or final  # a paused writer may have been taken over meanwhile
            # An older writer that woke up found the log taken and stopped.
            stale = [f"{proc} (epoch {d.epoch})" for proc, d in self.writers
                     if d.epoch < final.epoch and not d.failed.is_set() and proc not in self.sched.dead
                     and self.sched.paused_until.get(proc, 0.0) < world.monotonic() - 2]  # awake 2 s
            if stale:
                self.violations.append(f"writers of older epochs still running at the end: {stale}")
        meta, _ = zkpaths.read_metadata(self.admin, LOG)
        last = final.core
        end = reading.committed_end(meta, last.lac)
        self.checked = meta, end  # what a subclass's checks go on from
        if self.cfg.elections and self.follows:
            self.check_followed(meta, end)
        if self.cfg.seals:
            self.check_seals(meta, end)
        last_ts = 0
        for p in range(FIRST_POSITION, end + 1):
            held = self.held(meta, p)
            if len(held) != 1:
                self.violations.append(f"committed position {p} holds {held}")
            seg = meta.segment_of(p)
            ts = [e.timestamp_ms for s in self.servers
                  if seg is not None and (e := self.store_of(s).get(LOG, seg.epoch, p)) is not None]
            if ts and min(ts) < last_ts:  # the log's time never goes back
                self.violations.append(f"position {p} has timestamp {min(ts)}, below an earlier {last_ts}")
            last_ts = max(ts, default=last_ts)
        for epoch, p, payload in self.acks + self.server_acks:
            if p > end:
                self.violations.append(f"acked position {p} (epoch {epoch}) beyond the end {end}")
                continue
            copies = self.held(meta, p)
            if copies != {payload}:
                self.violations.append(f"acked position {p} (epoch {epoch}) holds {copies}, not {payload!r}")


def run(seed: int, cfg: Config | None = None) -> Result:
    sim = WriterSim(seed, cfg)
    changes = ENSEMBLE_CHANGES.labels(log=str(LOG))
    before = changes._value.get()
    with swapped(broken_rules(sim, sim.cfg.broken)):
        r = sim.sched.run(sim.main)
    r.ensemble_changes = int(changes._value.get() - before)
    r.failures = sim.sched.failures + sim.ens.errors
    return r
