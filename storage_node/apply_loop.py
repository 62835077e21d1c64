"""A storage node's apply loop: a thread per log follows it (LogClient.follow: a Read stream
from its writer, or straight from the writer's store when that runs in this process), and one applier, run
by the tail threads themselves (group commit), applies every log's new entries strictly in
order and persists each batch's effects with each log's new position in one atomic write
batch, synced before the positions are published (storage_node/bookkeeping.py publishes
them). After a crash the node resumes from the saved positions: nothing applied twice,
nothing skipped. Results go back to the coordinator named in each record.

The pure step, a record to its effects, is storage_node/apply.py; this is the shell that
feeds it and writes what it returns."""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Container, Sequence

import grpc

from catalog import failover, registry
from catalog.routing import answers_for
from log import limits as log_limits
from log.client import FollowedEntry, Following, LocalLog
from record import codec
from record.model import Drop, Record
from runtime import inprocess, world
from runtime.group_commit import GroupCommit
from runtime.process import EXIT_APPLY_FAILED, EXIT_BEHIND_TRUNCATION, EXIT_FAILED_OVER, Fatal
from runtime.refusals import Refusal
from storage_node import handoff, keys, reclaim, shard_copy, truncation
from storage_node.apply import apply
from storage_node.callbacks import Answer, AnswerLink
from storage_node.change_recorder import ChangeRecorder
from storage_node.handoff import Place
from storage_node.holds import Holds
from storage_node.limits import APPLY_BATCH_ENTRIES_MAX, CALLBACK_REPLICAS, DIGEST_SAMPLE
from storage_node.lww import LwwReplica
from storage_node.metrics import ANSWERS, APPLIED, POSITION, TAILED
from storage_node.state import NodeState
from storage_node.store import BatchView

log = logging.getLogger("midtown.storage.apply")
# Entries from a Read stream, or straight from the log server in this process.
Entries = Sequence[FollowedEntry]


def answers_now(answered_beside: bool, position: int) -> bool:
    """Whether a replica that answers a record's shard, in a process other than its
    coordinator's, sends the answer: always, unless a storage node beside the coordinator
    answers it (Record.answered_beside); then one record in DIGEST_SAMPLE, so that the
    coordinator still compares the replicas' shard digests."""
    return not answered_beside or position % DIGEST_SAMPLE == 0


