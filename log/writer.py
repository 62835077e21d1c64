"""The writer of one log for one epoch, as a pure state machine (no I/O, no clock).

The shell (log/server.py) or the simulation feeds it replies, appends and ticks, and
drains `take_outbox()`: messages to send, a metadata write to perform, appends to
acknowledge or fail. Ordering duty: the shell acknowledges an append only when the core
says so, and the core says so only once an ack quorum has made it durable.

States and their transitions live in one table, TRANSITIONS."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

from log import lease, limits, recovery
from log.entry import Entry
from log.messages import (
    NONE,
    AddEntries,
    AddReply,
    Fence,
    FenceReply,
    ReadRange,
    ReadRangeReply,
    Request,
    Result,
)
from log.metadata import LogMetadata, Segment
from log.quorum import AckTracker


class State(Enum):
    FENCING = "fencing"  # fencing the last segment's replicas
    READING = "reading"  # reading the tail from the fenced quorum
    REPLICATING = "replicating"  # copying the recovered tail to an ack quorum
    SEALING = "sealing"  # the versioned metadata write is in flight
    WRITING = "writing"  # appending
    CHANGING = "changing"  # closing its segment at the LAC, opening the next on new replicas
    FAILED = "failed"  # fenced, superseded, or stopped: never acknowledges again


TRANSITIONS: dict[State, set[State]] = {
    State.FENCING: {State.READING, State.SEALING, State.FAILED},
    State.READING: {State.REPLICATING, State.FAILED},
    State.REPLICATING: {State.SEALING, State.FAILED},
    State.SEALING: {State.WRITING, State.FAILED},
    State.WRITING: {State.CHANGING, State.FAILED},
    State.CHANGING: {State.WRITING, State.FAILED},
    State.FAILED: set(),
}


@dataclass(frozen=True, slots=True)
class Send:
    to: int
    msg: Request


@dataclass(frozen=True, slots=True)
class WriteMetadata:
    metadata: LogMetadata
    expected_version: int


@dataclass(frozen=True, slots=True)
class Acked:
    token: Any
    first_position: int
    count: int
    timestamp_ms: int
    epoch: int


@dataclass(frozen=True, slots=True)
class Failed:
    token: Any
    reason: str  # "fenced" | "stopped" ...: the outcome of the append is unknown


@dataclass(frozen=True, slots=True)
class ChangeEnsemble:
    """Close the writer's segment (`epoch`) at `end`, its LAC (the entry there stamped
    `last_ts`), and open the next, epoch + 1, on `replicas`: the shell applies
    LogMetadata.ensemble_changed to the metadata as it is now, writes it by a versioned
    write, and answers on_ensemble_changed."""
    epoch: int
    end: int
    last_ts: int
    replicas: tuple[int, ...]


Output = Send | WriteMetadata | Acked | Failed | ChangeEnsemble


@dataclass
class _Pending:
    token: Any
    first: int
    count: int
    ts: int


@dataclass
class _Unacked:
    entries: tuple[Entry, ...]
    waiting: set[int]  # replicas that have not acknowledged
    sent_ms: int


@dataclass
class Writer:
    log_id: int
    epoch: int
    metadata: LogMetadata  # as read right after this writer's epoch bump
    version: int  # ZooKeeper version of `metadata`
    replicas: tuple[int, ...]  # the new segment's replicas
    ack_quorum: int = limits.ACK_QUORUM
    # Whether the log's time moves on its own when idle (time_mark_due): for the logs that
    # carry key-value shards, whose readers judge expiry by it; other logs hold only what
    # their appenders appended.
    time_marks: bool = False
    # The read lease (log/lease.py): its length (0: none) and the clock it is timed on.
    lease_s: float = 0.0
    clock: Callable[[], float] | None = None
    # ... the lease's length to take on if the log starts to carry shards (carry_shards)
    kv_lease_s: float = 0.0
    state: State = State.FENCING
    failure: str = ""
    highest_epoch_seen: int = 0  # from FENCED replies: the next claim must go past it
    # recovery
    _fenced: dict[int, FenceReply] = field(default_factory=dict)
    _quorum: tuple[int, ...] = ()
    _reads: dict[int, dict[int, Entry]] = field(default_factory=dict)
    _read_upto: dict[int, int] = field(default_factory=dict)
    _range: tuple[int, int] = (0, -1)
    _decision: recovery.Decision | None = None
    # writing
    next_position: int = 0
    last_ts: int = 0
    lac: int = NONE
    lac_ts: int = 0  # the timestamp of the entry at the LAC
    changes: int = 0  # ensemble changes made
    _tracker: AckTracker | None = None
    _pending: deque[_Pending] = field(default_factory=deque)
    _unacked: dict[int, _Unacked] = field(default_factory=dict)  # by first position
    _lac_pushed: int = NONE
    _changed_from: Segment | None = None  # during an ensemble change: the segment it closed
    _outbox: list[Output] = field(default_factory=list)
    _now_ms: int = 0
    # lease
    lease_wanted_until: float = -math.inf  # readers asked for the lease until then
    visible_after: float = -math.inf  # a new writer's wait: no seal before (its clock)
    _seal_due: tuple[int, int] | None = None  # the seal that waits for it
    _lease_sent: float = -math.inf  # when the last message carrying the lease left
    _holder: lease.Holder = field(init=False)

    def __post_init__(self) -> None:
        assert self.metadata.epoch == self.epoch, "start a writer only after its epoch bump"
        assert 1 <= self.ack_quorum <= len(self.replicas)
        assert self.lease_s == 0 or self.clock is not None, "a lease needs a clock"
        # (Whole milliseconds, as the messages carry it: the replicas promise no more.)
        self._holder = lease.Holder(round(self.lease_s * 1000) / 1000, self.ack_quorum)

    def carry_shards(self) -> None:
        """The log starts carrying key-value shards (one is opened in it: a hand-off,
        log/seals.py): take on time marks, and the read lease of `kv_lease_s` at once,
        rather than at the next election. The lease holds only once an ack quorum has
        acknowledged messages carrying it (lease.Holder, new here), and replicas promise
        only for what they acknowledged: taking it on mid-epoch is the same as at the start."""
        self.time_marks = True
        if self.kv_lease_s and not self.lease_s and self.clock is not None:
            self.lease_s = self.kv_lease_s
            held = self._holder.replicas  # (none while its segment moves: as the old one)
            self._holder = lease.Holder(round(self.lease_s * 1000) / 1000, self.ack_quorum)
            self._holder.open(held)

    # ---------------------------------------------------------------- plumbing
    def _to(self, state: State) -> None:
        assert state in TRANSITIONS[self.state], f"{self.state} -> {state}"
        self.state = state

    def take_outbox(self) -> list[Output]:
        out, self._outbox = self._outbox, []
        return out

    @property
    def recovering_segment(self) -> Segment | None:
        seg = self.metadata.last_segment
        return seg if seg is not None and not seg.sealed else None

    def fail(self, reason: str) -> None:
        """Stop for good (fenced, session lost, superseded). Pending appends get an unknown
        outcome: they may or may not be in the log."""
        if self.state is State.FAILED:
            return
        self._holder.drop()
        self._to(State.FAILED)
        self.failure = reason
        while self._pending:
            p = self._pending.popleft()
            self._outbox.append(Failed(p.token, reason))
        self._unacked.clear()

    # ---------------------------------------------------------------- recovery
    def start(self, now_ms: int) -> None:
        self._now_ms = now_ms
        seg = self.recovering_segment
        if seg is None:
            self._seal(self._end_of_sealed(), self._last_ts_of_sealed())
            return
        for r in seg.replicas:
            self._outbox.append(Send(r, Fence(self.log_id, self.epoch, seg.epoch)))

    def _end_of_sealed(self) -> int:
        seg = self.metadata.last_segment
        if seg is None:
            return limits.FIRST_POSITION - 1
        assert seg.end is not None
        return seg.end

    def _last_ts_of_sealed(self) -> int:
        seg = self.metadata.last_segment
        if seg is None or seg.last_ts is None:
            return 0
        return seg.last_ts

    def on_reply(self, replica: int, req: Any, rep: Any) -> None:
        """A replica's answer to `req` (a Fence, an AddEntries or a ReadRange this writer sent)."""
        if isinstance(req, Fence):
            self.on_fence_reply(replica, rep)
        elif isinstance(req, AddEntries):
            self.on_add_reply(replica, req, rep)
        elif isinstance(req, ReadRange):
            self.on_read_reply(replica, req, rep)

    def on_fence_reply(self, replica: int, reply: FenceReply) -> None:
        if self.state is State.CHANGING:
            self._fenced_old(replica, reply)
            return
        if self.state is not State.FENCING:
            return
        if reply.result is not Result.OK:
            self.highest_epoch_seen = max(self.highest_epoch_seen, reply.fenced_epoch)
            self.fail(f"superseded at fence (replica {replica} at epoch {reply.fenced_epoch})")
            return
        self._fenced[replica] = reply
        if reply.lease_wait_ms and self.clock is not None:  # the old writer's lease, waited out
            self.visible_after = max(self.visible_after, self.clock() + reply.lease_wait_ms / 1000)
        need = limits.fence_quorum(len(self.recovering_segment.replicas), self.ack_quorum)  # type: ignore[union-attr]
        if len(self._fenced) < need:
            return
        seg = self.recovering_segment
        assert seg is not None
        self._quorum = tuple(sorted(self._fenced))
        views = [recovery.TailView(f.lac, f.last, {}, f.first, f.first_ts) for f in self._fenced.values()]
        self._range = recovery.read_range(views, seg.first)
        self._to(State.READING)
        for r in self._quorum:
            self._reads[r] = {}
            self._read_upto[r] = self._range[0] - 1
            self._request_read(r)
        if self._range[1] < self._range[0]:
            self._decide()  # nothing stored past the LAC: nothing to read

    def _request_read(self, r: int) -> None:
        seg = self.recovering_segment
        assert seg is not None
        lo = self._read_upto[r] + 1
        hi = min(self._range[1], lo + limits.MESSAGE_ENTRIES_MAX - 1)
        if lo > hi:
            return
        self._outbox.append(Send(r, ReadRange(self.log_id, self.epoch, seg.epoch, lo, hi)))

    def on_read_reply(self, replica: int, req: ReadRange, reply: ReadRangeReply) -> None:
        if self.state is not State.READING or replica not in self._reads:
            return
        if reply.result is not Result.OK:
            self.highest_epoch_seen = max(self.highest_epoch_seen, reply.fenced_epoch)
            self.fail(f"superseded at read (replica {replica} at epoch {reply.fenced_epoch})")
            return
        if req.first != self._read_upto[replica] + 1 or reply.answered_last < req.first:
            return  # a stale or duplicate answer, or nothing answered
        for e in reply.entries:
            if req.first <= e.position <= reply.answered_last:
                self._reads[replica][e.position] = e
        # A truncation may have happened since the fence: what it removed was committed.
        f = self._fenced[replica]
        if reply.trunc_first > f.first:
            self._fenced[replica] = replace(f, first=reply.trunc_first,
                                            first_ts=max(f.first_ts, reply.trunc_ts))
        self._read_upto[replica] = reply.answered_last
        self._request_read(replica)
        if all(self._read_upto[r] >= self._range[1] for r in self._quorum):
            self._decide()

    def _decide(self) -> None:
        seg = self.recovering_segment
        assert seg is not None
        views = [
            recovery.TailView(
                self._fenced[r].lac, self._fenced[r].last, self._reads[r],
                self._fenced[r].first, self._fenced[r].first_ts,
            )
            for r in self._quorum
        ]
        self._decision = recovery.decide_end(views, seg.first, seg.base_ts)
        self._to(State.REPLICATING)
        tail = self._decision.to_replicate
        if not tail:
            self._seal(self._decision.end, self._decision.last_ts)
            return
        self._tracker = AckTracker(self.ack_quorum, tail[0].position - 1)
        for i in range(0, len(tail), limits.MESSAGE_ENTRIES_MAX):
            chunk = tail[i : i + limits.MESSAGE_ENTRIES_MAX]
            self._send_entries(seg, chunk, lac=NONE)

    def _send_entries(self, seg: Segment, chunk: tuple[Entry, ...], lac: int) -> None:
        self._unacked[chunk[0].position] = _Unacked(chunk, set(seg.replicas), self._now_ms)
        self._send_all(seg.replicas, seg.epoch, chunk, lac)

    def _send_all(self, replicas: tuple[int, ...], seg_epoch: int, chunk: tuple[Entry, ...],
                  lac: int) -> None:
        """One AddEntries to each of `replicas`, carrying the lease while readers want it."""
        lease_ms, sent_at = 0, 0.0
        if self.lease_s and self.state is State.WRITING:
            sent_at = self.clock()  # type: ignore[misc]  # before it is sent: log/lease.py
            if sent_at < self.lease_wanted_until:
                lease_ms = round(self.lease_s * 1000)
                self._lease_sent = sent_at
        msg = AddEntries(self.log_id, self.epoch, seg_epoch, chunk, lac, lease_ms, sent_at)
        for r in replicas:
            self._outbox.append(Send(r, msg))

    def _seal(self, end: int, last_ts: int) -> None:
        if (self.state is State.REPLICATING and self.clock is not None
                and self.clock() < self.visible_after):
            self._seal_due = (end, last_ts)  # the old writer's lease first: poll()
            return
        self._seal_due = None
        self._to(State.SEALING)
        self.next_position = end + 1
        self.last_ts = last_ts
        self.lac = end
        self.lac_ts = last_ts
        new = self.metadata.seal_and_open(end, last_ts, self.epoch, self.replicas)
        self._outbox.append(WriteMetadata(new, self.version))
        self.metadata = new

    def on_metadata_written(self, ok: bool, new_version: int = -1) -> None:
        """The shell's answer to WriteMetadata: ok when the versioned write succeeded."""
        if self.state is not State.SEALING:
            return
        if not ok:
            self.fail("superseded: the metadata changed before the seal")
            return
        self.version = new_version
        self._to(State.WRITING)
        self._holder.open(self.replicas)
        self._unacked.clear()
        self._tracker = AckTracker(self.ack_quorum, self.lac)
        self._lac_pushed = self.lac

    # ---------------------------------------------------------------- writing
    def append(self, token: Any, payloads: list[bytes], now_ms: int) -> None:
        self.append_many([(token, payloads)], now_ms)

    def append_many(self, batch: list[tuple[Any, list[bytes]]], now_ms: int) -> None:
        """Assign positions and one timestamp to queued appends and send them to the
        replicas together (group commit: one message, one write batch per replica)."""
        assert self.state is State.WRITING, "append only in WRITING"
        assert batch and all(payloads for _, payloads in batch)
        self._now_ms = max(self._now_ms, now_ms)
        ts = max(now_ms, self.last_ts)  # never backwards, across writers too
        self.last_ts = ts
        entries: list[Entry] = []
        for token, payloads in batch:
            first = self.next_position
            for p in payloads:
                entries.append(Entry(self.next_position, self.epoch, ts, p))
                self.next_position += 1
            self._pending.append(_Pending(token, first, len(payloads), ts))
        seg = self.metadata.last_segment
        assert seg is not None and seg.epoch == self.epoch
        for i in range(0, len(entries), limits.MESSAGE_ENTRIES_MAX):
            self._send_entries(seg, tuple(entries[i : i + limits.MESSAGE_ENTRIES_MAX]), self.lac)

    def time_mark_due(self, now_ms: int) -> bool:
        """Whether the log has been idle long enough that its time should move on its own:
        nothing in flight, and its last timestamp TIME_MARK_IDLE_MS or more behind `now_ms`.
        The shell then appends a time mark, an entry with an empty payload (docs/log.md)."""
        return (self.time_marks and self.state is State.WRITING and self.inflight() == 0
                and now_ms - self.last_ts >= limits.TIME_MARK_IDLE_MS)

    def inflight(self) -> int:
        return self.next_position - 1 - self.lac if self.state is State.WRITING else 0

    def on_add_reply(self, replica: int, req: AddEntries, reply: AddReply) -> None:
        if self.state not in (State.REPLICATING, State.WRITING) or req.epoch != self.epoch:
            return
        if reply.result is not Result.OK:
            self.highest_epoch_seen = max(self.highest_epoch_seen, reply.fenced_epoch)
            self.fail(f"fenced (replica {replica} at epoch {reply.fenced_epoch})")
            return
        if req.lease_ms and self.state is State.WRITING and req.segment_epoch == self.epoch:
            self._holder.acked(replica, req.sent_at)
        if not req.entries or self._tracker is None:
            return
        if self.state is State.REPLICATING:
            seg = self.recovering_segment
            if seg is None or req.segment_epoch != seg.epoch:
                return
        elif req.segment_epoch != self.epoch:
            return
        chunk_first = req.entries[0].position
        u = self._unacked.get(chunk_first)
        if u is not None:
            u.waiting.discard(replica)
            if not u.waiting:
                del self._unacked[chunk_first]
        lac = self._tracker.ack(replica, (e.position for e in req.entries))
        if self.state is State.REPLICATING:
            assert self._decision is not None
            if lac >= self._decision.end:
                self._seal(self._decision.end, self._decision.last_ts)
            return
        if lac > self.lac:
            for p in self._pending:  # in position order: the timestamp of the entry at the LAC
                if p.first > lac:
                    break
                self.lac_ts = p.ts
            self.lac = lac
            # Committed chunks need no more resends: a replica that missed them fills the
            # gap from its peers (the catch-up loop), as BookKeeper's re-replication does.
            for first in [f for f, u in self._unacked.items() if u.entries[-1].position <= lac]:
                del self._unacked[first]
            while self._pending and self._pending[0].first + self._pending[0].count - 1 <= lac:
                p = self._pending.popleft()
                self._outbox.append(Acked(p.token, p.first, p.count, p.ts, self.epoch))

    # ---------------------------------------------------------------- ensemble change
    def change_ensemble(self, replicas: tuple[int, ...]) -> None:
        """A copy of the open segment stopped answering: close the segment at the LAC and
        open the next on `replicas` (BookKeeper's ensemble change), without a writer
        change. What is past the LAC was never acknowledged and is not in the log: the old
        segment ends at the LAC, whatever some replica holds beyond it, and the appends it
        carried get an unknown outcome (their clients retry, with their request ids).

        Two steps, then appends again: (1) the versioned metadata write seals the segment
        and opens the next at epoch + 1 (it fails, and this writer stops, if anyone has
        claimed a newer epoch); (2) a fence quorum of the old segment's replicas is fenced
        at the new epoch, as any new writer does, so that a ReadIndex round asked of the
        old segment's replicas from a stale cache sees the newer epoch (a copy thought lost
        may only have been slow, and answer that round). Every entry up to the LAC is on an
        ack quorum of the old segment, which re-replication completes as for any sealed
        one. The rule for when: log/ensemble_change.py."""
        assert self.state is State.WRITING, "an ensemble change starts from WRITING"
        assert self.ack_quorum <= len(replicas) and len(set(replicas)) == len(replicas)
        self._holder.drop()  # the new segment's replicas have promised nothing yet
        self._to(State.CHANGING)
        while self._pending:
            p = self._pending.popleft()
            self._outbox.append(Failed(p.token, "ensemble change: outcome unknown, retry"))
        self._unacked.clear()
        self.next_position = self.lac + 1
        self._changed_from = None
        self._outbox.append(ChangeEnsemble(self.epoch, self.lac, self.lac_ts, tuple(replicas)))

    def on_ensemble_changed(self, new: LogMetadata | None, version: int = -1) -> None:
        """The shell's answer to ChangeEnsemble: the metadata written (the next segment
        open, at the next epoch), or None if the log had moved on: this writer stops."""
        if self.state is not State.CHANGING or self._changed_from is not None:
            return
        if new is None:
            self.fail("superseded: the log moved on before the ensemble change")
            return
        seg = new.last_segment
        assert seg is not None and not seg.sealed and seg.first == self.lac + 1
        assert new.epoch == seg.epoch == self.epoch + 1
        old = self.metadata.last_segment
        assert old is not None
        self._changed_from = old
        self.metadata, self.version, self.epoch, self.replicas = new, version, new.epoch, seg.replicas
        self._fenced = {}
        for r in old.replicas:
            self._outbox.append(Send(r, Fence(self.log_id, self.epoch, old.epoch)))

    def _fenced_old(self, replica: int, reply: FenceReply) -> None:
        """A fence reply of the old segment's replica during an ensemble change."""
        old = self._changed_from
        if old is None or replica not in old.replicas:
            return
        if reply.result is not Result.OK:
            self.highest_epoch_seen = max(self.highest_epoch_seen, reply.fenced_epoch)
            self.fail(f"superseded at the ensemble change's fence (replica {replica} at epoch "
                      f"{reply.fenced_epoch})")
            return
        self._fenced[replica] = reply
        if len(self._fenced) < limits.fence_quorum(len(old.replicas), self.ack_quorum):
            return
        self._changed_from = None
        self.changes += 1
        self._to(State.WRITING)
        self._holder.open(self.replicas)
        self._tracker = AckTracker(self.ack_quorum, self.lac)
        self._lac_pushed = NONE  # the new replicas learn the LAC at once

    def push_lac(self, force: bool = False) -> None:
        """Tell the replicas the LAC promptly, so tailing readers see new entries without
        waiting for the next append. The shell calls this when the append queue is idle,
        and with `force` now and then, for replicas that missed it (down, paused)."""
        if self.state is not State.WRITING or (self.lac <= self._lac_pushed and not force):
            return
        self._lac_pushed = self.lac
        self._send_all(self.replicas, self.epoch, (), self.lac)

    # ---------------------------------------------------------------- read lease
    def lease_index(self, now: float) -> int | None:
        """A strong read's index by the lease (log/lease.py), `now` read on the lease's clock
        after the read arrived: the LAC, which covers every entry any writer has
        acknowledged while the lease holds; None when it does not (the caller asks the
        replicas: log/read_index.py). Called from readers' threads: it reads two values
        the writer's thread replaces whole, the expiry before the LAC."""
        if not self.lease_s:
            return None
        self.lease_wanted_until = now + lease.WANTED_S
        return self.lac if self._holder.valid(now) else None

    @property
    def sealing_after(self) -> float | None:
        """When a recovery that waits out the old writer's lease may seal (its clock), or
        None when none waits."""
        return self.visible_after if self._seal_due is not None else None

    def lease_renewal_due(self, now: float) -> bool:
        """Whether an idle writer should send its replicas a message now, so that the lease
        readers want does not lapse."""
        return (self.state is State.WRITING and now < self.lease_wanted_until
                and now - self._lease_sent >= lease.renew_every(self.lease_s))

    def poll(self) -> None:
        """Seal, once the old writer's lease has run out, a recovery that waits for it."""
        if self._seal_due is not None and self.state is State.REPLICATING:
            self._seal(*self._seal_due)

    def tick(self, now_ms: int) -> None:
        """Resend what replicas have not answered (lost messages, restarted replicas)."""
        self._now_ms = max(self._now_ms, now_ms)
        self.poll()
        if self.state is State.CHANGING and self._changed_from is not None:
            old = self._changed_from
            for r in old.replicas:
                if r not in self._fenced:
                    self._outbox.append(Send(r, Fence(self.log_id, self.epoch, old.epoch)))
        elif self.state is State.FENCING:
            seg = self.recovering_segment
            assert seg is not None
            for r in seg.replicas:
                if r not in self._fenced:
                    self._outbox.append(Send(r, Fence(self.log_id, self.epoch, seg.epoch)))
        elif self.state is State.READING:
            for r in self._quorum:
                if self._read_upto[r] < self._range[1]:
                    self._request_read(r)
        elif self.state in (State.REPLICATING, State.WRITING):
            seg = self.recovering_segment if self.state is State.REPLICATING else self.metadata.last_segment
            assert seg is not None
            for u in self._unacked.values():
                if now_ms - u.sent_ms < limits.RESEND_INTERVAL_MS:
                    continue
                u.sent_ms = now_ms
                self._send_all(tuple(sorted(u.waiting)), seg.epoch, u.entries, self.lac)
