"""A log server, wired: the replica core with its store and the lock over it, the writers
it runs, its peers (log/peers.py), the election (log/election.py), the committed reads and
catch-up (log/catch_up.py), and the ZooKeeper shell: the session's state, the metadata
and truncation watches, the epoch check on replica requests."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from typing import Any

import grpc
from kazoo.exceptions import ConnectionLoss, OperationTimeoutError
from kazoo.protocol.states import KazooState

from log import lease, limits, reading, spares, store_identity
from log import zk as zkpaths
from log.catch_up import CatchUp
from log.client_link import LogState
from log.driver import WriterDriver
from log.election import Election
from log.entry import Entry
from log.linger import Lingering
from log.messages import AddEntries, Result
from log.metadata import LogMetadata
from log.peers import Peers
from log.read_cache import ReadCache
from log.read_index import TailReply
from log.replica import ReplicaCore
from log.replica_link import GrpcReplicas, OwnReplica, ReplicaLink
from log.rereplicator import INTERVAL_S as REREPLICATE_S
from log.rereplicator import ReReplicator
from log.rocks_store import RocksStore
from log.seals import Stint
from log.writer import ChangeEnsemble, Writer
from runtime import loops, tracing, world
from runtime.clock import lease_clock
from runtime.membership import Membership
from runtime.process import wait_until
from runtime.refusals import Refusal

log = logging.getLogger("midtown.log.node")

ELECTION_POLL_S = 0.25
WRITER_REFRESH_S = 5.0
CATCHUP_POLL_S = 1.0
STORE_RECORD_S = 5.0  # how often a server checks that its store's identity is recorded
# A replica asked by a new writer checks its epoch in ZooKeeper: each try waits this long,
# all of them together at most EPOCH_CHECK_S (check_epoch_issued).
EPOCH_READ_WAIT_S = 0.3
EPOCH_CHECK_S = 2.0
EPOCH_RETRY_S = 0.05  # between tries that failed at once (the session disconnected: no wait of its own)


class Node:
    def __init__(self, server_id: int, addr: str, zk: Any, topo: zkpaths.Topology, store: RocksStore,
                 spare_linger_s: float = spares.SPARE_LINGER_S, ensemble_changes: bool = True,
                 lease_s: float = lease.LEASE_S_DEFAULT,
                 peer_links: Callable[[int], ReplicaLink | None] | None = None) -> None:
        """A log server from its parts, with no I/O of its own (Node.open opens them): `zk`,
        a connected ZooKeeper session; `topo`, the cluster's topology; `store`, its replica
        store. `spare_linger_s`: how long a spare follower's copies of this server's writes
        may wait to travel together (log/spares.py); `lease_s`, its writers' read lease
        (log/lease.py; 0: none)."""
        self.server_id = server_id
        self.addr = addr
        self.zk = zk
        self._zk_ok = world.event()  # connected now
        self._zk_ok.set()
        self._session_ok = world.event()  # the session not known lost (connected or suspended)
        self._session_ok.set()
        self.zk.add_listener(self._on_zk_state)
        self.topo = topo
        self.store = store
        self.lease_s = lease_s
        self.replica = ReplicaCore(server_id, self.store, self.topo.logs, lease_clock, lease_s)
        # One lock over the replica side: every replica operation, and the group commit
        # that makes it durable, completes before the next starts (and before any reply).
        self.rlock = world.lock()
        self.conds = [world.condition() for _ in range(self.topo.logs)]
        self.lingering = Lingering(self.topo.logs)
        self.read_cache = ReadCache()
        self.meta: dict[int, LogMetadata] = {}
        self.writers: dict[int, WriterDriver] = {}
        self._stop = world.event()
        self._watches: list[Any] = []
        if peer_links is None:
            peer_links = GrpcReplicas(self.zk, self._stop).link
        self.peers = Peers(server_id, OwnReplica(self.local_batch), peer_links, self._stop, spare_linger_s)
        self.election = Election(server_id, addr, self.zk, self.topo, self.writers, self.meta, self.zk_ok,
                                 lambda core: WriterDriver(self, core), self._stop, self.peers.link,
                                 ensemble_changes, lease_s)
        self.catch_up = CatchUp(server_id, self.topo.logs, self.store, self.replica, self.rlock,
                                self.meta, self.writers, self.peers.link, self._stop)

    @classmethod
    def open(cls, server_id: int, addr: str, zk_hosts: str, data_dir: str,
             spare_linger_s: float = spares.SPARE_LINGER_S, ensemble_changes: bool = True,
             lease_s: float = lease.LEASE_S_DEFAULT) -> Node:
        """The shell: connect to ZooKeeper, wait for the topology (a minute at most; exits
        if it never comes or does not name this server), open the store under `data_dir`."""
        zk = zkpaths.connect(zk_hosts, patience_s=zkpaths.SERVER_PATIENCE_S)
        topo = wait_until(lambda: zkpaths.read_topology(zk),
                          "no topology in ZooKeeper: run `midtown cluster up` (or create it)")
        if server_id not in topo.log_servers:
            raise SystemExit(f"server id {server_id} is not in the topology {topo}")
        os.makedirs(data_dir, exist_ok=True)
        store = RocksStore(os.path.join(data_dir, "replica.db"))
        return cls(server_id, addr, zk, topo, store, spare_linger_s, ensemble_changes, lease_s)

    # ------------------------------------------------------------ start/stop
    def start(self) -> None:
        for log_id in range(self.topo.logs):
            self.catch_up.filled[log_id] = self.replica.first(log_id) - 1
            self._watches.append(
                self.zk.DataWatch(zkpaths.log_path(log_id), self._meta_watch(log_id))
            )
            self._watches.append(
                self.zk.DataWatch(zkpaths.truncate_path(log_id), self._trunc_watch(log_id))
            )
            self._watches.append(
                self.zk.DataWatch(zkpaths.writer_path(log_id), self.election.writer_watch(log_id))
            )
        self.zk.ensure_path(zkpaths.LEAVING)
        self._watches.append(self.zk.ChildrenWatch(zkpaths.LEAVING, self.election.leaving_watch))
        self.zk.ensure_path(zkpaths.SERVERS)
        self._watches.append(self.zk.ChildrenWatch(zkpaths.SERVERS, self.election.servers_watch))
        self.membership = Membership(
            self.zk, f"{zkpaths.SERVERS}/{self.server_id}",
            lambda: {"addr": self.addr, "pid": os.getpid()})
        self.membership.start()  # first: a second process under a live id is refused as such
        try:
            self.check_store()
        except store_identity.StoreLost:
            self.membership.stop()
            try:
                self.zk.delete(self.membership.path)  # not seen as a live server while it exits
            except Exception:
                pass
            raise
        loops.forever("election", self.election.loop, self._stop)
        loops.forever("catch-up", self.catch_up.loop, self._stop)
        self.rereplicator = ReReplicator(self, self.peers.link, self.replica.first)
        loops.every("rereplicate", REREPLICATE_S, self.rereplicator.round, self._stop)
        loops.every("store-record", STORE_RECORD_S, self.topology_round, self._stop)

    def check_store(self) -> None:
        """Serve only on the store ZooKeeper records for this id (log/store_identity.py:
        StoreLost if the disk was lost); a first start gives the store its identity, then
        records it."""
        stored = self.store.identity()
        recorded = zkpaths.read_store_identity(self.zk, self.server_id)
        store_identity.check(self.server_id, stored, recorded)
        if stored is None:
            stored = os.urandom(8).hex()
            self.store.set_identity(stored)
        if recorded is None:  # (another process may have raced this one under the same id)
            store_identity.check(self.server_id, stored,
                                 zkpaths.record_store_identity(self.zk, self.server_id, stored))

    def topology_round(self) -> None:
        """Every STORE_RECORD_S: read the topology once, for the logs' homes (log/homes.py: no
        read of their own, so the simulation's seeds replay) and this server's store record."""
        topo = zkpaths.read_topology(self.zk)
        if topo is not None:
            self.election.learn_homes(topo.home_map, topo.prefer_map)
        self.keep_store_recorded(topo)

    def keep_store_recorded(self, topo: zkpaths.Topology | None) -> None:
        """Record this server's store again if its record was removed while it ran (added
        back to the pool after a decommission: `midtown log-server add` removes the record
        of a server out of the pool), once it is in the pool again."""
        if topo is None or self.server_id not in topo.log_servers:
            return
        identity = self.store.identity()
        if identity is not None and zkpaths.read_store_identity(self.zk, self.server_id) is None:
            zkpaths.record_store_identity(self.zk, self.server_id, identity)

    def stop(self) -> None:
        self._stop.set()
        if hasattr(self, "membership"):
            self.membership.stop()
        for d in list(self.writers.values()):
            d.stop("server stopping")
        for d in list(self.writers.values()):
            if d.thread is not None:
                d.thread.join(2)
        try:
            self.zk.stop()
            self.zk.close()
        except Exception:
            pass
        with self.rlock:  # after any replica write under way (catch-up fills included)
            self.store.close()

    # ------------------------------------------------------------ ZooKeeper
    def zk_ok(self) -> bool:
        return self._zk_ok.is_set()

    def session_ok(self) -> bool:
        """The session is not known to be lost (a suspended one may come back)."""
        return self._session_ok.is_set()

    def ready(self) -> bool:
        """Serving: started, with a live ZooKeeper session, registered under it."""
        if not self.zk_ok() or not hasattr(self, "membership"):
            return False
        stat = self.zk.exists(self.membership.path)
        return stat is not None and stat.ephemeralOwner == self.zk.client_id[0]

    def _on_zk_state(self, state: str) -> None:
        if state == KazooState.CONNECTED:
            self._session_ok.set()
            self._zk_ok.set()  # registering again is the membership's job
            return
        self._zk_ok.clear()
        if state == KazooState.SUSPENDED:
            # Writers go on: a suspended session may come back, and what keeps one writer
            # is the epoch fenced on the replicas and the read lease waited out, never the
            # session (docs/log.md, invariant 1). A leader change of ZooKeeper suspends every
            # session for a second or two; stopping here stopped every log with it.
            return
        # LOST: another server may claim the log now (no new claim of ours until
        # connected: the election loop); stop acknowledging at once.
        self._session_ok.clear()
        for d in list(self.writers.values()):
            d.stop(f"ZooKeeper session {state.lower()}")

    def _meta_watch(self, log_id: int):  # type: ignore[no-untyped-def]
        def watch(data: bytes | None, stat: Any) -> None:
            if data:
                self.meta[log_id] = LogMetadata.from_json(data)
                self.notify(log_id)
        return watch

    def _trunc_watch(self, log_id: int):  # type: ignore[no-untyped-def]
        def watch(data: bytes | None, stat: Any) -> None:
            if not data:
                return
            before = int(json.loads(data)["before"])
            with self.rlock:
                self.replica.truncate(log_id, before)
            filled = self.catch_up.filled
            filled[log_id] = max(filled.get(log_id, -1), before - 1)
            self.notify(log_id)
        return watch

    def issued(self, msg: Any) -> Any:
        """A replica request from another server, refused (a Refusal) if its epoch was never
        issued (check_epoch_issued), or if ZooKeeper cannot tell now (UNAVAILABLE)."""
        if not self.replica.known(msg.log_id):
            return msg  # the core answers UNKNOWN_LOG
        try:
            self.check_epoch_issued(msg.log_id, msg.epoch)
        except Refusal:
            raise
        except Exception as e:  # ZooKeeper unreachable: cannot tell, so do not take it
            raise Refusal(grpc.StatusCode.UNAVAILABLE, f"epoch: cannot check it with ZooKeeper now "
                          f"({type(e).__name__}); retry") from None
        return msg

    def check_epoch_issued(self, log_id: int, epoch: int) -> None:
        """A replica request from another server must carry an epoch that ZooKeeper issued
        for the log (a writer takes its epoch there with a versioned write before it fences
        or appends). Anything higher comes from a broken or hostile peer: taken, it would
        fence the replica out of reach of every real writer. A Refusal (FAILED_PRECONDITION) names it.

        The epochs seen so far cost a dictionary look-up; only a higher one (a new writer's
        first message) costs a ZooKeeper read, after a sync so that it sees the new epoch.
        Each try waits EPOCH_READ_WAIT_S: a session whose member went quiet moves to
        another (fleet/connect.py PATIENCE_S) and the next try asks there, until
        EPOCH_CHECK_S (then OperationTimeoutError). A new writer's recovery waited here for
        the read timeout (2.7 s) when this replica's member was on a machine gone quiet."""
        if epoch == 0:
            return  # a plain read: no fencing
        known = self.meta.get(log_id)
        if known is not None and epoch <= known.epoch:
            return
        meta = self._metadata_now(log_id)
        if epoch > meta.epoch:
            raise Refusal(grpc.StatusCode.FAILED_PRECONDITION, f"{epoch} was never issued for log "
                          f"{log_id} (its epoch in ZooKeeper is {meta.epoch}); refused", field="epoch")

    def _metadata_now(self, log_id: int) -> LogMetadata:
        """The log's metadata as ZooKeeper's leader has it now (a sync, then a read), tried
        again on a member that answers (check_epoch_issued)."""
        quick = zkpaths.bounded(self.zk, EPOCH_READ_WAIT_S)
        until = None
        while True:
            try:
                quick.sync(zkpaths.log_path(log_id))
                return zkpaths.read_metadata(quick, log_id)[0]
            except (OperationTimeoutError, ConnectionLoss):  # the session moves meanwhile
                now = world.monotonic()
                until = now + EPOCH_CHECK_S - EPOCH_READ_WAIT_S if until is None else until
                if now >= until:
                    raise
                world.sleep(EPOCH_RETRY_S)  # (a ConnectionLoss comes at once: not a busy loop)

    def apply_truncation_now(self, log_id: int) -> None:
        """Read the truncation point from ZooKeeper (after a sync) instead of waiting for the
        watch: a reader that starts after `truncate` returned sees it on every replica."""
        try:
            self.zk.sync(zkpaths.truncate_path(log_id))
            before, _ = zkpaths.read_truncation(self.zk, log_id)
        except Exception as e:
            log.debug("truncation point of log %d: %s", log_id, e)
            return
        if before > self.replica.first(log_id):
            with self.rlock:
                self.replica.truncate(log_id, before)

    def write_metadata(self, meta: LogMetadata, version: int) -> tuple[bool, int]:
        if not self.zk_ok():
            return False, -1
        try:
            v = zkpaths.cas_metadata(self.zk, meta, version)
        except Exception as e:
            log.warning("metadata write for log %d failed: %s", meta.log_id, e)
            return False, -1
        if v is None:
            return False, -1
        self.meta[meta.log_id] = meta
        return True, v

    def read_seals(self, log_id: int) -> dict[int, Stint]:
        return zkpaths.read_seals(self.zk, log_id)

    def change_ensemble(self, log_id: int, change: ChangeEnsemble) -> tuple[LogMetadata | None, int]:
        """An ensemble change's metadata write (Writer.change_ensemble): the log's metadata
        as it is now, sealed at the change's end with the next segment opened, by a
        versioned write; read again and retried when something else changed it meanwhile
        (a sealed segment's re-replication). None when the log moved on from the writer."""
        for _ in range(5):
            if not self.zk_ok():
                return None, -1
            try:
                meta, version = zkpaths.read_metadata(self.zk, log_id)
                new = meta.ensemble_changed(change.epoch, change.end, change.last_ts, change.replicas)
                if new is None:
                    return None, -1
                v = zkpaths.cas_metadata(self.zk, new, version)
            except Exception as e:
                log.warning("ensemble change of log %d failed: %s", log_id, e)
                return None, -1
            if v is not None:
                self.meta[log_id] = new
                return new, v
        return None, -1

    # ------------------------------------------------------------ election (log/election.py)
    def announce_writer(self, log_id: int, epoch: int) -> None:
        self.election.announce_writer(log_id, epoch)

    # ------------------------------------------------------------ replica side
    def local(self, msg: Any) -> Any:
        return self.local_batch([msg])[0]

    def local_batch(self, msgs: list[Any]) -> list[Any]:
        """Handle replica requests (any logs) with one synced write for all of them (traced
        when an entry of a traced operation is among them: runtime/tracing.py)."""
        trace = next((m.trace for m in msgs if isinstance(m, AddEntries) and m.trace), "")
        with tracing.within(trace, "log store", messages=len(msgs)), self.rlock, self.store.group():
            replies: list[Any] = [self.replica.on_request(msg) for msg in msgs]
            if world.buggify("replica.slow_sync"):  # a slow disk: every replica request waits
                world.sleep(0.2)
        now = world.monotonic()
        for msg, rep in zip(msgs, replies):
            if isinstance(msg, AddEntries) and rep.result is Result.OK:
                self.election.takeover.heard(msg.log_id, now)  # the writer is alive
                if msg.lac >= 0:
                    self.notify(msg.log_id)
        return replies

    def writer_stream_ended(self, log_ids: set[int]) -> None:
        """A writer's replication stream to this server ended (its process may be gone):
        its logs are suspected at once (log/takeover.py)."""
        if not self._stop.is_set():
            for log_id in log_ids:
                self.election.takeover.lost(log_id)

    def notify(self, log_id: int) -> None:
        c = self.conds[log_id]
        with c:
            c.notify_all()
        self.lingering.committed(log_id, lambda: self.committed_end(log_id))

    def lease_index(self, log_id: int) -> int | None:
        """A strong read's index by the read lease of this server's writer of the log
        (log/lease.py), or None: no writer here, or no lease held now (the caller then asks
        the replicas: tail_hurrying)."""
        d = self.writers.get(log_id)
        return d.core.lease_index(lease_clock()) if d is not None else None

    def tail_hurrying(self, log_id: int) -> TailReply:
        """This replica's last stored position and the highest writer epoch it has seen (a
        ReadIndex round's answer, the Tail call: log/read_index.py). A strong read will wait
        for a storage node to apply that far: the log's lingering Read streams send every
        position the writer here has assigned at once."""
        with self.rlock:  # after every write this replica has acknowledged
            last = self.replica.tail(log_id)
            epoch = self.replica.fenced_epoch(log_id)
        d = self.writers.get(log_id)
        self.lingering.hurry(log_id, max(last, d.assigned_end() if d is not None else -1))
        return TailReply(last, epoch, world.wall_ms())

    def segment_last(self, log_id: int, segment_epoch: int) -> int:
        """The last position this replica stores in one segment of the log (-1: none)."""
        with self.rlock:
            return self.replica.segment_last(log_id, segment_epoch)

    # ------------------------------------------------------------ peers (log/peers.py)
    def send(self, driver: WriterDriver, to: int, msg: Any) -> None:
        """Deliver a writer's message to a replica (ourselves included); the reply goes
        back into the writer's inbox."""
        self.peers.send(driver, to, msg)

    def dispatch_reply(self, core: Writer, replica: int, req: Any, rep: Any) -> None:
        core.on_reply(replica, req, rep)

    # ------------------------------------------------------------ reading (log/catch_up.py)
    def status(self) -> list[LogState]:
        """Each log as this server sees it (the Status call)."""
        out = []
        for log_id in range(self.topo.logs):
            meta = self.meta.get(log_id)
            w = self.election.writer_cache.get(log_id)
            out.append(LogState(log_id, w["server"] if w else -1, meta.epoch if meta else 0,
                                self.replica.first(log_id), self.committed_end(log_id),
                                self.catch_up.filled.get(log_id, -1)))
        return out

    def truncate_before(self, log_id: int, before: int) -> int:
        """Truncate `log_id` below `before` (raised in ZooKeeper first, so every replica
        follows): the log's first position now. Only committed entries are truncated."""
        end = self.committed_end(log_id)
        if before > end + 1:
            raise Refusal(grpc.StatusCode.FAILED_PRECONDITION,
                          f"{before} is beyond the last committed position {end} of log "
                          f"{log_id}; only committed entries can be truncated", field="before_position")
        first = zkpaths.raise_truncation(self.zk, log_id, before)
        with self.rlock:
            self.replica.truncate(log_id, first)
        return first

    def committed_end(self, log_id: int) -> int:
        return self.catch_up.committed_end(log_id)

    def read_committed(self, log_id: int, lo: int, hi: int) -> list[Entry]:
        """Committed entries [lo, hi] (the caller checked hi <= committed end)."""
        return self.catch_up.read_committed(log_id, lo, hi)

    def wait_committed(self, log_id: int, position: int, timeout_s: float) -> None:
        """Return once `position` is committed here, or after `timeout_s`."""
        cond = self.conds[log_id]
        with cond:
            if self.committed_end(log_id) < position:
                cond.wait(timeout_s)

    def writes(self, log_id: int) -> bool:
        """Whether this server is the log's writer now (and its writer has not failed)."""
        d = self.writers.get(log_id)
        return d is not None and not d.failed.is_set()

    def read_from(self, log_id: int, position: int, wait_s: float) -> list[Entry]:
        """The log's committed entries from `position` (READ_BATCH_ENTRIES_MAX at most), or
        [] when none is committed there within `wait_s`: what a follow in this process
        reads (log/follow.py). reading.Truncated below the first position held;
        catch_up.Unavailable when they cannot be read here."""
        reading.check_position(position, self.replica.first(log_id))
        end = self.committed_end(log_id)
        if position > end:
            self.wait_committed(log_id, position, wait_s)
            return []
        return self.read_committed(log_id, position, min(end, position + limits.READ_BATCH_ENTRIES_MAX - 1))
