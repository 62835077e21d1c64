"""A deterministic simulation of one replicated log: the pure writer and replica cores,
a seeded network (loss, delay, duplication, reordering), a fake ZooKeeper with versioned
writes, crashes and restarts of servers and writers, competing writers, truncation.

`run(seed)` replays exactly from its seed and returns the list of invariant violations
(empty when the run is correct). The invariants are DESIGN.md's six for the log, with a
pool of servers larger than an ensemble (Config.servers) the read index's bound and the
completeness of re-replicated segments too."""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from log import lease, reading, rereplicate
from log.ensemble import NoEnsemble, choose
from log.entry import Entry
from log.limits import ENSEMBLE_SIZE
from log.messages import AddEntries, Fence, ReadRange
from log.metadata import LogMetadata
from log.read_index import Stale, TailReply, read_index, replicas_to_ask
from log.replica import ReplicaCore
from log.store import MemStore
from log.takeover import Takeover
from log.writer import Acked, ChangeEnsemble, Failed, Send, State, WriteMetadata, Writer
from tests.sim import broken

LOG = 0


class FakeZK:
    """Versioned nodes: the only way to change metadata is a compare-and-set."""

    def __init__(self) -> None:
        self.meta = LogMetadata(LOG, epoch=0)
        self.history = [self.meta]  # every version written: what a reader may have cached
        self.version = 0
        self.truncated_before = 0

    def cas(self, new: LogMetadata, version: int) -> tuple[bool, int]:
        if version != self.version:
            return False, self.version
        self.meta = new
        self.version += 1
        self.history.append(new)
        return True, self.version


@dataclass(order=True)
class _Msg:
    at: int
    seq: int
    kind: str = field(compare=False)  # "req" (writer -> replica) | "rep" (replica -> writer)
    writer_id: int = field(compare=False)
    replica: int = field(compare=False)
    req: Any = field(compare=False)
    rep: Any = field(compare=False, default=None)


@dataclass
class Config:
    steps: int = 1000
    drop: float = 0.1
    duplicate: float = 0.05
    delay_max: int = 30
    # Log servers in the pool; each segment opens on an ensemble of ENSEMBLE_SIZE of them
    # (log/ensemble.py), so with more than three the ensembles change from writer to writer.
    servers: int = 3
    # Followers take the log over from a writer they have lost (log/takeover.py): quiet
    # writers are probed, and two failed probes make the follower claim at once; writers
    # are also paused (they take no step, then wake up with what was waiting for them).
    # Probes of a live writer fail now and then (a slow network): a takeover of a writer
    # that is alive. Times in the simulation's units (milliseconds of `now`).
    takeover: bool = False
    # A writer moves its open segment off a copy that is down (log/ensemble_change.py,
    # Writer.change_ensemble): "rule" closes it at the LAC and opens the next on live
    # servers, now and then on a false alarm too (the copy was only slow); "off": never.
    # (Its broken variants, and those of ReadIndex rounds, takeovers, re-replication and
    # placement, run on whole log servers: tests/sim/writers.py.)
    ensemble_change: str = "rule"
    # Read leases (log/lease.py): writers answer strong reads by their LAC while their
    # lease holds (lease_probe), every server's clock running at its own rate within
    # lease.DRIFT_MAX of the simulation's. "rule" as built; "no-wait" lets a new writer seal
    # without waiting out the replicas' promises (broken, for the checker; a writer serving
    # after its lease ran out is caught on whole servers: tests/sim/writers.py); "off": no leases.
    lease: str = "off"
    lease_s: float = 1.0  # 1,000 units of `now`: longer than a takeover takes (300 quiet)


class _NoLeaseWait(Writer):
    """Broken (Config.lease "no-wait"): ignores the replicas' lease promises when it fences."""

    on_fence_reply = broken.no_lease_wait


@dataclass
class Ack:
    epoch: int
    first: int
    payloads: list[bytes]
    ts: int
    at: int


