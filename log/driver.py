"""The writer shell: one thread per log this server writes, feeding the pure Writer core
with appends, replica replies and ticks, and carrying out what it asks (send, write the
metadata to ZooKeeper, acknowledge). Nothing here decides anything about the protocol."""

from __future__ import annotations

import logging
import queue
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import Any, Protocol

from log import limits
from log.ensemble_change import Copies
from log.messages import AddEntries
from log.metadata import LogMetadata
from log.metrics import APPEND_BATCH, APPENDS, COMMIT_LAG, ENSEMBLE_CHANGES, EPOCH
from log.seals import NONE, UNTAGGED, Sealed, Seals, Stint, Tags
from log.writer import Acked, ChangeEnsemble, Failed, Send, State, WriteMetadata, Writer
from runtime import faults, tracing, world
from runtime.clock import lease_clock


class WriterHost(Protocol):
    """What a writer's driver needs from the server it runs in (log/node.py's Node): the
    server is wired above the driver, never imported by it."""

    def zk_ok(self) -> bool: ...
    def session_ok(self) -> bool: ...
    def write_metadata(self, meta: LogMetadata, version: int) -> tuple[bool, int]: ...
    def announce_writer(self, log_id: int, epoch: int) -> None: ...
    def notify(self, log_id: int) -> None: ...
    def send(self, driver: WriterDriver, to: int, msg: Any) -> None: ...
    def dispatch_reply(self, core: Writer, replica: int, req: Any, rep: Any) -> None: ...
    def change_ensemble(self, log_id: int, change: ChangeEnsemble) -> tuple[LogMetadata | None, int]: ...
    def read_seals(self, log_id: int) -> dict[int, Stint]: ...

log = logging.getLogger("midtown.log.driver")

TICK_S = 0.1
# Replicas that missed a LAC (down, paused) learn it this often, and followers hear that
# the writer is alive (log/takeover.py suspects one quiet for QUIET_S).
LAC_HEARTBEAT_S = 0.25
# A new LAC rides on the next append; if none comes this soon, it is pushed on its own,
# so tailing readers on other replicas see entries within about this delay. (Readers on
# the writer's server see them at once.) 5 ms cost ~15% of KV throughput in extra
# replication rounds (64 clients, this machine); 50 ms did not.
LAC_PUSH_DELAY_S = 0.05
# The payload of a time mark: an entry that carries only its timestamp (Writer.time_mark_due).
TIME_MARK = b""


class WriterFailed(Exception):
    """The writer stopped; an append in flight has an unknown outcome."""


class Busy(Exception):
    """Too many appends are queued on this writer."""


@dataclass(frozen=True, slots=True)
class AppendResult:
    first_position: int
    count: int
    timestamp_ms: int
    epoch: int