class ApplyLoop:
    def __init__(self, state: NodeState, lww: LwwReplica, on_fatal: Fatal,
                 local_log: inprocess.Local[LocalLog], answers: AnswerLink) -> None:
        """`lww`: the eventual datasets' replica (a dropped dataset's values go by ranges);
        `local_log`: the log server of this process, if any (the host layout); `answers`:
        the way to the coordinators (storage_node/callbacks.py); `on_fatal(code, why)`:
        when the node must not go on."""
        self.state = state
        self.lww = lww
        self._fatal = on_fatal
        self.local_log = local_log
        self.answers = answers
        self._next_reclaim = 0.0
        self._follows: dict[int, Following] = {}  # log -> its follow (LogClient.follow)
        self._mutex = world.lock()  # a batch, a copy's install and a shard's drop: one at a time
        self.holds = Holds(state, self._mutex)  # a fail-over's (storage_node/holds.py)
        self._group: GroupCommit[tuple[int, Entries], None] = GroupCommit(
            self._apply_group, size=lambda item: len(item[1]), max_size=APPLY_BATCH_ENTRIES_MAX)

    def start(self) -> None:
        for log_id in self.state.tailed_logs():  # the logs that carry its shards; the others, never
            self._start_tail(log_id)

    def _start_tail(self, log_id: int) -> None:
        """Follow the log from its writer (LogClient.follow, in a thread of its own), from
        this node's position in it; its entries are applied by group commit."""
        if log_id not in self._follows:
            self._follows[log_id] = self.state.logs.follow(
                log_id, lambda: self.state.positions[log_id][0],
                functools.partial(self._apply_entries, log_id),
                functools.partial(self._behind_truncation, log_id), self.state.stop, self.linger_ms())

    def _answers_for(self, shard: int) -> bool:
        """Whether this node sends the results of `shard`'s records to their coordinators."""
        s = self.state
        if s.sets.version >= 0:  # replica sets: each replica of the shard answers
            return s.answers_for(shard, s.holds)
        return s.answers_for(shard,
                             lambda sh: answers_for(s.node_id, sh, s.kv.storage_nodes, CALLBACK_REPLICAS))

    def linger_ms(self) -> int:
        """How long this node's Read streams let entries wait to travel together: in the
        host layout (a log server in this process), where the records it applies from
        another host's writer are answered beside that writer, Settings.read_linger_s;
        else 0 (log/linger.py)."""
        if self.local_log.component is None:
            return 0
        return min(log_limits.LINGER_MS_MAX, round(self.state.settings.read_linger_s * 1000))

    def applies_in_process(self, log_id: int) -> bool:
        """Whether this node applies `log_id` straight from the log's writer in this process,
        as it commits (then a coordinator of this process may name it the record's only
        answerer: Record.answered_beside)."""
        f = self._follows.get(log_id)
        return f is not None and f.in_process

    def _behind_truncation(self, log_id: int, why: str) -> None:
        """A holder of a log's shards is never truncated past (it publishes its positions);
        only a node that was taken out of the membership, or that held none of the log's
        shards while it was truncated (they moved away; read from ZooKeeper again here, and a
        copy of a shard it has left, not dropped yet, not counted; or one handed to the log
        since, whose records there start past the truncation: truncation.stint_below), gets
        here. The first stops: started again, it bootstraps. The second has nothing to lose
        there: it goes on from the log's first position still held."""
        s = self.state
        try:
            # Its view of the sets may be a little old, and a copy of a shard it has left may
            # still be here (the bookkeeping round drops it): a node that has just left the
            # log's last shard here (a move ended while it restarted) must not stop for it.
            s.read_sets()
            incoming = {x for x, (m, _) in registry.read_moves(s.zk).items() if m.dest == s.node_id}
            # ... and its map: a node that started before a hand-off of its shards from this
            # log and bootstrapped meanwhile tails it by the map it started with
            s.learn_log_map(registry.read_log_map(s.zk, s.kv, s.log_count))
            # ... and the fail-overs: a node that started before one cut the log past it,
            # condemned, stops to take a copy (as when its topology watch says so)
            kv = registry.read_kv(s.zk)
            cut = kv is not None and s.condemned(kv)
        except Exception as e:  # ZooKeeper does not answer now: the tail tries again
            log.warning("log %d: %s; the replica sets cannot be read now (%s)", log_id, why, e)
            world.sleep(1)
            return
        if cut:
            self.condemned(f"log {log_id}: {why}; a fail-over condemned this node's state: it stops to "
                           "take a copy")
            return

        try:
            first = next(r["first"] for r in s.logs.status() if r["log"] == log_id)
        except Exception as e:  # the logs do not answer now: the tail tries again
            log.warning("log %d: %s; its first position is unknown (%s)", log_id, why, e)
            world.sleep(1)
            return

        def needed() -> bool:
            """Whether a shard it holds (or takes in) may have records the truncation took."""
            below = {x for x in s.shards_in_log(log_id)
                     if truncation.stint_below(s.log_map, x, log_id, first, s.place_of(x))}
            past = {x for x, at in s.marks.items() if at >= first and s.place_of(x).log == log_id}
            return truncation.needs_log(below, s.holds, incoming, s.marks, past)
        if not needed():
            with self._mutex:
                go_on = truncation.behind(needed(), first, s.positions[log_id][0])
                if go_on is not None:
                    at = {log_id: (go_on, s.positions[log_id][1])}
                    with s.commit_lock:
                        BatchView(s.store).commit(at)
                        s.positions.update(at)
                    log.info("log %d: %s; this node holds none of its shards: it goes on from %d",
                             log_id, why, at[log_id][0])
                    return
        self._fatal(EXIT_BEHIND_TRUNCATION, f"log {log_id}: {why}; this node is behind a truncation "
                    "and stops: start it again to bootstrap from a peer")

    def condemned(self, why: str) -> None:
        """A fail-over condemned this node's state (catalog/failover.py): the process stops,
        to take a copy at the next start."""
        self._fatal(EXIT_FAILED_OVER, why)

    def _apply_entries(self, log_id: int, entries: Entries) -> None:
        """Apply what a tail thread received; returns once it is written. Entries that
        other logs' tail threads received meanwhile are applied in the same batch."""
        if self.applies_in_process(log_id):
            inprocess.used("tail")
        if world.buggify("tail.stall"):  # the tail falls behind a while (a slow read, a starved thread)
            world.sleep(3 * world.random())
        s = self.state
        try:
            while True:
                self._group.call((log_id, entries))
                nxt = s.positions[log_id][0]
                entries = [e for e in entries if e.position >= nxt]
                if not entries or s.stop.is_set():
                    return
                if not self._still_in_log(entries[:1], log_id):
                    # the old home's writer still streams what it committed past a cut of the
                    # log (a stream opened before the fail-over): read the log again
                    log.info("log %d: entry %d is past a fail-over's cut, from the old home's writer; "
                             "reading the log again", log_id, entries[0].position)
                    world.sleep(0.5)
                    self._follows[log_id].restart()
                    return
                # A shard's open record waits for this node to apply the shard's hand-off in
                # its old log (storage_node/handoff.py): until the next batch, then again.
                with s.cond:
                    s.cond.wait(timeout=0.5)
        except Exception:
            log.exception("apply failed")
            # Restart from the saved positions rather than diverge.
            self._fatal(EXIT_APPLY_FAILED, "apply failed; stopping this node")

    def _still_in_log(self, entries: Entries, log_id: int) -> Entries:
        """`entries` up to the first the log no longer has: past a fail-over's cut, written
        before it (catalog/failover.py before_cut: never applied, by any node; the old
        home's writer may still stream them). _apply_entries then reads the log again."""
        cuts = failover.cuts_of(self.state.kv.failovers, log_id)
        if not cuts:
            return entries
        for i, e in enumerate(entries):
            if failover.before_cut(cuts, e.position, e.epoch):
                return entries[:i]
        return entries

    def _apply_group(self, items: list[tuple[int, Entries]]) -> list[None]:
        """One batch for every log: each log's entries in order, written with one atomic
        write batch that also holds every log's new position."""
        self.apply(items)
        return [None] * len(items)

    def _mine(self, rec: Record, position: int, only: int | None = None,
              moved: Container[int] = (), log_id: int | None = None) -> Record | None:
        """The part of a record this node applies (None: none): a record of a shard it
        applies (of `only`, if given) at or past the shard's mark, if the record is of the
        log the mark is of (`log_id`: the shard's log here, where its copy was taken; in
        another, its open record or one of an older stint, storage_node/handoff.py judges
        it); a published position; a drop, in the shards of it this node applies."""
        s = self.state
        if rec.publishes_positions():
            return rec if only is None else None
        if rec.drops():
            def kept(x: int) -> bool:
                if only is not None:
                    return x == only
                return s.applies_shard(x) and shard_copy.applies(s.marks, x, position)
            shards = tuple(x for o in rec.ops if isinstance(o, Drop) for x in o.shards if kept(x))
            return dataclasses.replace(rec, shard=shards[0], ops=(Drop(shards),)) if shards else None
        if only is not None:  # a copy brought forward: the shard is not applied here yet
            return rec if rec.shard == only else None
        if not s.applies_shard(rec.shard):
            return None
        marked_here = log_id is None or s.place_of(rec.shard).log == log_id
        if rec.shard not in moved and marked_here and not shard_copy.applies(s.marks, rec.shard, position):
            return None
        return rec

    def _applies_at(self, shard: int, position: int) -> bool:
        """Whether this node applies `shard`'s records at `position` (it holds the shard, and
        no copy of it already holds that position's effects)."""
        s = self.state
        return s.applies_shard(shard) and shard_copy.applies(s.marks, shard, position)

    def apply(self, items: list[tuple[int, Entries]]) -> None:
        with self._mutex:
            self._apply(items)

    def _apply(self, items: list[tuple[int, Entries]]) -> None:
        view = BatchView(self.state.store)
        out: dict[str, list[Answer]] = {}
        new: dict[int, tuple[int, int]] = {}
        places: dict[int, Place] = {}  # shards this batch moved from one log to another (handoff.py)
        pending: list[tuple[int, Entries]] = []
        for log_id, entries in items:
            if self.holds.held(log_id):
                continue  # a fail-over holds it where it said it stands
            expected = new.get(log_id, self.state.positions[log_id])[0]
            entries = self._still_in_log([e for e in entries if e.position >= expected], log_id)
            if not entries:
                continue  # a stream restarted and sent again what was already applied
            assert entries[0].position == expected, f"log {log_id}: gap at {expected}"
            pending.append((log_id, entries))
        # A log's entries wait at a shard's open record until this node has applied the
        # shard's hand-off in its old log, perhaps in this very batch: round again while
        # a log moves on.
        while pending:
            waiting = [(lg, rest) for lg, es in pending
                       if (rest := self._apply_log(view, lg, es, new, places, out))]
            if [len(es) for _, es in waiting] == [len(es) for _, es in pending]:
                break  # none moved on: the rest waits for a later batch
            pending = waiting
        if not new:
            return
        for place in places.values():  # a log no shard of this node came from before
            if place.log not in self._follows and place.log not in new:
                at = self.state.positions[place.log]
                new[place.log] = (max(at[0], place.since), at[1])
        self._reclaim(view, new)
        with self.state.commit_lock:  # a shard scan sees a batch whole, with its positions, or not at all
            view.commit(new)  # effects and positions, atomically
            self.state.positions.update(new)
            self.state.places.update(places)
            self.state.marks.update({x: m for x, m in view.marks.items() if m is not None and x in places})
        for lg in sorted({p.log for p in places.values()} - set(self._follows)):
            self._start_tail(lg)
        dropped_eventual = {keys.shard_of_key(p) for p in view.dropped if p[:1] == b"E"}
        if dropped_eventual:  # a dropped dataset's eventual values went by ranges
            self.lww.rehash(dropped_eventual)
        self.state.member_positions.update(view.member_positions)
        for log_id, (_, ts) in new.items():  # the stamps just applied, against this node's clock
            self.state.watch_clock(log_id, ts)
        with self.state.cond:
            self.state.cond.notify_all()
        for addr, results in out.items():
            self.answers.send(addr, results)

    def _apply_log(self, view: BatchView, log_id: int, entries: Entries, new: dict[int, tuple[int, int]],
                   places: dict[int, Place], out: dict[str, list[Answer]]) -> Entries:
        """Apply `entries` of `log_id` (the first at this node's next position in it) in
        order into `view`, noting the log's new position in `new`, the shards handed over
        in `places`, the answers to send in `out`; stop at a shard's open record whose
        hand-off this node has not applied yet. Returns the entries not applied."""
        s = self.state
        applied_here, done, answered = 0, 0, 0
        recorder = ChangeRecorder(view, log_id, new.get(log_id, s.positions[log_id])[1],
                                  entries[-1].timestamp_ms,
                                  lambda x, p: self._shard_position(places, x, log_id, p))
        for e in entries:
            rec, place = self._decode(e, log_id, places)
            if rec is not None and not rec.publishes_positions() and not rec.drops():
                place = places.get(rec.shard) or s.place_of(rec.shard)
                kind = handoff.kind_of(rec)
                h = rec.hand_off()
                st = handoff.step(place, log_id, e.position, kind, e.timestamp_ms,
                                  h.to if h else -1, h.from_position if h else 0, handoff.generation_of(rec),
                                  h.generation if h else None)
                if st.verdict is handoff.Verdict.WAIT:
                    break
                if st.verdict is handoff.Verdict.STOP:
                    raise handoff.Impossible(f"shard {rec.shard}: {st.why}")
                if st.then != place:
                    places[rec.shard] = st.then
                    view.hand_over(rec.shard, st.then, place.log)
                    if rec.shard in s.marks:  # a copy's mark counts in the log it was taken in only
                        view.marks[rec.shard] = 0
                    log.info("shard %d: its records now come from log %d (from %d), at %d:%d",
                             rec.shard, st.then.log, st.then.since, log_id, e.position)
                if st.verdict is handoff.Verdict.SKIP or kind is not handoff.Kind.RECORD:
                    rec = None
            done += 1
            recorder.entry(e.position, e.timestamp_ms)
            if rec is None:
                s.last_data[log_id] = e.position  # its position is to publish all the same
                continue  # a time mark, another node's shard, one whose copy holds it already...
            base = place.version_base if place is not None else 0
            ts = place.log_time(e.timestamp_ms) if place is not None else e.timestamp_ms
            applied = apply(view, rec, log_id, e.position + base, ts, s.node_id)
            applied_here += 1
            recorder.add(rec, applied, e.position + base, ts, log_id)
            if not applied.positions:
                s.last_data[log_id] = e.position
            if rec.callback and applied.result is not None:
                if self.answers.near(rec.callback):  # always: it costs no call
                    out.setdefault(rec.callback, []).append((applied.result, rec.answer_secret))
                elif self._answers_for(rec.shard) and answers_now(rec.answered_beside, e.position):
                    out.setdefault(rec.callback, []).append((applied.result, rec.answer_secret))
                    answered += 1
        if done:
            last = entries[done - 1]
            new[log_id] = (last.position + 1, last.timestamp_ms)
            TAILED.labels(log=str(log_id)).inc(done)
            APPLIED.labels(log=str(log_id)).inc(applied_here)
            ANSWERS.labels(log=str(log_id)).inc(answered)
            POSITION.labels(log=str(log_id)).set(last.position + 1)
        return entries[done:]

    def _decode(self, e: FollowedEntry, log_id: int,
                moved: dict[int, Place]) -> tuple[Record | None, Place | None]:
        """The part of the entry's record this node applies (None: a time mark, which only
        moves the log's time, log/driver.py; a record it cannot decode, a no-op everywhere;
        or nothing of it here; `moved`: shards handed over in this batch, whose copy's mark
        no longer counts), and no place yet (the caller's)."""
        if not e.payload:
            return None, None
        try:
            whole = codec.record_from_bytes(e.payload)
        except Exception:  # not a record every replica can decode: a no-op everywhere
            log.warning("log %d position %d: undecodable record skipped", log_id, e.position)
            return None, None
        return self._mine(whole, e.position, moved=moved, log_id=log_id), None

    def _shard_position(self, places: dict[int, Place], shard: int, log_id: int, position: int) -> int | None:
        """Where a change of `shard` at `position` of `log_id` stands in the shard's own
        order (its position there plus its version base, handoff.py), or None if this node
        does not apply the shard's records there."""
        if not self._applies_at(shard, position):
            return None
        place = places.get(shard) or self.state.place_of(shard)
        return position + place.version_base if place.log == log_id and place.opened else None

    # ---------------------------------------------------------------- shard copies
    def install(self, shard: int, copy_at: int, log_time_ms: int) -> int:
        """Install a copy of `shard` taken at `copy_at` whose keys are written already
        (storage_node/shard_copy.py): bring it forward to this node's tail of the log (the
        shard's records between, read from the log), mark it, and start tailing the log
        if this node does not. Returns the position the copy stands at."""
        s = self.state
        with self._mutex:
            place = s.store.place(shard)  # the copy's, if the shard was ever handed over
            log_id = place.log if place is not None else s.log_map.origin(shard)
            # (by its own places too: a shard whose hand-off from this log it has not applied
            # yet still has records here, the hand-off's among them; make soak, seed 101256)
            others = any(s.applies_shard(x) for x in s.shards_in_log(log_id) if x != shard)
            tail = shard_copy.tail(s.positions[log_id][0], log_id in self._follows, others)
            view = BatchView(s.store)
            forward = shard_copy.catch_up(tail, copy_at)
            if forward:
                self._bring_forward(view, shard, log_id, forward, log_time_ms, place)
            new_tail, marks = shard_copy.install(tail, copy_at, shard, s.marks, others)
            view.marks[shard] = marks[shard]
            moved = {} if new_tail == tail else {log_id: (new_tail, log_time_ms)}
            with s.commit_lock:
                view.commit(moved)
                s.positions.update(moved)
                s.marks[shard] = marks[shard]
                if place is None:
                    s.places.pop(shard, None)
                else:
                    s.places[shard] = place
            s.store.sync()
        if log_id not in self._follows:
            self._start_tail(log_id)
        elif moved:
            self._follows[log_id].restart()  # it read on from a tail that meant nothing
        log.info("installed a copy of shard %d at log %d position %d (tail %s -> %d, %d brought forward)",
                 shard, log_id, marks[shard], tail, new_tail, len(forward))
        return marks[shard]

    def _bring_forward(self, view: BatchView, shard: int, log_id: int, forward: range,
                       copy_ts_ms: int, place: Place | None = None) -> None:
        """Apply `shard`'s records at the positions `forward` (from the log) to the copy,
        which stands at log time `copy_ts_ms`, with their changes and the expiries between.
        A copy that the shard's hand-off to another log overtook meanwhile is refused (a
        move and a hand-off of one shard never run at once; a rebuild takes it again)."""
        got = 0
        entries = [e for e in self.state.logs.read(log_id, forward.start, max_entries=len(forward),
                                                   timeout_s=60) if e.position < forward.stop]
        last_ts = entries[-1].timestamp_ms if entries else copy_ts_ms
        at = place or Place(log_id)  # the copy's place (its own: not this node's yet)
        recorder = ChangeRecorder(view, log_id, copy_ts_ms, last_ts,
                                  lambda x, p: p + at.version_base if x == shard else None)
        for e in entries:
            got = e.position + 1 - forward.start
            recorder.entry(e.position, e.timestamp_ms)
            if not e.payload:
                continue
            try:
                rec = self._mine(codec.record_from_bytes(e.payload), e.position, only=shard)
            except Exception:
                continue  # undecodable: a no-op everywhere
            if rec is not None and handoff.kind_of(rec) is not handoff.Kind.RECORD:
                raise Refusal(grpc.StatusCode.UNAVAILABLE, f"shard {shard} was handed over at log {log_id} "
                              f"position {e.position}, after its copy; retry")
            if rec is not None and not rec.publishes_positions():
                ts = at.log_time(e.timestamp_ms)
                applied = apply(view, rec, log_id, e.position + at.version_base, ts, self.state.node_id)
                recorder.add(rec, applied, e.position + at.version_base, ts, log_id)
        if got < len(forward):
            raise Refusal(grpc.StatusCode.UNAVAILABLE, f"log {log_id} gave {got} of the {len(forward)} "
                          f"entries from {forward.start}; retry")

    def drop_shard(self, shard: int) -> None:
        """Delete everything of `shard` here (a copy whose move was given up, or a shard
        this node no longer holds), with its mark, in one batch."""
        s = self.state
        log_id = s.log_of(shard)
        with self._mutex:
            view = BatchView(s.store)
            view.drop_shard(shard, log_id)
            with s.commit_lock:
                view.commit({})
                s.marks.pop(shard, None)
                s.places.pop(shard, None)
        log.info("dropped shard %d", shard)

    def _reclaim(self, view: BatchView, new: dict[int, tuple[int, int]]) -> None:
        """Now and then, delete in this batch the dedup entries no record can match and the
        values no read can see any more (storage_node/reclaim.py)."""
        now = world.monotonic()
        if now < self._next_reclaim:
            return
        self._next_reclaim = now + reclaim.RECLAIM_INTERVAL_S
        for log_id in range(self.state.kv_logs):
            ts = new.get(log_id, self.state.positions[log_id])[1]
            if ts:
                self.state.reclaimed += view.reclaim(log_id, reclaim.dedup_cutoff(ts),
                                               reclaim.RECLAIM_BATCH_MAX)
                self.state.reclaimed += view.reclaim_expired(log_id, reclaim.expiry_cutoff(ts),
                                                       reclaim.RECLAIM_BATCH_MAX)
        retention_ms = round(self.state.settings.change_retention_s * 1000)

        def cutoff(shard: int) -> int:
            lg = self.state.log_of(shard)
            return new.get(lg, self.state.positions[lg])[1] - retention_ms
        self.state.reclaimed += view.reclaim_changes(cutoff, reclaim.RECLAIM_BATCH_MAX)
