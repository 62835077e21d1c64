"""A log server's state and its ZooKeeper shell: the replica core with its store, the
writers it runs, peers, the election loop, truncation and metadata watches, and the
catch-up loop that fills a replica's gaps from its peers."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from typing import Any

import grpc
from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.protocol.states import KazooState

from log import codec, limits, reading
from log import zk as zkpaths
from log.driver import WriterDriver
from log.entry import Entry
from log.messages import AddEntries, Fence, ReadRange, Result
from log.metadata import LogMetadata
from log.peers import Peers
from log.read_cache import ReadCache
from log.replica import ReplicaCore
from log.rocks_store import RocksStore
from log.writer import Writer
from runtime import loops
from runtime.membership import Membership

log = logging.getLogger("midtown.log.node")

ELECTION_POLL_S = 0.25
WRITER_REFRESH_S = 5.0
CATCHUP_POLL_S = 1.0


class Unavailable(Exception):
    pass


class Node:
    def __init__(self, server_id: int, addr: str, zk_hosts: str, data_dir: str) -> None:
        self.server_id = server_id
        self.addr = addr
        self.zk = zkpaths.connect(zk_hosts)
        self._zk_ok = threading.Event()
        self._zk_ok.set()
        self.zk.add_listener(self._on_zk_state)
        self.topo = self._wait_topology()
        os.makedirs(data_dir, exist_ok=True)
        self.store = RocksStore(os.path.join(data_dir, "replica.db"))
        self.replica = ReplicaCore(server_id, self.store, self.topo.logs)
        # One lock over the replica side: every replica operation, and the group commit
        # that makes it durable, completes before the next starts (and before any reply).
        self.rlock = threading.Lock()
        self.conds = [threading.Condition() for _ in range(self.topo.logs)]
        self.read_cache = ReadCache()
        self.meta: dict[int, LogMetadata] = {}
        self.writers: dict[int, WriterDriver] = {}
        self.filled: dict[int, int] = {}
        self.epoch_floor: dict[int, int] = {}  # highest fenced epoch seen per log
        self._stop = threading.Event()
        self._watches: list[Any] = []
        self.peers = Peers(server_id, self.zk, self.local, self.local_batch, self._stop)
        # Each log's writer node as last seen by a watch (no entry: not seen yet).
        self.writer_cache: dict[int, dict | None] = {}
        self._wake = threading.Event()

    # ------------------------------------------------------------ start/stop
    def _wait_topology(self) -> zkpaths.Topology:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            topo = zkpaths.read_topology(self.zk)
            if topo is not None:
                if self.server_id not in topo.log_servers:
                    raise SystemExit(f"server id {self.server_id} is not in the topology {topo}")
                return topo
            time.sleep(0.2)
        raise SystemExit("no topology in ZooKeeper: run `midtown cluster up` (or create it)")

    def start(self) -> None:
        for log_id in range(self.topo.logs):
            self.filled[log_id] = self.replica.first(log_id) - 1
            self._watches.append(
                self.zk.DataWatch(zkpaths.log_path(log_id), self._meta_watch(log_id))
            )
            self._watches.append(
                self.zk.DataWatch(zkpaths.truncate_path(log_id), self._trunc_watch(log_id))
            )
            self._watches.append(
                self.zk.DataWatch(zkpaths.writer_path(log_id), self._writer_watch(log_id))
            )
        self.membership = Membership(
            self.zk, f"{zkpaths.SERVERS}/{self.server_id}",
            lambda: json.dumps({"addr": self.addr, "pid": os.getpid()}).encode())
        self.membership.start()
        loops.forever("election", self._election_loop, self._stop)
        loops.forever("catch-up", self._catchup_loop, self._stop)

    def stop(self) -> None:
        self._stop.set()
        if hasattr(self, "membership"):
            self.membership.stop()
        for d in list(self.writers.values()):
            d.stop("server stopping")
        for d in list(self.writers.values()):
            d.thread.join(2)
        try:
            self.zk.stop()
            self.zk.close()
        except Exception:
            pass
        self.store.close()

    # ------------------------------------------------------------ ZooKeeper
    def zk_ok(self) -> bool:
        return self._zk_ok.is_set()

    def ready(self) -> bool:
        """Serving: started, with a live ZooKeeper session, registered under it."""
        if not self.zk_ok() or not hasattr(self, "membership"):
            return False
        stat = self.zk.exists(self.membership.path)
        return stat is not None and stat.ephemeralOwner == self.zk.client_id[0]

    def _on_zk_state(self, state: str) -> None:
        if state == KazooState.CONNECTED:
            self._zk_ok.set()  # registering again is the membership's job
            return
        # SUSPENDED or LOST: a lock holder must assume nothing (kazoo docs). Stop
        # acknowledging at once; the fencing epoch protects the log meanwhile.
        self._zk_ok.clear()
        for d in list(self.writers.values()):
            d.stop(f"ZooKeeper session {state.lower()}")

    def _meta_watch(self, log_id: int):  # type: ignore[no-untyped-def]
        def watch(data: bytes | None, stat: Any) -> None:
            if data:
                self.meta[log_id] = LogMetadata.from_json(data)
                self.notify(log_id)
        return watch

    def _writer_watch(self, log_id: int):  # type: ignore[no-untyped-def]
        def watch(data: bytes | None, stat: Any) -> None:
            self.writer_cache[log_id] = json.loads(data) if data else None
            self._wake.set()
        return watch

    def _trunc_watch(self, log_id: int):  # type: ignore[no-untyped-def]
        def watch(data: bytes | None, stat: Any) -> None:
            if not data:
                return
            before = int(json.loads(data)["before"])
            with self.rlock:
                self.replica.truncate(log_id, before)
            self.filled[log_id] = max(self.filled.get(log_id, -1), before - 1)
            self.notify(log_id)
        return watch

    def check_epoch_issued(self, log_id: int, epoch: int) -> None:
        """A replica request from another server must carry an epoch that ZooKeeper issued
        for the log (a writer takes its epoch there with a versioned write before it fences
        or appends). Anything higher comes from a broken or hostile peer: taken, it would
        fence the replica out of reach of every real writer. ValueError names it.

        The epochs seen so far cost a dictionary look-up; only a higher one (a new writer's
        first message) costs a ZooKeeper read, after a sync so that it sees the new epoch."""
        if epoch == 0:
            return  # a plain read: no fencing
        known = self.meta.get(log_id)
        if known is not None and epoch <= known.epoch:
            return
        self.zk.sync(zkpaths.log_path(log_id))
        meta, _ = zkpaths.read_metadata(self.zk, log_id)
        if epoch > meta.epoch:
            raise ValueError(f"epoch: {epoch} was never issued for log {log_id} (its epoch in "
                             f"ZooKeeper is {meta.epoch}); refused")

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

    # ------------------------------------------------------------ election
    def _election_loop(self) -> None:
        vacant_since: dict[int, float] = {}
        backoff_until: dict[int, float] = {}
        next_refresh = 0.0
        while not self._stop.is_set():
            # Watches wake the loop at once; the poll is for backoffs and failed writers.
            self._wake.wait(ELECTION_POLL_S)
            self._wake.clear()
            if not self.zk_ok():
                continue
            now = time.monotonic()
            if now >= next_refresh:  # a safety net under the watches
                self.writer_cache.clear()
                next_refresh = now + WRITER_REFRESH_S
            for log_id in range(self.topo.logs):
                try:
                    self._elect_one(log_id, now, vacant_since, backoff_until)
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
        if log_id in self.writer_cache:
            w = self.writer_cache[log_id]
        else:
            w = self.writer_cache[log_id] = zkpaths.read_writer(self.zk, log_id)
        if w is not None:
            vacant_since.pop(log_id, None)
            if w["server"] == self.server_id and d is None:
                # Ours from before a suspension: give it up so a fresh epoch is taken.
                self._relinquish(log_id)
            return
        since = vacant_since.setdefault(log_id, now)
        rank = self.topo.preferred_rank(log_id, self.server_id)
        if now - since < rank * limits.ELECTION_BACKOFF_S or now < backoff_until.get(log_id, 0):
            return
        self._claim(log_id)

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

    def _claim(self, log_id: int) -> None:
        body = {"server": self.server_id, "addr": self.addr, "state": "recovering"}
        try:
            self.zk.create(zkpaths.writer_path(log_id), json.dumps(body).encode(), ephemeral=True)
        except NodeExistsError:
            return
        try:
            meta, version = zkpaths.read_metadata(self.zk, log_id)
            new = meta.bump(self.server_id, at_least=self.epoch_floor.get(log_id, 0) + 1)
            v = zkpaths.cas_metadata(self.zk, new, version)
        except Exception:
            # Whatever went wrong, the writer node must not stay held by a server that does
            # not write: the log would have no writer and no election.
            log.exception("claiming log %d", log_id)
            self._relinquish(log_id)
            return
        if v is None:
            self._relinquish(log_id)
            return
        self.writer_cache.pop(log_id, None)
        self.meta[log_id] = new
        core = Writer(log_id, new.epoch, new, v, tuple(self.topo.log_servers))
        d = WriterDriver(self, core)
        self.writers[log_id] = d
        log.info("server %d writes log %d at epoch %d", self.server_id, log_id, new.epoch)
        d.start()

    # ------------------------------------------------------------ replica side
    def local(self, msg: Any) -> Any:
        return self.local_batch([msg])[0]

    def local_batch(self, msgs: list[Any]) -> list[Any]:
        """Handle replica requests (any logs) with one synced write for all of them."""
        replies: list[Any] = []
        with self.rlock, self.store.group():
            for msg in msgs:
                if isinstance(msg, Fence):
                    replies.append(self.replica.on_fence(msg))
                elif isinstance(msg, AddEntries):
                    replies.append(self.replica.on_add(msg))
                else:
                    replies.append(self.replica.on_read_range(msg))
        for msg, rep in zip(msgs, replies):
            if isinstance(msg, AddEntries) and msg.lac >= 0 and rep.result is Result.OK:
                self.notify(msg.log_id)
        return replies

    def notify(self, log_id: int) -> None:
        c = self.conds[log_id]
        with c:
            c.notify_all()

    # ------------------------------------------------------------ peers (log/peers.py)
    def send(self, driver: WriterDriver, to: int, msg: Any) -> None:
        """Deliver a writer's message to a replica (ourselves included); the reply goes
        back into the writer's inbox."""
        self.peers.send(driver, to, msg)

    def dispatch_reply(self, core: Writer, replica: int, req: Any, rep: Any) -> None:
        if isinstance(req, Fence):
            core.on_fence_reply(replica, rep)
        elif isinstance(req, AddEntries):
            core.on_add_reply(replica, req, rep)
        elif isinstance(req, ReadRange):
            core.on_read_reply(replica, req, rep)

    # ------------------------------------------------------------ reading
    def committed_end(self, log_id: int) -> int:
        meta = self.meta.get(log_id)
        if meta is None:
            return limits.FIRST_POSITION - 1
        seg = meta.last_segment
        lac = -1
        if seg is not None and not seg.sealed:
            lac = self.replica.lac(log_id, seg.epoch)
            d = self.writers.get(log_id)
            if d is not None and d.core.epoch == seg.epoch:
                lac = max(lac, d.core.lac)
        return reading.committed_end(meta, lac)

    def read_committed(self, log_id: int, lo: int, hi: int) -> list[Entry]:
        """Committed entries [lo, hi] (the caller checked hi <= committed end), from the
        local store, fetching from peers whatever this replica is missing."""
        meta = self.meta[log_id]
        out: list[Entry] = []
        p = lo
        while p <= hi:
            seg = meta.segment_of(p)
            if seg is None:
                raise Unavailable(f"position {p} is in no segment of log {log_id}")
            seg_hi = hi if seg.end is None else min(hi, seg.end)
            got = self.store.range(log_id, seg.epoch, p, seg_hi)
            if len(got) != seg_hi - p + 1:
                have = {e.position for e in got}
                missing = [q for q in range(p, seg_hi + 1) if q not in have]
                got += self._fetch(log_id, seg.epoch, missing, seg.replicas)
                got.sort(key=lambda e: e.position)
                if len(got) != seg_hi - p + 1:
                    raise Unavailable(
                        f"log {log_id}: no live replica holds positions {missing[0]}..{missing[-1]}"
                    )
            out += got
            p = seg_hi + 1
        return out

    def _fetch(self, log_id: int, seg_epoch: int, missing: list[int],
               replicas: tuple[int, ...]) -> list[Entry]:
        found: dict[int, Entry] = {}
        for r in replicas:
            if r == self.server_id or len(found) == len(missing):
                continue
            stub = self.peers.stub(r)
            if stub is None:
                continue
            want = [q for q in missing if q not in found]
            try:
                rep = stub.ReadRange(
                    codec.read_to_pb(ReadRange(log_id, 0, seg_epoch, want[0], want[-1])),
                    timeout=limits.REPLICA_RPC_TIMEOUT_S,
                )
            except grpc.RpcError:
                continue
            for e in codec.read_reply_from_pb(rep).entries:
                if e.position in want:
                    found[e.position] = e
        if found:
            with self.rlock:
                self.replica.fill(log_id, list(found.values()))
        return list(found.values())

    def _catchup_loop(self) -> None:
        """Fill this replica's gaps (it was down, or missed messages) from its peers, so
        every committed entry ends up on every replica."""
        while not self._stop.wait(CATCHUP_POLL_S):
            for log_id in range(self.topo.logs):
                try:
                    end = self.committed_end(log_id)
                    lo = max(self.filled[log_id] + 1, self.replica.first(log_id))
                    while lo <= end and not self._stop.is_set():
                        hi = min(end, lo + limits.MESSAGE_ENTRIES_MAX - 1)
                        self.read_committed(log_id, lo, hi)
                        self.filled[log_id] = hi
                        lo = hi + 1
                except Exception as e:
                    log.debug("catch-up of log %d: %s", log_id, e)


