"""A storage node, wired: the state its parts share (storage_node/state.py), the apply loop
that tails the logs and applies them in order (storage_node/apply_loop.py), the bookkeeping
rounds that publish positions, truncate, measure and count (storage_node/bookkeeping.py),
the reads of its state (storage_node/reads.py) and the eventual datasets' service
(storage_node/eventual_service.py). It starts them, bootstraps from a peer first when it
must, and answers the status and health of the whole."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass

import grpc

from catalog import registry
from catalog.log_map import LogMap
from catalog.registry import KvTopology
from catalog.replica_sets import ReplicaSets
from log.client import LocalLog, LogClient, LogLink
from midtown_pb import kv_pb2 as pb
from runtime import inprocess, loops, world
from runtime.process import Fatal, exit_now, through_zk_loss, wait_until
from runtime.refusals import BadRequest, Refusal
from runtime.stubs import Calls
from storage_node import bootstrap, holds, rebuild
from storage_node.apply_loop import ApplyLoop
from storage_node.bookkeeping import Bookkeeping, durable_positions
from storage_node.callbacks import AnswerLink, Callbacks
from storage_node.eventual_service import EventualService
from storage_node.limits import HEALTH_LAG_MAX
from storage_node.lww import LwwReplica
from storage_node.metrics import WATCH_STREAMS
from storage_node.reads import Reads
from storage_node.settings import Settings
from storage_node.shard_intake import RATE_MB_S_MAX, SHARD_CHUNK_BYTES, Intake
from storage_node.state import NodeState
from storage_node.store import NodeStore
from storage_node.views import VIEW_REAP_S
from storage_node.watch import ChangeFeed

log = logging.getLogger("midtown.storage.node")
NO_TOPOLOGY = "no cluster topology in ZooKeeper: run `midtown cluster init` (or `cluster up`)"


def said_positions(s: NodeState, durable: bool) -> dict[int, tuple[int, int]]:
    """The positions a node's Status says (log -> next position, its log time); `durable`:
    made durable first, what a power loss leaves. A fail-over asks for those: it cuts where
    its sources stand, and a source that said a position it then lost to a power loss would
    leave the state at the cut nowhere (the whole-cluster simulation's seed 100109)."""
    return durable_positions(s) if durable else dict(s.positions)


@dataclass(frozen=True)
class Parts:
    """What a storage node talks to, opened by its shell (StorageNode.open)."""
    logs: LogClient  # the log servers, and the ZooKeeper session (logs.zk)
    store: NodeStore
    kv: KvTopology
    log_count: int  # every log of the cluster
    log_map: LogMap  # which key-value log carries each shard
    sets: ReplicaSets
    data_dir: str  # where its store is, and its scans' checkpoints go


class StorageNode:
    def __init__(self, node_id: int, addr: str, parts: Parts, settings: Settings | None = None,
                 on_fatal: Fatal = exit_now, local_log: inprocess.Local[LocalLog] | None = None,
                 answers: AnswerLink | None = None, peers: Calls | None = None) -> None:
        """A storage node from its parts, with no I/O of its own (StorageNode.open opens
        them). `on_fatal(code, why)`: what the process does when this node must not go on
        (it exits, chosen where the process is wired; a test can record it instead).
        `local_log`: the log server of this process, if any (the host layout); `answers`:
        the way to the coordinators (gRPC by default; storage_node/callbacks.py); `peers`:
        the way to the other storage nodes (gRPC by default; runtime/stubs.py)."""
        self.addr = addr
        settings = settings or Settings()
        self.data_dir = parts.data_dir
        store, logs, kv = parts.store, parts.logs, parts.kv
        self.state = s = NodeState(node_id, settings, logs, store, kv, parts.log_count, parts.log_map,
                                   parts.sets)
        s.reload_positions()
        if peers is not None:
            s.peer_calls = peers
        self.lww = LwwReplica(store, int(settings.tombstone_grace_s * 1000))  # eventual datasets
        self.reads = Reads(node_id, store, parts.data_dir, s.commit_lock, s.cond, s.positions,
                           lambda: s.kv, lambda: s.log_map, s.holds, s.place_of,
                           lambda: s.learn_log_map(registry.read_log_map(s.zk, s.kv, s.log_count)),
                           lambda log_id: s.clocks.doubt(log_id, world.monotonic()))
        self.feed = ChangeFeed(node_id, store, s.cond, s.positions, lambda: s.log_map, s.holds, s.stop,
                               s.place_of)
        self.eventual = EventualService(node_id, s.zk, store, self.lww, lambda: s.kv, s.peer_ids,
                                        lambda: s.sets, s.stop, s.peer_calls)
        self.applier = ApplyLoop(s, self.lww, on_fatal, local_log or inprocess.Local(),
                                 answers or Callbacks())
        self.bookkeeping = Bookkeeping(s, self.lww, self.eventual, self.applier)
        self.applier.holds.written = self.bookkeeping.learn_kv  # a fail-over that held it, written
        self.intake = Intake(s, self.applier, self.bookkeeping)

    @classmethod
    def open(cls, node_id: int, addr: str, zk_hosts: str, data_dir: str, settings: Settings | None = None,
             on_fatal: Fatal = exit_now, log_link: LogLink | None = None,
             local_log: inprocess.Local[LocalLog] | None = None,
             answers: AnswerLink | None = None) -> StorageNode:
        """The shell: connect to ZooKeeper and the logs (`log_link`: the log client's way to
        the log servers, the one of this process directly), wait for the topology (a minute
        at most), remove the checkpoints a crash left in `data_dir`, open the store, read the
        replica sets."""
        logs = LogClient(zk_hosts, link=log_link, local_log=local_log)
        log_count = wait_until(logs.read_topology, NO_TOPOLOGY).logs
        kv = wait_until(lambda: registry.read_kv(logs.zk), NO_TOPOLOGY)
        os.makedirs(data_dir, exist_ok=True)
        for old in os.listdir(data_dir):  # checkpoints a crash left behind
            if old.startswith("checkpoint-"):
                shutil.rmtree(os.path.join(data_dir, old), ignore_errors=True)
        store = NodeStore(os.path.join(data_dir, "state.db"))
        sets = registry.read_replica_sets(logs.zk, kv)
        log_map = registry.read_log_map(logs.zk, kv, log_count)
        return cls(node_id, addr, Parts(logs, store, kv, log_count, log_map, sets, data_dir), settings,
                   on_fatal, local_log, answers)

    @property
    def node_id(self) -> int:
        return self.state.node_id

    def applies_in_process(self, log_id: int) -> bool:
        """Whether this node applies `log_id` as the writer of this process commits it: a
        coordinator of this process may then have its records of that log answered by this
        node alone (Record.answered_beside)."""
        return self.applier.applies_in_process(log_id)

    def start(self) -> None:
        s = self.state
        # A move's destination answers for its shard, and the node that left stops, as soon
        # as the sets name them, not at the next bookkeeping round (which a slow publish
        # after a lost session can hold up for seconds).
        registry.watch_replica_sets(s.zk, s.learn_sets)
        # Through a ZooKeeper session lost meanwhile (the process paused past its timeout):
        # a bootstrap cut short goes on from its marker (storage_node/bootstrap.py).
        through_zk_loss(self._bootstrap_if_needed, "bootstrap")
        through_zk_loss(self.eventual.drop_if_outlived, "reading the peers' last reports")
        through_zk_loss(self.applier.holds.at_start, "reading the fail-overs' holds")
        self.bookkeeping.start()
        loops.every("anti-entropy", s.settings.anti_entropy_s, self.eventual.anti_entropy_pass,
                    s.stop, first_at_once=self.eventual.refill)  # values dropped at start: at once
        self.applier.start()
        s.started = True
        loops.every("scan views", VIEW_REAP_S, self.reads.views.reap, s.stop)
        # In the host layout, the log server beside it too: a watch is served from the
        # replica beside its log's writer (coordinator/replicas.py).
        log_addrs = self.applier.local_log.addrs
        beside = {"log": min(log_addrs)} if log_addrs else {}
        self.membership = through_zk_loss(lambda: registry.register(
            s.zk, registry.STORAGE_NODES, s.node_id, self.addr, **beside), "registering")

    def _bootstrap_if_needed(self) -> None:
        """Copy a peer's state first when this node is new or behind a truncation
        (storage_node/bootstrap.py), or its shards from their replicas when no member
        holds them all (storage_node/rebuild.py); otherwise resume from the saved positions."""
        s = self.state
        bounds = wait_until(self._log_bounds, "the log servers did not say where the logs begin within "
                            "a minute: start them, then this node")
        first = {lg: f for lg, (f, _) in bounds.items() if lg in s.tailed_logs()}
        marker = bootstrap.unfinished(s.store)
        saved = {lg: p for lg, (p, _) in s.positions.items()}
        empty = not marker and not s.marks and not any(saved.values())
        # (a lost store that is to hold nothing has nothing to copy)
        lost = empty and registry.has_published(s.zk, s.node_id) and any(rebuild.wanted_now(s))
        # Condemned by a fail-over (catalog/failover.py): its shards of the cut logs are not
        # the logs'. It takes those again alone, unless it must bootstrap anyway
        cut = s.condemned_logs()
        if cut and not bootstrap.needed({lg: p for lg, p in saved.items() if lg not in cut},
                                        {lg: f for lg, f in first.items() if lg not in cut}, marker, lost):
            self._retake(cut, bounds)
            return
        condemned = bool(cut)
        if not bootstrap.needed(saved, first, marker, lost or condemned):
            return
        why = (", an earlier bootstrap did not finish" if marker else ", its store was lost" if lost
               else ", a fail-over condemned its state" if condemned else "")
        log.info("bootstrapping (saved positions %s, first available %s%s)", saved, first, why)
        deadline = world.monotonic() + 300
        while True:
            bounds = self._log_bounds() or bounds  # read again: a rebuild needs every head
            shards, moving = rebuild.wanted_now(s)
            # the map too: the logs its shards are in now (a hand-off since this node started)
            s.learn_log_map(registry.read_log_map(s.zk, s.kv, s.log_count))
            # A whole copy: from a member (a removed node may be behind the logs) that holds
            # every shard this node holds (replica sets); it applies only its own after.
            peers = s.peers(members_only=True, shards=shards)
            try:
                if moving or (shards and not peers):
                    rebuild.by_shard(s, sorted({*shards, *moving}), {lg: h for lg, (_, h) in bounds.items()},
                                     self.intake.receive, deadline)
                else:
                    # At or past the heads as the rebuild's copies are (its logs' heads when
                    # this try began: storage_node/bootstrap.py behind)
                    heads = rebuild.known_heads(shards, {lg: h for lg, (_, h) in bounds.items()}, s.log_map)
                    bootstrap.copy_from(s.store.db, peers, s.store.sync, s.peer_calls, heads,
                                        shards=shards)
                    s.reload_positions()
                    behind = bootstrap.behind({lg: p for lg, (p, _) in s.positions.items()}, heads)
                    if behind:  # a peer behind the logs (restarted, or slow): take another copy
                        was = {lg: heads[lg] for lg in behind}
                        raise bootstrap.BootstrapFailed(f"the copy stands at {behind}, behind the logs' "
                                                        f"heads {was} when it began")
                break
            except bootstrap.BootstrapFailed as e:
                if world.monotonic() > deadline:
                    raise SystemExit(f"storage node {s.node_id}: cannot bootstrap: {e}") from None
                log.warning("bootstrap: %s; trying again", e)
                world.sleep(1)
        s.reload_positions()  # in place: the apply loop, the reads and the rounds hold them
        for lg in range(s.kv_logs):  # report the new positions at the next interval
            s.last_data[lg] = s.positions[lg][0]
        if condemned:  # its copy taken: off the fail-overs' lists
            registry.pardon(s.zk, s.node_id)
            s.kv = registry.read_kv(s.zk) or s.kv
        log.info("bootstrapped: positions %s", {lg: p for lg, (p, _) in s.positions.items()})

    def _retake(self, cut: set[int], bounds: dict[int, tuple[int, int | None]]) -> None:
        """Take this node's shards of the logs a fail-over cut again (storage_node/rebuild.py
        retake), then leave the fail-overs' lists; its other shards stay as they are."""
        s = self.state
        log.info("a fail-over cut logs %s: taking this node's shards of them again (saved positions %s)",
                 sorted(cut), {lg: p for lg, (p, _) in s.positions.items()})
        deadline = world.monotonic() + 300
        while True:
            bounds = self._log_bounds() or bounds  # (the heads as this try begins)
            s.learn_log_map(registry.read_log_map(s.zk, s.kv, s.log_count))
            try:
                heads = {lg: h for lg, (_, h) in bounds.items()}
                rebuild.retake(s, cut, heads, self.intake.receive, deadline)
                break
            except bootstrap.BootstrapFailed as e:
                if world.monotonic() > deadline:
                    raise SystemExit(f"storage node {s.node_id}: cannot take its shards of logs "
                                     f"{sorted(cut)} again: {e}") from None
                log.warning("taking the cut logs' shards again: %s; trying again", e)
                world.sleep(1)
        s.reload_positions()
        for lg in cut:  # report the new positions at the next interval
            s.last_data[lg] = s.positions[lg][0]
        registry.pardon(s.zk, s.node_id)
        s.kv = registry.read_kv(s.zk) or s.kv
        log.info("took its shards of logs %s again: positions %s", sorted(cut),
                 {lg: p for lg, (p, _) in s.positions.items()})

    def _log_bounds(self) -> dict[int, tuple[int, int | None]] | None:
        """Each key-value log's (first position still held, its head: a position past every
        entry acknowledged before this call, by a ReadIndex round; None when too few of its
        replicas answered) (None: the logs do not answer). Not the committed end the log
        servers say in their Status: a server that has not heard the writer's last
        acknowledgement says less (the whole-cluster simulation's seed 130: a node that had
        published position 1 of a log before it lost its disk was told its head was 0, took a
        copy there, and stopped behind the truncation its own publication had allowed)."""
        try:
            rows = self.state.logs.status()
        except Exception:
            return None
        out = {r["log"]: (r["first"], self._head(r["log"])) for r in rows if r["log"] < self.state.kv_logs}
        return out if len(out) == self.state.kv_logs else None

    def _head(self, log_id: int) -> int | None:
        try:
            index = self.state.logs.read_index(log_id)
        except Exception as e:  # ZooKeeper or the replicas away: unknown, asked again
            log.info("the head of log %d: %s", log_id, e)
            return None
        return None if index is None else index + 1

    def stop(self) -> None:
        self.state.stop.set()
        if hasattr(self, "membership"):
            self.membership.stop()
        world.sleep(0.1)
        try:
            self.state.logs.close()
        finally:
            self.reads.views.close_all()
            self.state.store.close()

    def ready(self) -> bool:
        """Serving: registered with a live ZooKeeper session, and caught up with every log
        (within HEALTH_LAG_MAX entries of its writer, measured within the last seconds)
        whose writer answers: one whose writer is away (its data center lost) holds back
        neither this node's other logs nor its reads of that log's shards, which wait on the
        writer themselves (a strong read's index) or on log time (a bounded read)."""
        s = self.state
        if s.zk.state != "CONNECTED" or not hasattr(self, "membership"):
            return False
        lag, away = s.lag, s.writers_away
        if any(lg not in lag and lg not in away for lg in s.tailed_logs()) or \
                max(lag.values(), default=0) > HEALTH_LAG_MAX:
            return False
        return s.zk.exists(self.membership.path) is not None

    # ---------------------------------------------------------------- reads (storage_node/reads.py)
    def read(self, req: pb.ReadRequest, field: str = "") -> pb.ReadResponse:
        return self.reads.read(req, field)

    def read_many(self, req: pb.ReadManyRequest) -> pb.ReadManyResponse:
        return self.reads.read_many(req)

    def scan_shard(self, req: pb.StorageScanShardRequest) -> Iterator[pb.ScanShardResponse]:
        return self.reads.scan_shard(req)

    def watch(self, req: pb.StorageWatchRequest) -> Iterator[pb.WatchResponse]:
        WATCH_STREAMS.inc()
        return self.feed.watch(req)

    def shard_splits(self, req: pb.StorageShardSplitsRequest) -> pb.ShardSplitsResponse:
        return self.reads.shard_splits(req)

    def checkpoint(self) -> contextlib.AbstractContextManager[Iterator[tuple[bytes, bytes]]]:
        return self.reads.checkpoint()

    def snapshot(self, req: pb.SnapshotRequest) -> Iterator[pb.SnapshotChunk]:
        """The whole state (a peer's bootstrap), or one shard (a move's destination; a
        refusal comes at the call, before the stream). Neither while this node starts: its
        state may yet be replaced by its own bootstrap, or be empty (its store lost: a
        shard copied from it then stood at position 0, and its taker stopped behind the
        log's truncation; the whole-cluster simulation's seed 32 with INGEST=1)."""
        if not self.state.started:
            raise Refusal(grpc.StatusCode.UNAVAILABLE, f"storage node {self.state.node_id} is starting; "
                          "ask another peer")
        if not req.one_shard:
            if len(req.min_positions) > self.state.kv_logs:
                raise BadRequest(f"min_positions: {len(req.min_positions)} positions, this cluster has "
                                 f"{self.state.kv_logs} key-value logs")
            for lg, at in enumerate(req.min_positions):  # Behind (another peer may be further) if not
                self.reads.wait_applied(lg, at, req.wait_ms)
            return self._whole_snapshot()
        if not 0 <= req.rate_mb_s <= RATE_MB_S_MAX:
            raise BadRequest(f"rate_mb_s: {req.rate_mb_s}, must be between 0 and {RATE_MB_S_MAX:g}")
        at, ts, pairs = self.reads.shard_copy(req)

        def paced() -> Iterator[pb.SnapshotChunk]:
            t0, sent = world.monotonic(), 0
            for chunk in bootstrap.chunks(pairs, SHARD_CHUNK_BYTES):
                chunk.position, chunk.log_time_ms = at, ts
                if req.rate_mb_s:  # the source paces: its disk and network are the ones spared
                    ahead = sent / (req.rate_mb_s * 1e6) - (world.monotonic() - t0)
                    if ahead > 0:
                        world.sleep(ahead)
                    sent += chunk.ByteSize()
                yield chunk
        return paced()

    def _whole_snapshot(self) -> Iterator[pb.SnapshotChunk]:
        s = self.state
        with self.checkpoint() as pairs:
            # (its view read once the checkpoint is taken: a shard it holds by then was not
            # dropped before it, as a node drops a shard only once its view says it left it)
            held = s.sets.shards_of(s.node_id)
            for chunk in bootstrap.chunks(pairs):
                if chunk.last:
                    chunk.held[:], chunk.held_known = held, True
                yield chunk

    def copy_shard(self, req: pb.CopyShardRequest) -> pb.CopyShardResponse:
        return self.intake.copy(req)

    # ---------------------------------------------------------------- eventual datasets
    # (storage_node/eventual_service.py; the calls go to self.eventual)
    def lww_write(self, req: pb.LwwWriteRequest) -> pb.LwwWriteResponse:
        return self.eventual.write(req)

    def lww_range(self, req: pb.LwwRangeRequest) -> pb.LwwRangeResponse:
        return self.eventual.range(req)

    def lww_read(self, req: pb.LwwReadRequest) -> pb.LwwReadResponse:
        return self.eventual.read(req)

    def lww_hashes(self) -> pb.LwwHashesResponse:
        return self.eventual.hashes()

    def status(self, req: pb.NodeStatusRequest | None = None) -> pb.NodeStatusResponse:
        s = self.state
        out = pb.NodeStatusResponse(node_id=s.node_id, reclaimed=s.reclaimed,
                                    lww_repaired=self.eventual.repaired, lww_purged=self.eventual.purged,
                                    lww_shards_pulled=self.eventual.shards_pulled, started=s.started)
        if req is not None and req.hold:  # a fail-over's: they stay where this answer says
            holds.check(req.hold, req.hold_logs, s.kv_logs)
            self.applier.holds.hold(req.hold_logs, req.hold)
        positions = said_positions(s, req is not None and req.durable)
        for p, ts in (positions[i] for i in range(s.kv_logs)):
            out.log_positions.append(p)
            out.log_times.append(ts)
        for shard, dataset, n in s.store.event_counts():
            if not n:
                continue
            oldest = next(iter(s.store.oldest_events(shard, dataset, 1)), None)
            out.event_ids.append(pb.EventIds(dataset=dataset, shard=shard, ids=n,
                                             oldest_ms=oldest[3] if oldest is not None else 0,
                                             log_time_ms=s.positions[s.log_of(shard)][1]))
        for shard, lg, pos, digest in s.shard_digests():
            out.shards.append(pb.ShardState(shard=shard, log_id=lg, position=pos, digest=digest))
        return out
