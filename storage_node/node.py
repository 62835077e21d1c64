"""A storage node: tails every log that carries shards (one thread each, logs in parallel),
applies each log's records strictly in order, and persists each batch's effects with the
log's new position in one atomic write batch, synced before that position is published.
After a crash it resumes from the saved position: nothing applied twice, nothing skipped.
Results go back to the coordinator named in each record."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import random
import shutil
import threading
import time
from collections.abc import Iterator

import grpc

from catalog import datasets, registry
from catalog import usage as usage_reports
from catalog.routing import answers_for, log_of, shards_of_log
from log import limits as log_limits
from log import zk as logzk
from log.client import LocalAppends, LogClient, LogError
from log.entry import Entry
from log.group_commit import GroupCommit
from log.node import Node, Unavailable
from midtown_pb import kv_pb2 as pb
from midtown_pb import kv_pb2_grpc, log_pb2
from runtime import inprocess, loops, transport
from runtime.process import EXIT_APPLY_FAILED, EXIT_BEHIND_TRUNCATION, Fatal, exit_now
from storage_node import bootstrap, codec, keys, lww, reclaim, usage
from storage_node.apply import apply
from storage_node.callbacks import AnswerTaker, Callbacks
from storage_node.eventual_service import EventualService
from storage_node.limits import (
    APPLY_BATCH_ENTRIES_MAX,
    CALLBACK_REPLICAS,
    HEALTH_LAG_MAX,
    LAG_INTERVAL_S,
    USAGE_DUTY,
    USAGE_INTERVAL_MAX_S,
)
from storage_node.lww import LwwReplica
from storage_node.metrics import APPLIED, DIVERGED, EVENT_IDS, LAG, POSITION
from storage_node.model import Drop, Position, Record, RecordResult
from storage_node.reads import Reads
from storage_node.settings import Settings
from storage_node.store import BatchView, NodeStore
from storage_node.truncation import needs_publish, truncation_point

log = logging.getLogger("midtown.storage.node")
# Entries from a Read stream, or straight from the log server in this process.
Entries = list[log_pb2.Entry] | list[Entry]


class StorageNode:
    def __init__(self, node_id: int, addr: str, zk_hosts: str, data_dir: str,
                 settings: Settings | None = None, on_fatal: Fatal = exit_now,
                 local_appends: LocalAppends | None = None, local_log: inprocess.Local[Node] | None = None,
                 local_answers: inprocess.Local[AnswerTaker] | None = None) -> None:
        """`on_fatal(code, why)`: what the process does when this node must not go on (it
        exits, chosen where the process is wired; a test can record it instead)."""
        self.node_id = node_id
        self.settings = settings = settings or Settings()
        self._fatal = on_fatal
        self.addr = addr
        self.logs = LogClient(zk_hosts, local=local_appends)
        # The log server and the coordinator of this process, if any (the host layout).
        self.local_log: inprocess.Local[Node] = local_log or inprocess.Local()
        self.local_answers: inprocess.Local[AnswerTaker] = local_answers or inprocess.Local()
        self.zk = self.logs.zk
        self.log_count = self._wait(lambda: logzk.read_topology(self.zk)).logs
        self.kv = self._wait(lambda: registry.read_kv(self.zk))
        self.kv_logs = min(self.kv.logs, self.log_count)
        os.makedirs(data_dir, exist_ok=True)
        self.data_dir = data_dir
        for old in os.listdir(data_dir):  # checkpoints a crash left behind
            if old.startswith("checkpoint-"):
                shutil.rmtree(os.path.join(data_dir, old), ignore_errors=True)
        self.store = NodeStore(os.path.join(data_dir, "state.db"))
        self.lww = LwwReplica(self.store, int(settings.tombstone_grace_s * 1000))  # eventual datasets
        self.callbacks = Callbacks()
        self.positions: dict[int, tuple[int, int]] = {
            i: self.store.next_position(i) for i in range(self.log_count)
        }
        self.cond = threading.Condition()
        self.commit_lock = threading.Lock()
        self.lag: dict[int, int] = {}  # log -> entries behind its writer, last measured
        self._stop = threading.Event()
        self.member_positions: dict[tuple[int, int], int] = self.store.member_positions()
        self.reads = Reads(self.node_id, self.store, self.data_dir, self.commit_lock, self.cond,
                           self.positions, lambda: self.kv, self.kv_logs)
        self.eventual = EventualService(self.node_id, self.zk, self.store, self.lww,
                                        lambda: self.kv, self._peers, self._stop)
        self._last_data: dict[int, int] = {}  # log -> position of the last key-value record
        self._next_reclaim = 0.0
        self.reclaimed = 0  # dedup entries reclaimed since start
        # One applier for every log, run by the tail threads themselves (group commit).
        self._applier: GroupCommit[tuple[int, Entries], None] = GroupCommit(
            self._apply_group, size=lambda item: len(item[1]), max_size=APPLY_BATCH_ENTRIES_MAX)

    @staticmethod
    def _wait(fn):  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            v = fn()
            if v is not None:
                return v
            time.sleep(0.2)
        raise SystemExit("no cluster topology in ZooKeeper")

    def start(self) -> None:
        self._bootstrap_if_needed()
        self.eventual.drop_if_outlived()
        # Each background loop retries with backoff after a failure (runtime/loops.py): a
        # lost ZooKeeper session or an unreachable log never stops one for good.
        self._published: dict[int, int] = {}
        self._truncated: dict[int, int] = {}
        loops.every("positions", self.settings.position_interval_s, self._positions_round, self._stop)
        loops.every("anti-entropy", self.settings.anti_entropy_s, self.eventual.anti_entropy_pass,
                    self._stop, first_at_once=self.eventual.refill)  # values dropped at start: at once
        # Counting reads every key: on a node holding much, it runs less often, at most
        # USAGE_DUTY of the time, and at least every USAGE_INTERVAL_MAX_S.
        loops.every("usage", self.settings.usage_interval_s, self._usage_round, self._stop,
                    first_at_once=True, duty=USAGE_DUTY, max_interval_s=USAGE_INTERVAL_MAX_S)
        loops.every("lag", LAG_INTERVAL_S, self._measure, self._stop, first_at_once=True)
        for log_id in range(self.kv_logs):  # the logs that carry shards; the others, never
            loops.forever(f"tail-{log_id}", functools.partial(self._tail, log_id), self._stop)
        self.membership = registry.register(self.zk, registry.STORAGE_NODES, self.node_id, self.addr)

    def _bootstrap_if_needed(self) -> None:
        """Copy a peer's state first when this node is new or behind a truncation
        (storage_node/bootstrap.py); otherwise resume from the saved positions."""
        first = self._wait(self._first_available)
        marker = self.store._get(bootstrap.MARKER) is not None
        saved = {lg: p for lg, (p, _) in self.positions.items()}
        if not bootstrap.needed(saved, first, marker):
            return
        log.info("bootstrapping from a peer (saved positions %s, first available %s%s)",
                 saved, first, ", an earlier bootstrap did not finish" if marker else "")
        deadline = time.monotonic() + 300
        while True:
            peers = self._peers(members_only=True)  # a removed node may be behind the logs
            try:
                bootstrap.copy_from(self.store.db, peers, self.store.sync)
                break
            except bootstrap.BootstrapFailed as e:
                if time.monotonic() > deadline:
                    raise SystemExit(f"storage node {self.node_id}: cannot bootstrap: {e}") from None
                time.sleep(1)
        self.positions = {i: self.store.next_position(i) for i in range(self.log_count)}
        self.member_positions = self.store.member_positions()
        for lg in range(self.kv_logs):  # report the new positions at the next interval
            self._last_data[lg] = self.positions[lg][0]
        log.info("bootstrapped: positions %s", {lg: p for lg, (p, _) in self.positions.items()})

    def _first_available(self) -> dict[int, int] | None:
        """Each key-value log's first position still held (None: the logs do not answer)."""
        try:
            rows = self.logs.status()
        except Exception:
            return None
        out = {r["log"]: r["first"] for r in rows if r["log"] < self.kv_logs}
        return out if len(out) == self.kv_logs else None

    def stop(self) -> None:
        self._stop.set()
        if hasattr(self, "membership"):
            self.membership.stop()
        time.sleep(0.1)
        try:
            self.logs.close()
        finally:
            self.store.close()

    # ---------------------------------------------------------------- apply loop
    def _tail(self, log_id: int) -> None:
        backoff = 0.1
        while not self._stop.is_set():
            pos = self.positions[log_id][0]
            addr = self.logs.writer_addr(log_id, refresh=True)
            if addr is None:
                time.sleep(backoff)
                continue
            local = self.local_log.at(addr)
            if local is not None:
                if self._tail_in_process(local, log_id):
                    backoff = 0.1
                else:
                    time.sleep(backoff)  # ZooKeeper still names it, but it stopped writing
                    backoff = min(backoff * 2, 1.0)
                continue
            try:
                stream = self.logs.stub(addr).Read(
                    log_pb2.ReadRequest(log_id=log_id, from_position=pos, follow=True)
                )
                for resp in stream:
                    if self._stop.is_set():
                        stream.cancel()
                        return
                    if resp.entries:
                        self._apply_entries(log_id, list(resp.entries))
                    backoff = 0.1
            except grpc.RpcError as e:
                if e.code() == grpc.StatusCode.OUT_OF_RANGE:
                    self._behind_truncation(log_id, e.details())
                else:
                    time.sleep(backoff)
                    backoff = min(backoff * 2, 1.0)

    def _tail_in_process(self, node: Node, log_id: int) -> bool:
        """Tail a log whose writer runs in this process (midtown.cluster.host): its committed
        entries straight from its store, no stream. Returns when it stops writing the log:
        whether it applied anything."""
        cond = node.conds[log_id]
        applied = False
        while not self._stop.is_set():
            d = node.writers.get(log_id)
            if d is None or d.failed.is_set():
                return applied  # the writer moved: look it up again
            pos = self.positions[log_id][0]
            if pos < node.replica.first(log_id):
                self._behind_truncation(log_id, f"position {pos} is truncated")
            end = node.committed_end(log_id)
            if pos > end:
                with cond:
                    if node.committed_end(log_id) < pos:
                        cond.wait(0.5)
                continue
            try:
                entries = node.read_committed(
                    log_id, pos, min(end, pos + log_limits.READ_BATCH_ENTRIES_MAX - 1))
            except Unavailable as e:
                log.warning("log %d: %s", log_id, e)
                return applied
            inprocess.used("tail")
            self._apply_entries(log_id, entries)
            applied = True
        return applied

    def _behind_truncation(self, log_id: int, why: str) -> None:
        """A member is never truncated past (it publishes its positions); only a node that
        was taken out of the membership gets here. It stops: started again, it bootstraps."""
        self._fatal(EXIT_BEHIND_TRUNCATION, f"log {log_id}: {why}; this node is behind a truncation "
                    "and stops: start it again to bootstrap from a peer")

    def _apply_entries(self, log_id: int, entries: Entries) -> None:
        """Apply what a tail thread received; returns once it is written. Entries that
        other logs' tail threads received meanwhile are applied in the same batch."""
        try:
            self._applier.call((log_id, entries))
        except Exception:
            log.exception("apply failed")
            # Restart from the saved positions rather than diverge.
            self._fatal(EXIT_APPLY_FAILED, "apply failed; stopping this node")

    def _apply_group(self, items: list[tuple[int, Entries]]) -> list[None]:
        """One batch for every log: each log's entries in order, written with one atomic
        write batch that also holds every log's new position."""
        self._apply(items)
        return [None] * len(items)

    def _apply(self, items: list[tuple[int, Entries]]) -> None:
        view = BatchView(self.store)
        out: dict[str, list[pb.RecordResult]] = {}
        near: dict[str, list[RecordResult]] = {}  # to coordinators in this process
        new: dict[int, tuple[int, int]] = {}
        for log_id, entries in items:
            expected = new.get(log_id, self.positions[log_id])[0]
            entries = [e for e in entries if e.position >= expected]
            if not entries:
                continue  # a stream restarted and sent again what was already applied
            assert entries[0].position == expected, f"log {log_id}: gap at {expected}"
            for e in entries:
                try:
                    rec = codec.record_from_bytes(e.payload)
                except Exception:  # not a record every replica can decode: a no-op everywhere
                    log.warning("log %d position %d: undecodable record skipped", log_id, e.position)
                    continue
                applied = apply(view, rec, log_id, e.position, e.timestamp_ms, self.node_id)
                view.add(applied, rec.shard, e.timestamp_ms, log_id)
                if not applied.positions:
                    self._last_data[log_id] = e.position
                if rec.callback and applied.result is not None:
                    if self.local_answers.at(rec.callback) is not None:  # always: it costs no call
                        near.setdefault(rec.callback, []).append(applied.result)
                    elif self.answers_for(rec.shard):
                        out.setdefault(rec.callback, []).append(codec.result_to_pb(applied.result))
            new[log_id] = (entries[-1].position + 1, entries[-1].timestamp_ms)
            APPLIED.labels(log=str(log_id)).inc(len(entries))
            POSITION.labels(log=str(log_id)).set(entries[-1].position + 1)
        if not new:
            return
        self._reclaim(view, new)
        with self.commit_lock:  # a shard scan sees a batch whole, with its positions, or not at all
            view.commit(new)  # effects and positions, atomically
            self.positions.update(new)
        dropped_eventual = {keys.shard_of_key(p) for p in view.dropped if p[:1] == b"E"}
        if dropped_eventual:  # a dropped dataset's eventual values went by ranges
            self.lww.rehash(dropped_eventual)
        self.member_positions.update(view.member_positions)
        with self.cond:
            self.cond.notify_all()
        for addr, results in out.items():
            self.callbacks.send(addr, results)
        for addr, mine in near.items():
            taker = self.local_answers.at(addr)
            if taker is not None:
                inprocess.used("answer")
                taker.deliver(mine)

    def _reclaim(self, view: BatchView, new: dict[int, tuple[int, int]]) -> None:
        """Now and then, delete in this batch the dedup entries no record can match and the
        values no read can see any more (storage_node/reclaim.py)."""
        now = time.monotonic()
        if now < self._next_reclaim:
            return
        self._next_reclaim = now + reclaim.RECLAIM_INTERVAL_S
        for log_id in range(self.kv_logs):
            ts = new.get(log_id, self.positions[log_id])[1]
            if ts:
                self.reclaimed += view.reclaim(log_id, reclaim.dedup_cutoff(ts),
                                               reclaim.RECLAIM_BATCH_MAX)
                self.reclaimed += view.reclaim_expired(log_id, reclaim.expiry_cutoff(ts),
                                                       reclaim.RECLAIM_BATCH_MAX)

    def _positions_round(self) -> None:
        """Publish this node's durable position into each log it has applied data from,
        and truncate each log below the lowest position of every member, never while a
        member's position is unknown (a node that is down holds truncation back).
        ZooKeeper trouble (a lost session) raises: the loop retries with backoff."""
        published, truncated = self._published, self._truncated
        self.kv = registry.read_kv(self.zk) or self.kv  # membership changes (node remove)
        self._append_drops()
        durable = {i: p for i, (p, _) in self.positions.items()}
        self.store.sync()  # only positions made durable are published (DESIGN.md)
        for log_id in range(self.log_count):
            pos = durable[log_id]
            if needs_publish(self._last_data.get(log_id), published.get(log_id)):
                rec = Record(b"", "", "", 0, b"", (Position(self.node_id, pos),))
                try:
                    self.logs.append(log_id, [codec.record_to_bytes(rec)], timeout_s=5)
                    published[log_id] = pos
                except LogError as e:
                    log.debug("publishing position of log %d: %s", log_id, e)
            low = truncation_point(self.member_positions, log_id, self.kv.storage_nodes)
            if low is not None and low > truncated.get(log_id, 0):
                try:
                    truncated[log_id] = self.logs.truncate(log_id, low)
                except LogError as e:
                    log.debug("truncating log %d: %s", log_id, e)

    def _append_drops(self) -> None:
        """Put a drop record for each dataset dropped more than DROP_DELAY_S ago into every
        log that has not applied one: applying it deletes the dataset's keys in that log's
        shards, at the same point of the log on every replica. The delay lets requests that
        were already under way when it was dropped come first. Any node may append one;
        a second one deletes nothing more."""
        try:
            due = [i for i, at in datasets.dropped(self.zk)
                   if time.time() * 1000 - at >= self.settings.drop_delay_s * 1000]
            for dataset_id in due:
                pending = [lg for lg in range(self.kv_logs)
                           if not self.store.drop_applied(lg, dataset_id)]
                if not pending:
                    # In every log now: every member applies it from there (the logs are
                    # not truncated past a member), so the note has done its work.
                    datasets.forget_drop(self.zk, dataset_id)
                for log_id in pending:
                    shards = shards_of_log(log_id, self.kv.shards, self.kv_logs)
                    rec = Record(b"", "", dataset_id, shards[0] if shards else 0, b"", (Drop(shards),))
                    self.logs.append(log_id, [codec.record_to_bytes(rec)], timeout_s=5)
        except Exception as e:  # ZooKeeper or a log unavailable: the next interval tries again
            log.debug("dropping datasets: %s", e)

    def _measure(self) -> None:
        """How far behind each log's writer this node is (health and metrics), whether its
        shards' digests agree with a peer's at the same positions, and its event ids."""
        lag = {}
        for log_id in range(self.kv_logs):
            addr = self.logs.writer_addr(log_id, refresh=True)
            if addr is None:
                continue
            last = self.logs.stub(addr).Tail(log_pb2.TailRequest(log_id=log_id), timeout=2).last
            lag[log_id] = max(0, int(last) + 1 - self.positions[log_id][0])
            LAG.labels(log=str(log_id)).set(lag[log_id])
        self.lag = lag
        peers = self._peers(members_only=True)
        if peers:
            theirs = kv_pb2_grpc.StorageStub(transport.channel(random.choice(peers))).Status(
                pb.NodeStatusRequest(), timeout=5)
            mine = {s.shard: (s.position, s.digest) for s in self.status().shards}
            DIVERGED.set(sum(1 for s in theirs.shards if mine.get(s.shard, (None, 0))[0] == s.position
                             and mine[s.shard][1] != s.digest))
        held: dict[str, int] = {}
        for _, dataset, n in self.store.event_counts():
            held[dataset] = held.get(dataset, 0) + n
        for dataset, n in held.items():
            EVENT_IDS.labels(dataset=dataset.rsplit("#", 1)[0]).set(n)

    def ready(self) -> bool:
        """Serving: registered with a live ZooKeeper session, and caught up with every log
        (within HEALTH_LAG_MAX entries of its writer, measured within the last seconds)."""
        if self.zk.state != "CONNECTED" or not hasattr(self, "membership"):
            return False
        if len(self.lag) < self.kv_logs or max(self.lag.values(), default=0) > HEALTH_LAG_MAX:
            return False
        return self.zk.exists(self.membership.path) is not None

    def answers_for(self, shard: int) -> bool:
        return answers_for(self.node_id, shard, self.kv.storage_nodes, CALLBACK_REPLICAS)

    # ---------------------------------------------------------------- reads (storage_node/reads.py)
    def read(self, req: pb.ReadRequest, field: str = "") -> pb.ReadResponse:
        return self.reads.read(req, field)

    def read_many(self, req: pb.ReadManyRequest) -> pb.ReadManyResponse:
        return self.reads.read_many(req)

    def scan_shard(self, req: pb.StorageScanShardRequest) -> Iterator[pb.ScanShardResponse]:
        return self.reads.scan_shard(req)

    def checkpoint(self) -> contextlib.AbstractContextManager[Iterator[tuple[bytes, bytes]]]:
        return self.reads.checkpoint()

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

    def _peers(self, members_only: bool = False) -> list[str]:
        """The addresses of the other storage nodes that are up."""
        return [a for nid, a in registry.members(self.zk, registry.STORAGE_NODES).items()
                if nid != self.node_id and (not members_only or nid in self.kv.storage_nodes)]

    def _usage_round(self) -> None:
        """Now and every usage interval: note that this node is up, count what each dataset
        takes here and publish it for the quota checks (coordinator/quotas.py), and purge
        the eventual tombstones and expired values older than the grace, seen on the way.
        Purging comes before publishing, so a ZooKeeper outage does not hold it back."""
        now_ms = int(time.time() * 1000)
        self.store.set_last_up(now_ms)
        old: list[tuple[bytes, bytes]] = []

        def watch(items: Iterator[tuple[bytes, bytes]]) -> Iterator[tuple[bytes, bytes]]:
            for k, v in items:
                if (k[:1] == b"E" and len(old) < lww.PURGE_BATCH_MAX
                        and lww.purgeable(v, now_ms, self.lww.grace_ms)):
                    old.append((k, v))
                yield k, v
        counts = usage.tally(watch(usage.data_items(self.store)))
        self.eventual.purged += self.lww.purge(old)
        if self.node_id in self.kv.storage_nodes:  # a removed node's data is behind
            usage_reports.publish(self.zk, self.node_id, counts)

    def status(self) -> pb.NodeStatusResponse:

        out = pb.NodeStatusResponse(node_id=self.node_id, reclaimed=self.reclaimed,
                                    lww_repaired=self.eventual.repaired, lww_purged=self.eventual.purged,
                                    lww_shards_pulled=self.eventual.shards_pulled)
        for i in range(self.kv_logs):
            out.log_positions.append(self.positions[i][0])
        for shard, dataset, n in self.store.event_counts():
            if not n:
                continue
            oldest = next(iter(self.store.oldest_events(shard, dataset, 1)), None)
            out.event_ids.append(pb.EventIds(dataset=dataset, shard=shard, ids=n,
                                             oldest_ms=oldest[3] if oldest is not None else 0,
                                             log_time_ms=self.positions[log_of(shard, self.kv_logs)][1]))
        for s in range(self.kv.shards):
            lg = log_of(s, self.kv_logs)
            out.shards.append(pb.ShardState(shard=s, log_id=lg, position=self.positions[lg][0],
                                            digest=self.store.digest(s)))
        return out