class WriterDriver:
    def __init__(self, node: WriterHost, core: Writer) -> None:
        self.node = node
        self.core = core
        self.log_id = core.log_id
        self.inbox: queue.Queue[tuple[Any, ...]] = world.queue()
        self._waiting: deque[tuple[Future[AppendResult], list[bytes], Tags]] = deque()
        # The shards sealed in this log (log/seals.py): read from the log service's list
        # once this writer has fenced its predecessor, then kept in the order it sequences.
        self.seals: Seals | None = None
        self._queued = 0
        self._trace = ""  # a traced operation's context, for the AddEntries of its batch
        self._qlock = world.lock()
        self.failed = world.event()
        self.started_at = world.monotonic()
        self._announced = False  # whether its first open (the end of its recovery) was logged
        # Its open segment's copies, as answers come back (log/ensemble_change.py): written
        # by this writer's thread, read by the election's.
        self.copies = Copies()
        self._copies_lock = world.lock()
        self._changing_since = 0.0
        self.thread: world.Task | None = None  # its thread, once started

    @property
    def epoch(self) -> int:
        return self.core.epoch

    def start(self) -> None:
        self.thread = world.spawn(f"writer-{self.log_id}", self._run)

    def assigned_end(self) -> int:
        """The last position this writer has given an entry (read from another thread:
        at worst a moment old)."""
        return self.core.next_position - 1

    def submit(self, payloads: list[bytes], tags: Tags = UNTAGGED) -> Future[AppendResult]:
        """Queue an append; its future fails with WriterFailed (outcome unknown) or Sealed
        (refused whole: nothing of it sequenced)."""
        if self.failed.is_set():
            raise WriterFailed(self.core.failure or "the writer stopped")
        with self._qlock:
            if self._queued + len(payloads) > limits.INFLIGHT_ENTRIES_MAX * 2:
                raise Busy(f"log {self.log_id}: {self._queued} entries queued on the writer")
            self._queued += len(payloads)
        fut: Future[AppendResult] = world.future()
        fut.entry_count = len(payloads)  # type: ignore[attr-defined]
        # a traced operation's context: its followers' spans join it (runtime/tracing.py)
        fut.trace = tracing.carried()  # type: ignore[attr-defined]
        self.inbox.put(("append", fut, payloads, tags))
        return fut

    def stop(self, reason: str) -> None:
        self.inbox.put(("stop", reason))

    def reply(self, replica: int, req: Any, rep: Any) -> None:
        self.inbox.put(("reply", replica, req, rep))

    def change_ensemble(self, replicas: tuple[int, ...]) -> None:
        """Move the open segment to `replicas` (the election decided: a copy is lost)."""
        self.inbox.put(("change", replicas))

    def lost_copies(self, now: float, me: int, gone: frozenset[int]) -> set[int]:
        """The copies of the open segment that stopped answering (log/ensemble_change.py)."""
        with self._copies_lock:
            if self.core.state is not State.WRITING:
                return set()
            return self.copies.lost(now, me, gone)

    # ------------------------------------------------------------------ loop
    def _run(self) -> None:
        core = self.core
        EPOCH.labels(log=str(self.log_id)).set(core.epoch)
        core.start(self._now_ms())
        self._flush()
        next_tick = world.monotonic() + TICK_S
        next_heartbeat = world.monotonic() + LAC_HEARTBEAT_S
        lac_due = float("inf")
        try:
            while core.state is not State.FAILED:
                if world.buggify("driver.stall"):  # the writer's thread starved a while
                    world.sleep(0.5)
                timeout = max(0.0, min(next_tick, lac_due) - world.monotonic())
                if core.sealing_after is not None:  # a recovery waits out the old writer's lease
                    timeout = max(0.0, min(timeout, core.sealing_after - lease_clock()))
                try:
                    events = [self.inbox.get(timeout=timeout)]
                except queue.Empty:
                    events = []
                while len(events) < 10_000:
                    try:
                        events.append(self.inbox.get_nowait())
                    except queue.Empty:
                        break
                lac0, state0 = core.lac, core.state
                for ev in events:
                    self._handle(ev)
                core.poll()
                if core.state is not state0:  # a failover's steps, traced (MIDTOWN_DEBUG)
                    log.debug("log %d: %s -> %s, %.0f ms after its claim", self.log_id, state0.value,
                              core.state.value, 1000 * (world.monotonic() - self.started_at))
                if core.lease_s and core.lease_renewal_due(lease_clock()):
                    core.push_lac(force=True)  # readers use the lease: keep it (log/lease.py)
                if core.state is State.WRITING:
                    self._append_waiting()
                elif core.state is State.CHANGING:
                    if world.monotonic() - self._changing_since > limits.RECOVERY_TIMEOUT_S:
                        # No fence quorum of the old segment's replicas: another writer's
                        # recovery, of the segment already opened on live servers, goes on.
                        core.fail("ensemble change timed out (the old segment's replicas did not answer)")
                elif (core.state is not State.FAILED
                      and world.monotonic() - self.started_at > limits.RECOVERY_TIMEOUT_S):
                    core.fail("recovery timed out (no quorum of replicas answered)")
                if world.monotonic() >= next_tick:
                    core.tick(self._now_ms())
                    next_tick = world.monotonic() + TICK_S
                    if not self._waiting and core.time_mark_due(self._now_ms()):
                        self._mark_time()
                now = world.monotonic()
                if now >= next_heartbeat:
                    core.push_lac(force=True)
                    next_heartbeat = now + LAC_HEARTBEAT_S
                    lac_due = float("inf")
                elif now >= lac_due:
                    core.push_lac()
                    lac_due = float("inf")
                if self._waiting or core.inflight():
                    lac_due = float("inf")  # the next AddEntries carries the LAC
                self._flush()
                COMMIT_LAG.labels(log=str(self.log_id)).set(core.inflight())
                if core.lac != lac0:
                    self.node.notify(self.log_id)
                    if lac_due == float("inf"):
                        lac_due = world.monotonic() + LAC_PUSH_DELAY_S
        except Exception as e:  # stop writing rather than risk anything
            # ZooKeeper or a peer away mid-step is expected (one line); anything else a bug.
            faults.log_failure(log, f"writer for log {self.log_id} stopped", e)
            core.fail("internal error in the writer" if not faults.expected(e) else faults.one_line(e))
            self._flush()
        finally:
            self.failed.set()
            while self._waiting:
                fut, _, _ = self._waiting.popleft()
                self._done(fut)
                fut.set_exception(WriterFailed(core.failure))
            self._drain_inbox_failing()
            EPOCH.labels(log=str(self.log_id)).set(0)
            COMMIT_LAG.labels(log=str(self.log_id)).set(0)
            log.info("writer for log %d epoch %d stopped: %s", self.log_id, core.epoch, core.failure)

    def _drain_inbox_failing(self) -> None:
        while True:
            try:
                ev = self.inbox.get_nowait()
            except queue.Empty:
                return
            if ev[0] == "append":
                self._done(ev[1])
                ev[1].set_exception(WriterFailed(self.core.failure))

    def _handle(self, ev: tuple[Any, ...]) -> None:
        kind = ev[0]
        if kind == "append":
            self._waiting.append((ev[1], ev[2], ev[3]))
        elif kind == "reply":
            _, replica, req, rep = ev
            with self._copies_lock:
                self.copies.answered(replica)
            was = self.core.state
            self.node.dispatch_reply(self.core, replica, req, rep)
            if was is State.CHANGING and self.core.state is State.WRITING:
                self._opened()
                ENSEMBLE_CHANGES.labels(log=str(self.log_id)).inc()
                log.warning("log %d: segment moved to %s at epoch %d (ensemble change)", self.log_id,
                            self.core.replicas, self.core.epoch)
        elif kind == "change":
            if self.core.state is State.WRITING and tuple(ev[1]) != tuple(self.core.replicas):
                self._changing_since = world.monotonic()
                self.core.change_ensemble(tuple(ev[1]))
        elif kind == "stop":
            self.core.fail(ev[1])

    def _append_waiting(self) -> None:
        batch: list[tuple[Future[AppendResult], list[bytes]]] = []
        room = limits.INFLIGHT_ENTRIES_MAX - self.core.inflight()
        n = 0
        assert self.seals is not None  # read before the segment opened
        while self._waiting and n + len(self._waiting[0][1]) <= max(room, 0):
            fut, payloads, tags = self._waiting.popleft()
            try:
                self.seals.admit(tags)  # in the order of the log
            except Sealed as e:
                self._done(fut)
                fut.set_exception(e)
                continue
            if tags.open != NONE:  # a shard handed here: this log carries key-value shards now
                self.core.carry_shards()
            batch.append((fut, payloads))
            n += len(payloads)
        if batch:
            APPEND_BATCH.observe(n)
            traced = [f for f, _ in batch if f.trace]  # type: ignore[attr-defined]
            self._trace = traced[0].trace if traced else ""  # type: ignore[attr-defined]
            now = tracing.now_ns() if traced else 0
            for f in traced:
                f.batched_ns = now  # type: ignore[attr-defined]
            self.core.append_many(batch, self._now_ms())  # type: ignore[arg-type]

    def _mark_time(self) -> None:
        """Append a time mark (an empty payload) to a log that has been idle: readers that
        judge expiry by log time see it move on a quiet cluster too. Nobody waits for it."""
        fut: Future[AppendResult] = world.future()
        fut.entry_count = 0  # type: ignore[attr-defined]  # not counted in the queue bound
        self.core.append_many([(fut, [TIME_MARK])], self._now_ms())

    def _flush(self) -> None:
        while True:
            out = self.core.take_outbox()
            if not out:
                self._trace = ""
                return
            for o in out:
                if isinstance(o, Send):
                    with self._copies_lock:
                        self.copies.sent(o.to, world.monotonic())
                    msg = o.msg
                    if self._trace and isinstance(msg, AddEntries) and msg.entries:
                        msg = replace(msg, trace=self._trace)
                    self.node.send(self, o.to, msg)
                elif isinstance(o, WriteMetadata):
                    if not self._read_seals():
                        continue
                    ok, v = self.node.write_metadata(o.metadata, o.expected_version)
                    self.core.on_metadata_written(ok, v)
                    if self.core.state is State.WRITING:
                        self._opened()
                elif isinstance(o, ChangeEnsemble):
                    new, v = self.node.change_ensemble(self.log_id, o)
                    self.core.on_ensemble_changed(new, v)
                elif isinstance(o, Acked):
                    self._done(o.token)
                    if getattr(o.token, "batched_ns", 0):  # a traced operation's: its quorum round
                        tracing.record("log quorum", o.token.trace, o.token.batched_ns, log=self.log_id)
                    if not self.node.session_ok():
                        # The session was lost: another server may be writing already.
                        o.token.set_exception(WriterFailed("ZooKeeper session lost"))
                        self.core.fail("ZooKeeper session lost")
                    else:
                        APPENDS.labels(log=str(self.log_id)).inc(o.count)
                        o.token.set_result(
                            AppendResult(o.first_position, o.count, o.timestamp_ms, o.epoch)
                        )
                elif isinstance(o, Failed):
                    self._done(o.token)
                    o.token.set_exception(WriterFailed(o.reason))

    def _read_seals(self) -> bool:
        """Before the segment opens (the old writer fenced: it can sequence nothing more),
        the shards sealed in this log, from the log service's list, which the hand-off's
        driver writes before it appends the hand-off record (docs/log.md, step 3): a
        takeover never reopens a sealed shard. False (the writer failed) if it cannot be read."""
        if self.seals is None:
            try:
                self.seals = Seals(self.node.read_seals(self.log_id))
            except Exception as e:
                self.core.fail(f"the log's sealed shards could not be read ({e})")
                return False
        return True

    def _opened(self) -> None:
        """The writer's segment is open for appends (recovered, or moved): say so, and
        watch its copies from now."""
        with self._copies_lock:
            self.copies.open(self.core.replicas, world.monotonic())
        if not self._announced:  # recovered (a later open is an ensemble change, logged apart)
            self._announced = True
            log.info("log %d: open for appends at epoch %d on %s, %.0f ms after its claim", self.log_id,
                     self.core.epoch, self.core.replicas, 1000 * (world.monotonic() - self.started_at))
        EPOCH.labels(log=str(self.log_id)).set(self.core.epoch)
        self.node.announce_writer(self.log_id, self.core.epoch)

    def _done(self, fut: Future[AppendResult]) -> None:
        with self._qlock:
            self._queued -= fut.entry_count  # type: ignore[attr-defined]

    @staticmethod
    def _now_ms() -> int:
        return world.wall_ms()
