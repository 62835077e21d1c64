"""A replica's rule for a shard handed over from one log to another (docs/log.md, "Adding
logs and handing shards over", step 4). Pure: the apply loop asks it, for each record of a
shard this node applies, what to do, and keeps the shard's `Place` with the positions it
commits, in the same atomic batch.

A shard's records come from one log at a time. The hand-off record of shard s at position
pA of its log A names the new log B and a position fB of B that no record of s in B can
stand before (B's committed end when the driver sealed s in A). Applying it, every
replica records that s's records now come from B, from the first *open* record of s at or
after fB (the driver appends it to B once A's hand-off record is committed). So every
replica switches at the same two positions, pA in A and the open record in B, whatever
order its tails of A and B run in:

- in the shard's log: its records apply; a second open record (a driver that took the
  hand-off up again) changes nothing; the hand-off record moves the shard;
- awaiting the open record in the new log: records before fB are not the shard's business
  here; the open record opens it; any other record of the shard cannot exist (the old log
  sealed the shard before the driver opened it here), and a replica that met one stops
  rather than guess;
- in another log: an open record of the shard at a later generation than the replica's
  (the shard's stint it takes records from) means this replica has not applied the
  hand-off that leads there yet: that tail waits for it (never skips it). Every open record
  is appended after the hand-off record before it is committed, so a chain of tails
  waiting on one another always ends. Any other record of the shard there is of a stint
  before the replica's: applied already, or in the copy the replica took the shard from
  (a copy carries its place, not where its source's tails stood in each log): nothing.

Across a hand-off a shard's versions and log time go on from where they were: a record at
position q of the new log gets version q + 1 + `version_base`, which is above every
version the old log gave it, and its log time is at least the hand-off's (two logs'
writers run on different machines' clocks)."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from record.model import Open, Record


@dataclass(frozen=True)
class Place:
    """Where a replica takes a shard's records from: `log`, from position `since` on;
    `opened`: False while it waits for the shard's open record there (at or after `since`).
    `version_base`: added to position + 1 to make a record's version; `ts_floor`: the log
    time below which the shard's records are not judged (expiry, request ids)."""
    log: int
    since: int = 0
    opened: bool = True
    version_base: int = 0
    ts_floor: int = 0
    generation: int = 0  # the shard's stint's (log/seals.py): its hand-offs so far

    def version(self, position: int) -> int:
        """The version a write of the record at `position` of the shard's log gets."""
        return position + 1 + self.version_base

    def log_time(self, ts_ms: int) -> int:
        """The log time a record of the shard's log stamped `ts_ms` is judged at."""
        return max(ts_ms, self.ts_floor)


class Kind(enum.Enum):
    RECORD = "record"  # any record of the shard but these two
    HAND_OFF = "hand-off"
    OPEN = "open"


def generation_of(rec: Record) -> int:
    """An open record's generation (0 for any other)."""
    op = rec.ops[0] if rec.opens() else None
    return op.generation if isinstance(op, Open) else 0


def kind_of(rec: Record) -> Kind:
    return Kind.HAND_OFF if rec.hand_off() is not None else Kind.OPEN if rec.opens() else Kind.RECORD


class Verdict(enum.Enum):
    APPLY = "apply"  # the record applies (a hand-off or open record: `then` is the new place)
    SKIP = "skip"  # nothing of it applies here
    WAIT = "wait"  # the tail of this log waits until the shard's place changes
    STOP = "stop"  # a record that cannot exist: the replica must not go on


@dataclass(frozen=True)
class Step:
    verdict: Verdict
    then: Place  # the shard's place after the record (unchanged unless a hand-off or open applied)
    why: str = ""


class Impossible(Exception):
    """A record the seals rule out (log/seals.py): the replica stops rather than guess."""


def step(place: Place, log_id: int, position: int, kind: Kind, ts_ms: int = 0,
         to: int = -1, from_position: int = 0, generation: int = 0, ends: int | None = None) -> Step:
    """What a replica whose shard stands at `place` does with the shard's record at
    `position` of `log_id` stamped `ts_ms`: of `kind`; if a hand-off, to log `to` from
    `from_position` of it, ending the stint of generation `ends` (None: not said); if an
    open record, of `generation`. A hand-off record of an earlier stint than the shard's
    here is skipped: a driver's append delivered late, after the shard came back to this
    log (make soak, seed 101382: the log's new writer had the old stint from ZooKeeper)."""
    if log_id == place.log and kind is Kind.HAND_OFF and ends is not None and ends < place.generation:
        return Step(Verdict.SKIP, place)
    if log_id == place.log and place.opened:
        if kind is Kind.HAND_OFF:
            if to == log_id:
                return Step(Verdict.STOP, place, f"a hand-off of the shard to its own log {log_id}")
            # The new log's versions start above the hand-off's own (which no write took).
            base = place.version(position) - from_position
            return Step(Verdict.APPLY, Place(to, from_position, False, base, place.log_time(ts_ms),
                                             place.generation + 1))
        return Step(Verdict.SKIP if kind is Kind.OPEN else Verdict.APPLY, place)
    if log_id == place.log:  # awaiting the open record here
        if position < place.since:
            return Step(Verdict.SKIP, place)
        if kind is Kind.OPEN and generation == place.generation:
            return Step(Verdict.APPLY, Place(place.log, place.since, True, place.version_base,
                                             place.ts_floor, place.generation))
        return Step(Verdict.STOP, place, f"a {kind.value} record of the shard at {log_id}:{position}, "
                    f"before its open record at generation {place.generation} (expected at or after "
                    f"{place.since})")
    if kind is Kind.OPEN and generation > place.generation:
        return Step(Verdict.WAIT, place)
    return Step(Verdict.SKIP, place)  # of a stint before the replica's