class Sim:
    def __init__(self, seed: int, cfg: Config | None = None) -> None:
        self.seed = seed
        self.cfg = cfg or Config()
        self.rng = random.Random(seed)
        self.now = 0
        self.seq = 0
        self.zk = FakeZK()
        self.servers = tuple(range(self.cfg.servers))
        # Each server's clock (seconds): its own rate, at either end of the drift allowed.
        # (Drawn from a generator of their own: the runs without leases stay as they were.)
        d, clocks = lease.DRIFT_MAX, random.Random(seed * 7919 + 1)
        self.rates = {x: clocks.choice((1 - d, 1 + d)) for x in self.servers}
        self.offsets = {x: clocks.uniform(0, 1000) for x in self.servers}
        self.lease_s = self.cfg.lease_s if self.cfg.lease != "off" else 0.0
        self.stores = {s: MemStore() for s in self.servers}
        self.replicas: dict[int, ReplicaCore | None] = {s: self._new_replica(s) for s in self.servers}
        self.writers: dict[int, Writer] = {}  # alive writers by id
        self.next_writer_id = 0
        self.net: list[_Msg] = []
        self.pending_seals: list[tuple[int, int, WriteMetadata | ChangeEnsemble]] = []
        self.ensemble_changes = 0
        self.tokens: dict[int, list[bytes]] = {}
        self.next_token = 0
        self.acks: list[Ack] = []
        self.reads: dict[int, Entry] = {}
        self.violations: list[str] = []
        self.trace: list[str] = []
        self.lossy = True
        self.marks = 0  # time marks appended by idle writers
        self.probes = 0  # ReadIndex rounds that computed an index
        self.acked_last = -1  # the highest position acknowledged so far
        self.moved_in: set[tuple[int, int]] = set()  # (segment epoch, server) re-replications
        # log/takeover.py's rule in each server, its times scaled to the simulation's clock.
        self.takeovers = {x: Takeover(quiet_s=300, probe_gap_s=20, settle_s=400) for x in self.servers}
        self.server_of: dict[int, int] = {}  # writer id -> the server it runs on
        self.paused_until: dict[int, int] = {}  # writer id -> when it wakes
        self.taken_over = 0
        self.lease_reads = 0  # strong reads a writer answered by its lease
        self.isolated_until: dict[int, int] = {}  # writer id -> when its network comes back

    # ------------------------------------------------------------ components
    def clock(self, server: int) -> Callable[[], float]:
        """`server`'s lease clock: seconds at its own rate (`now` counts milliseconds)."""
        return lambda: self.offsets[server] + self.rates[server] * self.now / 1000

    def _new_replica(self, s: int) -> ReplicaCore:
        core = ReplicaCore(s, self.stores[s], log_count=1, clock=self.clock(s), lease_s=self.lease_s)
        # On start a server applies the truncation point it finds in ZooKeeper.
        if hasattr(self, "zk") and self.zk.truncated_before:
            core.truncate(LOG, self.zk.truncated_before)
        return core

    def _send(self, kind: str, writer_id: int, replica: int, req: Any, rep: Any = None) -> None:
        if self.lossy and self.rng.random() < self.cfg.drop:
            return
        if self._isolated(writer_id):
            return
        copies = 2 if self.lossy and self.rng.random() < self.cfg.duplicate else 1
        for _ in range(copies):
            self.seq += 1
            at = self.now + 1 + self.rng.randrange(self.cfg.delay_max)
            heapq.heappush(self.net, _Msg(at, self.seq, kind, writer_id, replica, req, rep))

    def _drain(self, wid: int) -> None:
        w = self.writers.get(wid)
        if w is None:
            return
        for out in w.take_outbox():
            if isinstance(out, Send):
                self._send("req", wid, out.to, out.msg)
            elif isinstance(out, WriteMetadata | ChangeEnsemble):
                self.pending_seals.append((self.now + 1 + self.rng.randrange(10), wid, out))
            elif isinstance(out, Acked):
                self.acks.append(Ack(out.epoch, out.first_position, self.tokens[out.token],
                                     out.timestamp_ms, self.now))
                self.acked_last = max(self.acked_last, out.first_position + out.count - 1)
            elif isinstance(out, Failed):
                pass

    # ------------------------------------------------------------ events
    def deliver(self) -> None:
        for _ in range(self.rng.randrange(1, 6)):
            if self.net:
                self._deliver_one()

    def _deliver_one(self) -> None:
        m = heapq.heappop(self.net)
        self.now = max(self.now, m.at)
        if m.kind == "req":
            core = self.replicas.get(m.replica)
            if core is None:
                return  # crashed: the request is lost
            rep: Any = core.on_request(m.req)
            if isinstance(m.req, AddEntries) and m.req.epoch == self.zk.meta.epoch:
                self.takeovers[m.replica].heard(LOG, self.now)
            self._send("rep", m.writer_id, m.replica, m.req, rep)
            return
        w = self.writers.get(m.writer_id)
        if w is None or self._isolated(m.writer_id):
            return
        if self._paused(m.writer_id):  # it reads its replies when it wakes
            heapq.heappush(self.net, replace(m, at=self.paused_until[m.writer_id]))
            return
        if isinstance(m.req, Fence):
            w.on_fence_reply(m.replica, m.rep)
        elif isinstance(m.req, AddEntries):
            w.on_add_reply(m.replica, m.req, m.rep)
        elif isinstance(m.req, ReadRange):
            w.on_read_reply(m.replica, m.req, m.rep)
        self._drain(m.writer_id)

    def seal(self) -> None:
        self.pending_seals.sort(key=lambda t: t[0])
        at, wid, out = self.pending_seals.pop(0)
        self.now = max(self.now, at)
        w = self.writers.get(wid)
        if isinstance(out, ChangeEnsemble):
            # The shell's read-check-write (log/node.py): the metadata as it is now.
            new = self.zk.meta.ensemble_changed(out.epoch, out.end, out.last_ts, out.replicas)
            ok = new is not None and self.zk.cas(new, self.zk.version)[0]
            if ok:
                self.ensemble_changes += 1
                self.trace.append(f"t={self.now} ensemble change: segment {out.epoch} sealed at "
                                  f"{out.end}, epoch {out.epoch + 1} on {out.replicas}")
            if w is not None:
                w.on_ensemble_changed(new if ok else None, self.zk.version)
                self._drain(wid)
            return
        ok, v = self.zk.cas(out.metadata, out.expected_version)
        if w is not None:
            w.on_metadata_written(ok, v)
            self._drain(wid)

    def elect(self, server: int | None = None) -> None:
        """A server claims the log: bump the epoch with a versioned write, start a writer."""
        meta, version = self.zk.meta, self.zk.version
        if server is None:
            server = self.rng.choice(self.servers)
        # The servers the claimant sees registered: the live ones, and now and then one
        # that has just died (its ZooKeeper session not expired yet).
        seen = [x for x in self.servers if self.replicas[x] is not None or self.rng.random() < 0.2]
        load = {x: self.rng.randrange(4) for x in self.servers}  # other logs' segments
        try:
            ensemble = choose(server, seen, load, pool=self.servers)
        except NoEnsemble:
            return
        ok, v = self.zk.cas(meta.bump(server), version)
        if not ok:
            return
        meta = self.zk.meta
        wid = self.next_writer_id
        self.next_writer_id += 1
        cls = _NoLeaseWait if self.cfg.lease == "no-wait" else Writer
        w = cls(LOG, meta.epoch, meta, v, ensemble, time_marks=True, lease_s=self.lease_s,
                clock=self.clock(server))
        self.writers[wid] = w
        self.server_of[wid] = server
        self.trace.append(f"t={self.now} writer {wid} epoch {w.epoch} ensemble {ensemble}")
        w.start(self.now)
        self._drain(wid)

    def _paused(self, wid: int) -> bool:
        return self.paused_until.get(wid, -1) > self.now

    def _isolated(self, wid: int) -> bool:
        return self.isolated_until.get(wid, -1) > self.now

    def isolate_writer(self) -> None:
        """A writer's network goes (a partition): it runs on, and whatever it sends or is
        sent is lost, until it comes back."""
        live = [wid for wid, w in self.writers.items()
                if w.state is State.WRITING and not self._isolated(wid)]
        if live:
            wid = self.rng.choice(live)
            self.isolated_until[wid] = self.now + self.rng.randrange(100, 3000)
            self.trace.append(f"t={self.now} isolate writer {wid} until {self.isolated_until[wid]}")

    def pause_writer(self) -> None:
        """A writer's process stops (SIGSTOP, a long GC) and wakes up later: meanwhile it
        takes no step; its replies wait for it."""
        live = [wid for wid in self.writers if not self._paused(wid)]
        if live:
            wid = self.rng.choice(live)
            self.paused_until[wid] = self.now + self.rng.randrange(100, 1500)
            self.trace.append(f"t={self.now} pause writer {wid} until {self.paused_until[wid]}")

    def watch_writer(self) -> None:
        """Each live follower of the last segment runs log/takeover.py on the log's writer:
        probes it when suspected, and claims the log after two failed probes."""
        meta = self.zk.meta
        seg = meta.last_segment
        if seg is None or seg.sealed:
            return
        current = [wid for wid, w in self.writers.items() if w.epoch == meta.epoch]
        writer = meta.writer
        now_s = self.now
        for f in seg.replicas:
            if f == writer or self.replicas[f] is None:
                continue
            t = self.takeovers[f]
            t.writing(LOG, writer, now_s)
            if not t.probe_due(LOG, now_s):
                continue
            answered = (any(not self._paused(wid) and not self._isolated(wid) for wid in current)
                        and self.rng.random() > 0.05)
            if t.probed(LOG, answered, now_s):
                t.forget(LOG)
                self.taken_over += 1
                self.trace.append(f"t={self.now} server {f} takes the log over from server {writer}")
                self.elect(server=f)
                return

    def change_ensemble(self) -> None:
        """A writer whose open segment has a copy down moves the segment to live servers
        (log/ensemble_change.py decides when; here, whenever a copy is down, and now and
        then on a false alarm): it closes the segment at its LAC and opens the next."""
        live_writers = [wid for wid, w in self.writers.items()
                        if w.state is State.WRITING and not self._paused(wid)]
        if not live_writers:
            return
        wid = self.rng.choice(live_writers)
        w = self.writers[wid]
        down = {r for r in w.replicas if self.replicas[r] is None}
        if not down and self.rng.random() > 0.2:
            return
        live = [x for x in self.servers if self.replicas[x] is not None and x not in down]
        load = {x: self.rng.randrange(4) for x in self.servers}
        try:
            ensemble = choose(self.server_of.get(wid, w.replicas[0]), live, load)
        except NoEnsemble:
            return
        if any(self.replicas[x] is None for x in ensemble):
            return  # no whole ensemble of live servers: it stays on what lives
        self.trace.append(f"t={self.now} writer {wid} changes ensemble {w.replicas} -> {ensemble}"
                          f" (down: {sorted(down)})")
        w.change_ensemble(ensemble)
        self._drain(wid)

    def append(self) -> None:
        live = [wid for wid, w in self.writers.items() if w.state is State.WRITING and not self._paused(wid)]
        if not live:
            return
        # A replaced writer that has not noticed yet is the dangerous one: favour it.
        wid = min(live) if self.rng.random() < 0.3 else self.rng.choice(live)
        tok = self.next_token
        self.next_token += 1
        payloads = self.new_payloads(tok)
        self.tokens[tok] = payloads
        self.writers[wid].append(tok, payloads, self.now + self.rng.randrange(-50, 50) + 1000)
        self._drain(wid)

    def new_payloads(self, tok: int) -> list[bytes]:
        """What an append carries (a subclass appends real records)."""
        return [f"p{tok}.{i}".encode() for i in range(self.rng.randrange(1, 4))]

    def tick(self) -> None:
        self.now += 1 + self.rng.randrange(100)
        for wid, w in list(self.writers.items()):
            if self._paused(wid):
                continue
            w.tick(self.now)
            # An idle writer's time mark (log/driver.py) is an append like any other, stamped
            # by the same clock the appends use (a writer's clock is ahead of `now` here).
            if w.time_mark_due(self.now + 1000):
                tok = self.next_token
                self.next_token += 1
                self.tokens[tok] = [b""]
                self.marks += 1
                w.append(tok, [b""], self.now + 1000)
            if self.rng.random() < 0.5:
                w.push_lac()
            if self.lease_s and w.lease_renewal_due(self.clock(self.server_of[wid])()):
                w.push_lac(force=True)
            self._drain(wid)

    def crash_replica(self) -> None:
        alive = [s for s, c in self.replicas.items() if c is not None]
        if len(alive) <= 1:
            return
        s = self.rng.choice(alive)
        self.replicas[s] = None
        self.trace.append(f"t={self.now} crash server {s}")

    def restart_replica(self) -> None:
        dead = [s for s, c in self.replicas.items() if c is None]
        if dead:
            s = self.rng.choice(dead)
            self.replicas[s] = self._new_replica(s)
            self.trace.append(f"t={self.now} restart server {s}")

    def crash_writer(self) -> None:
        if self.writers:
            wid = self.rng.choice(sorted(self.writers))
            del self.writers[wid]
            self.trace.append(f"t={self.now} crash writer {wid}")
            if self.cfg.takeover and self.rng.random() < 0.8:  # its streams to the followers close
                for t in self.takeovers.values():
                    t.lost(LOG)

    def truncate(self) -> None:
        acked = [a.first + len(a.payloads) for a in self.acks]
        if not acked:
            return
        p = self.rng.randrange(self.zk.truncated_before, max(acked) + 1)
        if p <= self.zk.truncated_before:
            return
        self.zk.truncated_before = p
        self.trace.append(f"t={self.now} truncate before {p}")
        for core in self.replicas.values():
            if core is not None:
                core.truncate(LOG, p)

    def read(self) -> None:
        """A reader asks one replica for committed entries."""
        alive = [s for s, c in self.replicas.items() if c is not None]
        if not alive:
            return
        s = self.rng.choice(alive)
        core = self.replicas[s]
        assert core is not None
        meta = self.zk.meta
        seg = meta.last_segment
        if seg is None:
            return
        end = reading.committed_end(meta, core.lac(LOG, seg.epoch))
        first = core.first(LOG)
        if end < first:
            return
        start = self.rng.randrange(first, end + 1)
        for p in range(start, min(end, start + 5) + 1):
            sg = meta.segment_of(p)
            if sg is None:
                self.violations.append(f"committed position {p} belongs to no segment")
                return
            e = self.stores[s].get(LOG, sg.epoch, p)
            if e is None:
                continue  # the server would fetch it from a peer
            prev = self.reads.get(p)
            if prev is not None and prev != e:
                self.violations.append(f"position {p} read as {prev} and later as {e}")
            self.reads[p] = e

    def read_index_probe(self) -> None:
        """A coordinator's ReadIndex round, with the metadata it cached a while ago (maybe
        stale): the index must cover every entry acknowledged before the round, whatever
        ensemble holds it (log/read_index.py)."""
        cached = self.rng.choice(self.zk.history[-4:])
        p = self._read_index(cached, fresh=False)
        if p == "stale":
            p = self._read_index(self.zk.meta, fresh=True)  # read again: after the read arrived
        assert p != "stale"
        if p is None:
            return  # too few replicas answered: the read goes through the log
        self.probes += 1
        last = self.acked_last  # the highest acknowledged position so far
        if last >= self.zk.truncated_before and last > p:
            self.violations.append(f"read index {p} misses acknowledged position {last} "
                                   f"(cached epoch {cached.epoch}, now {self.zk.meta.epoch})")

    def lease_probe(self) -> None:
        """A strong read at a writer that is running: by its lease, if it holds one (log/
        lease.py). The index must cover every entry acknowledged, and every entry another
        writer has made visible by sealing a segment, before the read."""
        live = [wid for wid, w in self.writers.items() if w.state is State.WRITING and not self._paused(wid)]
        if not live:
            return
        # A replaced writer that has not noticed yet is the dangerous one: favour it.
        wid = min(live) if self.rng.random() < 0.5 else self.rng.choice(live)
        w = self.writers[wid]
        p = w.lease_index(self.clock(self.server_of[wid])())
        self._drain(wid)
        if p is None:
            return
        self.lease_reads += 1
        sealed = [seg.end for seg in self.zk.meta.segments if seg.end is not None]
        for what, last in (("acknowledged", self.acked_last), ("sealed", max(sealed, default=-1))):
            if last >= self.zk.truncated_before and last > p:
                self.violations.append(f"t={self.now} writer {wid} (epoch {w.epoch}) answered by its lease "
                                       f"at {p}, missing {what} position {last} (log epoch "
                                       f"{self.zk.meta.epoch})")

    def _read_index(self, meta: LogMetadata, fresh: bool) -> int | None | str:
        replies = {}
        for r in replicas_to_ask(meta):
            core = self.replicas.get(r)
            if core is not None and self.rng.random() > 0.2:  # down, or too slow to count
                replies[r] = TailReply(core.tail(LOG), core.fenced_epoch(LOG))
        try:
            return read_index(meta, replies, fresh)
        except Stale:
            return "stale"

    def rereplicate(self) -> None:
        """A sealed segment whose replica is down is copied to a live server that holds no
        copy, and the move recorded by a versioned write; the mover may die part-way."""
        meta, version = self.zk.meta, self.zk.version
        live = [x for x, c in self.replicas.items() if c is not None]
        moves = rereplicate.plan(meta, live, {})
        if not moves:
            return
        mv = self.rng.choice(moves)
        seg = next(x for x in meta.segments if x.epoch == mv.epoch)
        trunc = self.zk.truncated_before
        held: dict[int, Entry] = {}
        for r in seg.replicas:
            if self.replicas[r] is not None:
                for p in rereplicate.committed_range(seg, trunc):
                    e = self.stores[r].get(LOG, seg.epoch, p)
                    if e is not None:
                        held.setdefault(p, e)
        target = self.replicas[mv.target]
        assert target is not None
        copy = rereplicate.to_copy(seg, trunc, held)
        if self.rng.random() < 0.2:  # the mover dies part-way: some copied, nothing recorded
            target.fill(LOG, copy[: self.rng.randrange(len(copy) + 1)])
            self.trace.append(f"t={self.now} re-replication of segment {mv.epoch} to {mv.target} died")
            return
        target.fill(LOG, copy)
        has = [p for p in rereplicate.committed_range(seg, trunc)
               if self.stores[mv.target].get(LOG, seg.epoch, p) is not None]
        if not rereplicate.complete(seg, trunc, has):
            return  # a committed entry no live replica holds now: try again later
        ok, _ = self.zk.cas(rereplicate.recorded(meta, mv), version)
        if ok:
            self.moved_in.add((mv.epoch, mv.target))
            self.trace.append(f"t={self.now} segment {mv.epoch} re-replicated from {mv.dead} to {mv.target}")

    # ------------------------------------------------------------ the run
    def events(self) -> list[tuple[Callable[[], None], float]]:
        """What may happen at a step, with its weight (a subclass adds its own)."""
        events: list[tuple[Callable[[], None], float]] = [
            (self.deliver, 60), (self.append, 15), (self.tick, 8), (self.elect, 0.7),
            (self.crash_replica, 0.5), (self.restart_replica, 1), (self.crash_writer, 0.4),
            (self.seal, 3), (self.read, 8), (self.truncate, 0.3), (self.read_index_probe, 3),
        ]
        if len(self.servers) > ENSEMBLE_SIZE:
            events.append((self.rereplicate, 1))
        if self.cfg.takeover:
            events += [(self.watch_writer, 6), (self.pause_writer, 0.4)]
        if self.cfg.ensemble_change != "off":
            events.append((self.change_ensemble, 1.5))
        if self.lease_s:
            # Metadata writes quicker than the lease: a new writer could seal within the old
            # writer's lease, if it did not wait.
            events = [(f, 12 if f == self.seal else w) for f, w in events]
            events += [(self.lease_probe, 4), (self.isolate_writer, 0.6)]
        return events

    def run(self) -> list[str]:
        events = self.events()
        fns = [f for f, _ in events]
        weights = [w for _, w in events]
        self.elect()
        for _ in range(self.cfg.steps):
            f = self.rng.choices(fns, weights)[0]
            if f == self.deliver and not self.net:
                f = self.tick
            if f == self.seal and not self.pending_seals:
                continue
            if f == self.append and not self.writers and self.rng.random() < 0.2:
                f = self.elect  # nobody is writing: a server notices and takes over
            f()
        self._settle()
        self._check()
        return self.violations

    def _settle(self) -> None:
        """Heal: restart every server, stop losing messages, elect a final writer, and let
        it recover and append once. It must get there (liveness)."""
        self.lossy = False
        for s in self.servers:
            if self.replicas[s] is None:
                self.replicas[s] = self._new_replica(s)
        self.writers.clear()
        self.paused_until.clear()
        self.isolated_until.clear()
        self.net.clear()
        self.pending_seals.clear()
        while True:
            self.elect()
            if self.writers:
                break
        (_wid, w), = self.writers.items()
        for _ in range(10_000):
            if w.state is State.WRITING and not self.acks_pending(w):
                break
            if w.state is State.FAILED:
                self.violations.append(f"final writer failed: {w.failure}")
                return
            if w.state is State.WRITING and w.next_position - 1 == w.lac:
                self.append()
            if self.net:
                self._deliver_one()
            elif self.pending_seals:
                self.seal()
            else:
                self.tick()
        else:
            self.violations.append(f"final writer made no progress (state {w.state})")
        self.final_writer = w

    def acks_pending(self, w: Writer) -> bool:
        return w.next_position - 1 > w.lac or not any(a.epoch == w.epoch for a in self.acks)

    def _check(self) -> None:
        if self.violations:
            return
        meta = self.zk.meta
        w = self.final_writer
        end = reading.committed_end(meta, w.lac)
        trunc = self.zk.truncated_before
        final: dict[int, Entry] = {}
        for p in range(trunc, end + 1):
            seg = meta.segment_of(p)
            if seg is None:  # (4) dense positions
                self.violations.append(f"position {p} is in no segment")
                continue
            copies = {self.stores[s].get(LOG, seg.epoch, p) for s in self.servers} - {None}
            if not copies:  # (2) durability
                self.violations.append(f"committed position {p} is on no replica")
                continue
            if len(copies) > 1:
                self.violations.append(f"position {p} has different copies: {copies}")
            final[p] = copies.pop()  # type: ignore[assignment]
        for epoch, server in sorted(self.moved_in):  # a re-replicated segment is complete
            seg = next((x for x in meta.segments if x.epoch == epoch), None)
            if seg is None or server not in seg.replicas:
                continue  # truncated away, or moved on again
            lacking = [p for p in range(max(seg.first, trunc), min(end, seg.end or -1) + 1)
                       if self.stores[server].get(LOG, epoch, p) is None]
            if lacking:
                self.violations.append(f"segment {epoch} re-replicated to {server} lacks committed "
                                       f"positions {lacking[:3]}")
        for a in self.acks:
            seg = None
            for i, payload in enumerate(a.payloads):
                p = a.first + i
                if p > end:  # (2)/(3) an acknowledged entry beyond the decided end
                    self.violations.append(f"acked position {p} (epoch {a.epoch}) lost: end {end}")
                    continue
                if p < trunc:
                    continue
                e = final.get(p)
                if e is None:
                    continue
                if e.payload != payload or e.epoch != a.epoch or e.timestamp_ms != a.ts:
                    # (1) single writer / (2) durability
                    self.violations.append(
                        f"acked {payload!r}@{p} epoch {a.epoch} but the log holds {e}"
                    )
            seg = meta.segment_of(a.first)
            if seg is not None and seg.epoch != a.epoch and a.first >= trunc:
                self.violations.append(f"epoch {a.epoch} acked {a.first} in segment {seg.epoch}")
        for p, e in self.reads.items():  # (3) same decision for every reader, forever
            if p >= trunc and final.get(p) != e:
                self.violations.append(f"read {e} at {p}, final log holds {final.get(p)}")
            if p > end:  # (4) readers see committed entries only
                self.violations.append(f"read position {p} beyond the final end {end}")
        last_ts = 0
        for p in sorted(final):  # (5) monotonic time
            if final[p].timestamp_ms < last_ts:
                self.violations.append(f"timestamp goes backwards at {p}")
            last_ts = final[p].timestamp_ms
        for s in self.servers:  # (6) truncation removed the prefix everywhere
            core = self.replicas[s]
            assert core is not None
            below = [k for k in self.stores[s].entries if k[2] < trunc]
            if below:
                self.violations.append(f"server {s} still holds truncated entries {below[:3]}")
            try:
                reading.check_position(trunc - 1, core.first(LOG))
                if trunc > 0:
                    self.violations.append(f"server {s} serves truncated position {trunc - 1}")
            except reading.Truncated:
                pass


def run(seed: int, cfg: Config | None = None) -> list[str]:
    return Sim(seed, cfg).run()
