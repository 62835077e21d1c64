"""Which log server writes each log: an election through ZooKeeper, run by every log
server. A vacant log (no writer node) is claimed by creating its ephemeral writer node,
after a delay that grows with the server's rank in the log's preferred order, and by
taking the next epoch with a versioned write of the log's metadata; the claimant then
recovers the log as its writer (log/driver.py, log/writer.py) and announces it. A writer
that failed gives its node up, and its epochs are remembered as a floor: the next claim
takes a higher one. Watches on the writer nodes wake the loop; a poll covers backoffs.

Taking a log over (issue 33, log/takeover.py): each follower of a log's open segment
watches its writer (the messages it hears, the replication stream closing), probes a
suspected one, and after two failed probes deletes the old writer's node (only if it still
names that writer: a versioned delete) and claims the log at once, leaving the lost
writer out of the new segment's ensemble; nobody waits for ZooKeeper to expire the old
session. A writer whose log another server took over stops.

Decommissioning (`midtown log-server decommission`, log/zk.py LEAVING): a server that is
leaving claims no log and gives up the logs it writes; a writer whose open segment has a
replica that is leaving gives the log up too, so that the next writer (often this server
again, after its backoff) opens a segment on servers that stay. Either costs the log one
writer change, as a rolling restart does."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from fleet import failure_domains, machines
from log import ensemble, homes, limits, takeover
from log import zk as zkpaths
from log.driver import WriterDriver
from log.ensemble import NoEnsemble
from log.messages import ReadRange
from log.metadata import LogMetadata
from log.metrics import PREFERENCE_YIELDS
from log.replica_link import NoAnswer, Refused, ReplicaLink
from log.writer import State, Writer
from runtime import faults, world
from runtime.clock import lease_clock

log = logging.getLogger("midtown.log.election")

ELECTION_POLL_S = 0.1  # also how often followers look at their writers (takeover)
WRITER_REFRESH_S = 5.0
# A server that has just started claims a vacant log before the whole pool has registered
# only after this long: the preferred writers' ensembles (log/ensemble.py ring) then spread
# over every server of a cluster that starts at once, not over the first ones up.
STARTUP_GRACE_S = 3.0
# A writer that gave a log up for its preferred data center (log/homes.py yields) does not
# give it up for that again within this long: a server there that fails to claim it (cut
# off, yet registered) leaves it here, not going back and forth.
PREFER_HOLD_S = 60.0
# A server a writer found lost is left out of new segments this long: longer than a ZooKeeper
# session (fleet/connect.py), so a killed server's registration is gone by then, and
# short enough that one that was only paused is used again soon.
LOST_EXCLUDED_S = 10.0
# How often a writer looks whether its open segment's servers share a machine (_keep_apart).
KEEP_APART_S = 5.0


class Election:
    def __init__(self, server_id: int, addr: str, zk: KazooClient, topo: zkpaths.Topology,
                 writers: dict[int, WriterDriver], meta: dict[int, LogMetadata],
                 zk_ok: Callable[[], bool], new_driver: Callable[[Writer], WriterDriver],
                 stop: threading.Event, peer: Callable[[int], ReplicaLink | None] = lambda _: None,
                 ensemble_changes: bool = True, lease_s: float = 0.0) -> None:
        """`writers`, `meta`: the server's writers and the logs' metadata as last seen,
        shared with it (this adds and removes writers); `new_driver`: a driver for a
        writer core, wired to the server; `peer(server)`: the link to a server's replica
        (log/replica_link.py; None: unknown), to probe a writer; `ensemble_changes`: a writer moves its open
        segment off copies that stop answering (log/ensemble_change.py); `lease_s`: the read
        lease its writers of key-value logs hold while strong reads ask for it (log/lease.py;
        0: none)."""
        self.ensemble_changes = ensemble_changes
        self.lease_s = lease_s
        self.server_id = server_id
        self.addr = addr
        self.zk = zk
        self.topo = topo
        self.writers = writers
        self.meta = meta
        self.zk_ok = zk_ok
        self.new_driver = new_driver
        self.stop_event = stop
        self.epoch_floor: dict[int, int] = {}  # highest fenced epoch seen per log
        # Each log's writer node as last seen by a watch (no entry: not seen yet).
        self.writer_cache: dict[int, dict | None] = {}
        self.leaving: frozenset[int] = frozenset()  # servers being decommissioned (a watch)
        self.homes: dict[int, str] = topo.home_map  # each log's home data center (log/homes.py)
        self.prefers: dict[int, str] = topo.prefer_map  # each log's preferred data center for its writer
        self._yielded: dict[int, float] = {}  # log -> when a writer here last gave it up for its preference
        self._where: tuple[float, failure_domains.Domains] | None = None  # (when read, servers' domains)
        self.registered: frozenset[int] | None = None  # servers registered now (a watch; None: not yet)
        self._apart_checked: dict[int, float] = {}  # log -> when _keep_apart last looked
        self._change_refused: dict[int, float] = {}  # log -> when a lost copy last found no replacement
        # Servers a writer here found lost, and until when new segments leave them out: a
        # killed server stays registered until its session expires.
        self._lost_until: dict[int, float] = {}
        self.peer = peer
        self.takeover = takeover.Takeover()  # the followers' rule; heard/lost from the shell
        self._probes: dict[int, tuple[float, bool]] = {}  # server -> (when, answered)
        self._round_began = 0.0  # when the loop's current round began
        self._wake = world.event()
        self.started = world.monotonic()

    def leaving_watch(self, children: list[str]) -> None:
        self.leaving = frozenset(int(c) for c in children)
        self._wake.set()

    def learn_homes(self, homes: dict[int, str], prefers: dict[int, str] | None = None) -> None:
        """The logs' homes and preferred data centers as the topology says them now
        (log/homes.py), read where the server reads the topology anyway (no read of its
        own: the simulation's seeds replay)."""
        prefers = self.prefers if prefers is None else prefers
        if homes == self.homes and prefers == self.prefers:
            return
        self.homes, self.prefers = homes, prefers
        self._where = None  # a home names a data center: read the servers' localities again
        self._apart_checked.clear()
        self._wake.set()

    def _domains(self) -> failure_domains.Domains:
        """The servers' machines and localities, read again every WRITER_REFRESH_S."""
        now = world.monotonic()
        if self._where is None or now - self._where[0] >= WRITER_REFRESH_S:
            self._where = (now, machines.domains(self.zk, machines.LOG_SERVERS))
        return self._where[1]

    def _may_write(self, log_id: int) -> bool:
        return not self.homes.get(log_id) or homes.may_write(self.server_id, log_id, self.homes,
                                                              self._domains())

    def _rank(self, log_id: int, topo: zkpaths.Topology, pool: list[int] | None = None) -> int:
        """This server's rank in the log's preferred order (among its home's servers when
        it has one: log/homes.py rank)."""
        if not self.homes.get(log_id) and not self.prefers.get(log_id):
            return topo.preferred_rank(log_id, self.server_id)
        return homes.rank(pool if pool is not None else topo.log_servers, log_id, self.server_id, self.homes,
                          self._domains(), self.prefers)

    def _yields(self, log_id: int, now: float) -> bool:
        """Whether this server, writing the log outside its preferred data center, gives it
        up now: a server there is up (log/homes.py yields), and this one has not given it
        up for its preference within PREFER_HOLD_S (that server may fail to claim it: the
        log then stays here a while rather than going back and forth)."""
        if not self.prefers.get(log_id) or self.registered is None:
            return False
        if now - self._yielded.get(log_id, -PREFER_HOLD_S) < PREFER_HOLD_S:
            return False
        return homes.yields(self.server_id, log_id, self.prefers, self._domains(),
                            self.registered - self.leaving)

    def servers_watch(self, children: list[str]) -> None:
        """A ZooKeeper children watch on the registered servers."""
        self.registered = frozenset(int(c) for c in children if c.isdigit())
        self._wake.set()

    def writer_watch(self, log_id: int) -> Callable[[bytes | None, Any], None]:
        """A ZooKeeper data watch on `log_id`'s writer node: note it, wake the loop."""
        def watch(data: bytes | None, stat: Any) -> None:
            self.writer_cache[log_id] = json.loads(data) if data else None
            self._wake.set()
        return watch

    def loop(self) -> None:
        vacant_since: dict[int, float] = {}
        backoff_until: dict[int, float] = {}
        next_refresh = 0.0
        while not self.stop_event.is_set():
            # Watches wake the loop at once; the poll is for backoffs and failed writers, and
            # it comes sooner (PROBE_GAP_S at the soonest) when a writer's probe falls due
            # (log/takeover.py).
            wait = ELECTION_POLL_S
            due = self.takeover.next_due()
            if due is not None:
                wait = min(wait, max(takeover.PROBE_GAP_S, due - world.monotonic()))
            self._wake.wait(wait)
            self._wake.clear()
            # Writers are probed while this server's session is suspended too (its member
            # went quiet, or ZooKeeper elects a leader: both when a machine with a member
            # goes quiet), so a writer found lost is taken over as soon as ZooKeeper answers,
            # not two probes later (issue 68).
            zk_ok = self.zk_ok()
            now = self._round_began = world.monotonic()
            if zk_ok and now >= next_refresh:  # a safety net under the watches
                self.writer_cache.clear()
                next_refresh = now + WRITER_REFRESH_S
            for log_id in range(self.topo.logs):
                try:
                    if zk_ok:
                        self._elect_one(log_id, now, vacant_since, backoff_until)
                    self._watch_writer(log_id, zk_ok)
                except Exception as e:  # ZooKeeper hiccup: try again next round
                    log.debug("election for log %d: %s", log_id, e)

    def _elect_one(self, log_id: int, now: float, vacant_since: dict[int, float],
                   backoff_until: dict[int, float]) -> None:
        d = self.writers.get(log_id)
        if d is not None and d.failed.is_set():
            del self.writers[log_id]
            floor = max(self.epoch_floor.get(log_id, 0), d.core.highest_epoch_seen)
            self.epoch_floor[log_id] = floor
            self._relinquish(log_id)
            backoff_until[log_id] = now + 1.0
            d = None
        if d is not None and not self._may_write(log_id):
            d.stop(f"the log's home is {self.homes[log_id]}: a server there writes it")
        elif d is not None and d.core.state is State.WRITING and self._yields(log_id, now):
            self._yielded[log_id] = now
            PREFERENCE_YIELDS.labels(log=str(log_id)).inc()
            d.stop(f"the log prefers data center {self.prefers[log_id]}: a server there writes it")
        elif d is not None and d.core.state is State.WRITING:
            gone = (set(d.core.replicas) | {self.server_id}) & self.leaving
            if gone:
                d.stop(f"log server {min(gone)} is leaving: a new segment goes on servers that stay")
            elif self.ensemble_changes:
                self._watch_copies(log_id, d, now)
                self._keep_apart(log_id, d, now)
        if log_id in self.writer_cache:
            w = self.writer_cache[log_id]
        else:
            w = self.writer_cache[log_id] = zkpaths.read_writer(self.zk, log_id)
        if d is not None and w is not None and w["server"] != self.server_id:
            d.stop(f"server {w['server']} took the log over")  # its epoch fences this one anyway
        if w is not None:
            vacant_since.pop(log_id, None)
            if w["server"] == self.server_id and d is None:
                # Ours from before a suspension: give it up so a fresh epoch is taken.
                self._relinquish(log_id)
            return
        since = vacant_since.setdefault(log_id, now)
        if self.server_id in self.leaving or not self._may_write(log_id):
            return
        rank = self._rank(log_id, self.topo)
        if now - since < rank * limits.ELECTION_BACKOFF_S or now < backoff_until.get(log_id, 0):
            return
        if now - self.started < STARTUP_GRACE_S and not self._pool_registered():
            return  # a cluster starting: its servers' ensembles spread once all are here
        self._claim(log_id)

    def _watch_writer(self, log_id: int, zk_ok: bool) -> None:
        """As a follower of the log's open segment, run log/takeover.py on its writer. With
        the session suspended (not `zk_ok`), on what was last read of ZooKeeper, and a
        writer found lost waits for ZooKeeper to be taken over."""
        if not zk_ok and log_id not in self.writer_cache:
            return  # nothing read to go on
        meta = self.meta.get(log_id)
        seg = meta.last_segment if meta is not None else None
        w = self.writer_cache.get(log_id)
        replicas = seg.replicas if seg is not None and not seg.sealed else None
        seen = takeover.view(replicas, seg.epoch if seg is not None else -1, w, self.server_id,
                             self.server_id in self.leaving)
        if seen == takeover.FORGET:
            self.takeover.forget(log_id)
        if seen != takeover.WATCH:
            return
        assert w is not None and seg is not None
        now = world.monotonic()
        self.takeover.writing(log_id, w["server"], now)
        if not self.takeover.condemned(log_id):
            if not self.takeover.probe_due(log_id, now):
                return
            # One probe of a server serves every log it writes in this round: a lost server
            # that wrote many logs is not probed once per log, one after another, nor again
            # after the takeover of its first log (ZooKeeper reads of 0.15-0.3 s on a loaded
            # cluster: its second log was taken over 0.46 s after the first, issue 68).
            at, answered = self._probes.get(w["server"], (-1.0, False))
            if now - at >= takeover.PROBE_GAP_S and at < self._round_began:
                answered = self._probe(w["server"], log_id, seg.epoch, seg.first)
                self._probes[w["server"]] = (world.monotonic(), answered)
                log.debug("log %d: its writer, server %d, %s a probe", log_id, w["server"],
                          "answered" if answered else "did not answer")
            self.takeover.probed(log_id, answered, world.monotonic())
        # Found lost now, or while ZooKeeper did not answer: taken over once it does (a
        # ZooKeeper error in the takeover leaves it condemned, so the next round tries again).
        if self.takeover.condemned(log_id) and zk_ok:
            self._take_over(log_id, w)
            self.takeover.forget(log_id)
        elif self.takeover.condemned(log_id):
            log.debug("log %d: its writer is lost; taken over once ZooKeeper answers", log_id)

    def _watch_copies(self, log_id: int, d: WriterDriver, now: float) -> None:
        """As the writer of `log_id`, move its open segment off copies that stopped
        answering (log/ensemble_change.py): onto live servers of the pool, if there are
        enough for a whole ensemble and enough of the old copies answer to fence it;
        otherwise the segment goes on, on an ack quorum of what lives, as before."""
        registered = self.registered
        unregistered = frozenset(set(d.core.replicas) - registered) if registered is not None else frozenset()
        lost = d.lost_copies(now, self.server_id, unregistered)
        if not lost:
            return
        old = d.core.replicas
        answering = len([r for r in old if r not in lost])
        why = ""
        if answering < limits.fence_quorum(len(old), d.core.ack_quorum):
            why = f"only {answering} of its copies answer, too few to close it"
        else:
            try:
                new = self._ensemble(log_id, exclude=lost)
            except NoEnsemble as e:
                new, why = (), str(e)
            live = set(self.registered or ()) - set(lost) - self._lost_now(now)
            if not why and not set(new) <= live:
                why = f"no {limits.ENSEMBLE_SIZE} live servers without {sorted(lost)}"
        if why:
            if now - self._change_refused.get(log_id, -60.0) >= 60.0:  # say it once a minute
                self._change_refused[log_id] = now
                log.warning("log %d: copies %s of its open segment %s stopped answering; the segment "
                            "stays (%s)", log_id, sorted(lost), old, why)
            return
        log.warning("log %d: copies %s of its open segment %s stopped answering: it moves to %s",
                    log_id, sorted(lost), old, new)
        for r in lost:
            self._lost_until[r] = now + LOST_EXCLUDED_S
        d.change_ensemble(new)

    def _keep_apart(self, log_id: int, d: WriterDriver, now: float) -> None:
        """As the writer of `log_id`, move its open segment off servers that share a
        machine (placed before the rule, or before their machines were recorded) once a
        placement that keeps them apart exists (fleet/failure_domains.py), and off servers
        outside the log's home (given one since it opened: log/homes.py), and, for a log
        with no home (its home cleared, or a scope removed: catalog/scopes.py), off a segment
        that spans fewer data centers than a new placement would (rule 2: spread over as many
        as there are, so the log survives the loss of one): an ensemble change with every old
        copy answering. Looked at every KEEP_APART_S per log."""
        if now - self._apart_checked.get(log_id, -KEEP_APART_S) < KEEP_APART_S:
            return
        self._apart_checked[log_id] = now
        where = machines.domains(self.zk, machines.LOG_SERVERS)
        old = d.core.replicas
        together = failure_domains.shared(old, where)
        away = homes.outside(old, log_id, self.homes, where)
        spans = failure_domains.spans
        there = spans((self.registered or frozenset()) - self.leaving, where)
        narrow = not self.homes.get(log_id) and spans(old, where) < min(len(old), there)
        if not away and not narrow and (not together or machines.one_machine(self.zk)):
            return
        if together and machines.one_machine(self.zk):
            together = {}  # (copies may share the one machine; they are moved for the home)
        why = (f"share machine(s) {', '.join(sorted(together))}" if together else
               f"lie outside its home {self.homes.get(log_id)} ({', '.join(map(str, away))})" if away else
               f"span {spans(old, where)} of the {there} data centers there are (it has no home)")
        try:
            new = self._ensemble(log_id)
        except NoEnsemble as e:
            if now - self._change_refused.get(log_id, -60.0) >= 60.0:
                self._change_refused[log_id] = now
                log.warning("log %d: servers %s of its open segment %s; it stays (%s)", log_id, old, why, e)
            return
        misplaced = ((together and failure_domains.shared(new, where))
                     or homes.outside(new, log_id, self.homes, where)
                     or (narrow and not away and not together and spans(new, where) <= spans(old, where)))
        if misplaced or not set(new) <= set(self.registered or ()):
            return  # not placed so yet, or on servers not registered: the next look
        log.warning("log %d: servers %s of its open segment %s: it moves to %s", log_id, old, why, new)
        d.change_ensemble(new)

    def _probe(self, server: int, log_id: int, seg_epoch: int, position: int) -> bool:
        """Whether the writer's server answers a call at all within PROBE_TIMEOUT_S (any
        status but UNAVAILABLE or DEADLINE_EXCEEDED is an answer)."""
        link = self.peer(server)
        if link is None or world.buggify("election.probe_lost"):  # lost on a live network
            return False
        try:
            link.call(ReadRange(log_id, 0, seg_epoch, position, position), takeover.PROBE_TIMEOUT_S)
        except NoAnswer:
            return False
        except Refused:
            pass  # an answer all the same
        return True

    def _take_over(self, log_id: int, w: dict[str, Any]) -> None:
        """Remove the lost writer's node, if it still names that writer in that epoch (a
        versioned delete: never a newer writer's), and claim the log now."""
        path = zkpaths.writer_path(log_id)
        try:
            data, stat = self.zk.get(path)
            now_w = json.loads(data)
            if now_w.get("server") != w["server"] or now_w.get("epoch") != w.get("epoch"):
                return
            self.zk.delete(path, version=stat.version)
        except (NoNodeError, BadVersionError):
            return
        log.warning("server %d takes log %d over from server %d (lost: no answer to two probes)",
                    self.server_id, log_id, w["server"])
        self.writer_cache.pop(log_id, None)
        # Its server (and its machine: log/ensemble.py off_machines_of) is left out of the
        # segments opened here for a while, as a copy found lost is.
        self._lost_until[w["server"]] = world.monotonic() + LOST_EXCLUDED_S
        self._claim(log_id, exclude={w["server"]})

    def _pool_registered(self) -> bool:
        return set(self.topo.log_servers) - self.leaving <= set(zkpaths.servers(self.zk))

    def _ensemble(self, log_id: int, exclude: set[int] | None = None) -> tuple[int, ...]:
        """The ensemble of a segment this server opens now (log/ensemble.py): itself and the
        least loaded of the pool's live servers, by the open segments and writers it last
        saw (with too few live, the others); the log's preferred writer takes the servers
        after it in the pool's order instead (ensemble.ring). With three log servers, all
        three. The pool is read again (`log-server add` grows it); servers that are leaving
        are not in it."""
        topo = zkpaths.read_topology(self.zk) or self.topo
        self.learn_homes(topo.home_map, topo.prefer_map)
        # The log's home, if it has one (log/homes.py), and the placement rule
        # (fleet/failure_domains.py): the servers' machines, read now (a segment opens rarely).
        home_where = machines.domains(self.zk, machines.LOG_SERVERS) if self.homes.get(log_id) else None
        staying = [s for s in topo.log_servers if s not in self.leaving]
        pool = homes.in_home(staying, log_id, self.homes, home_where or failure_domains.unknown)
        exclude = set(exclude or ()) | self._lost_now(world.monotonic())
        if self.server_id not in pool:
            raise NoEnsemble(f"log server {self.server_id} is not in the pool (or is leaving, "
                             f"or outside the log's home)")
        live = [s for s in zkpaths.servers(self.zk) if s in pool and s not in (exclude or ())]
        where = home_where or machines.domains(self.zk, machines.LOG_SERVERS)
        one = machines.one_machine(self.zk)
        live = ensemble.off_machines_of(exclude, live, where, one)
        if self._rank(log_id, topo, pool) == 0:
            return ensemble.ring(self.server_id, live, pool, domain_of=where, one_machine=one)
        open_segments, writers = self._loads(topo.logs)
        return ensemble.choose(self.server_id, live, ensemble.loads(open_segments, writers), pool=pool,
                               domain_of=where, one_machine=one)

    def _lost_now(self, now: float) -> set[int]:
        """Servers a writer here found lost within LOST_EXCLUDED_S."""
        return {s for s, until in self._lost_until.items() if until > now}

    def _loads(self, logs: int) -> tuple[list[tuple[int, ...]], list[int]]:
        """Every log's open segment's replicas and writer, read from ZooKeeper now (all the
        reads in flight at once): the watches' view may lag behind other servers' claims,
        as when a cluster starts and every server claims at once."""
        metas = [self.zk.get_async(zkpaths.log_path(i)) for i in range(logs)]
        ws = [self.zk.get_async(zkpaths.writer_path(i)) for i in range(logs)]
        open_segments, writers = [], []
        for m, w in zip(metas, ws):
            try:
                seg = LogMetadata.from_json(m.get(timeout=5)[0]).last_segment
                if seg is not None and not seg.sealed:
                    open_segments.append(seg.replicas)
            except Exception:  # gone or unreadable: it weighs nothing
                pass
            try:
                writers.append(int(json.loads(w.get(timeout=5)[0])["server"]))
            except Exception:  # no writer
                pass
        return open_segments, writers

    def _relinquish(self, log_id: int) -> None:
        self.writer_cache.pop(log_id, None)
        try:
            data, _ = self.zk.get(zkpaths.writer_path(log_id))
            if json.loads(data)["server"] == self.server_id:
                self.zk.delete(zkpaths.writer_path(log_id))
        except NoNodeError:
            pass

    def announce_writer(self, log_id: int, epoch: int) -> None:
        """Recovery is over: say so in the writer node (readiness, `log status`)."""
        body = {"server": self.server_id, "addr": self.addr, "epoch": epoch, "state": "writing"}
        try:
            self.zk.set(zkpaths.writer_path(log_id), json.dumps(body).encode())
        except Exception as e:  # the session is going away: the election loop cleans up
            log.warning("announcing writer of log %d: %s", log_id, e)

    def _claim(self, log_id: int, exclude: set[int] | None = None) -> None:
        """Claim the log; `exclude`: a server the new segment should leave out (a writer
        taken over, whose session may still be registered)."""
        body = {"server": self.server_id, "addr": self.addr, "state": "recovering"}
        began = world.monotonic()
        try:
            replicas = self._ensemble(log_id, exclude)  # enough servers for a segment, before taking the log
        except NoEnsemble as e:
            log.warning("log %d has no writer and cannot get one: %s", log_id, e)
            return
        try:
            self.zk.create(zkpaths.writer_path(log_id), json.dumps(body).encode(), ephemeral=True)
        except NodeExistsError:
            log.debug("log %d: claimed by another server first", log_id)
            return
        created = world.monotonic()
        try:
            topo = zkpaths.read_topology(self.zk)
            meta, version = zkpaths.read_metadata(self.zk, log_id)
            new = meta.bump(self.server_id, at_least=self.epoch_floor.get(log_id, 0) + 1)
            v = zkpaths.cas_metadata(self.zk, new, version)
        except Exception as e:
            # Whatever went wrong, the writer node must not stay held by a server that does
            # not write: the log would have no writer and no election.
            faults.log_failure(log, f"claiming log {log_id}", e)
            self._relinquish(log_id)
            return
        if v is None:
            self._relinquish(log_id)
            return
        self.writer_cache.pop(log_id, None)
        self.meta[log_id] = new
        # A log its users asked a lease of (log/zk.py Topology.leased_below: the key-value
        # store's logs) marks time when idle, by which storage nodes judge expiry
        # (Writer.time_marks), and keeps a read lease for strong reads (log/lease.py).
        leased = topo is not None and log_id < topo.leased_below
        core = Writer(log_id, new.epoch, new, v, replicas, time_marks=leased,
                      lease_s=self.lease_s if leased else 0.0, clock=lease_clock, kv_lease_s=self.lease_s)
        d = self.new_driver(core)
        self.writers[log_id] = d
        log.info("server %d writes log %d at epoch %d", self.server_id, log_id, new.epoch)
        log.debug("log %d: its servers chosen and its writer node made in %.0f ms, its epoch raised in "
                  "%.0f ms", log_id, 1000 * (created - began), 1000 * (world.monotonic() - created))
        d.start()
