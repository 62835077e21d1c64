"""The driver of a shard's hand-off from one key-value log to another (docs/log.md, "Adding
logs and handing shards over", step 7). It keeps nothing of its own: the hand-off under way
is in the shard -> log map (catalog/log_map.py `Handing`), the shard's stint in each log in
the log service's lists (log/seals.py), the hand-off and open records in the logs
themselves; every step can be made again. So a driver killed at any step is taken up by
the next one asked to hand the shard over (`midtown shard hand-off`, `cluster rebalance`):

1. the map records the hand-off's beginning, with the old log's committed end (where its
   hand-off record will be looked for); from then on coordinators hold the shard's writes;
2. the old log's truncation point is held at that end (log/zk.py hold_truncation: a node
   that truncates by a map from before the beginning is held back too) until the record
   is noted; the old log's list ends the shard's stint there, then its hand-off record is appended
   (unless one is found already from a driver before), naming the new log and that log's
   committed end fB: every replica takes the shard's records from the new log from its
   open record at or after fB (storage_node/handoff.py);
3. the new log's open record starts the shard's next stint (generation + 1), then its
   list, then a second open record (log/seals.py);
4. the map names the new log, with the hand-off (its position, fB, the generation, the
   version base and time floor every replica computes from it): the shard's writes go
   there.

A hand-off and a move of one shard never run at once: the map's beginning is written only
while no move of the shard is under way, and a move starts only while the map has no
hand-off of the shard (both checked in the same ZooKeeper transaction as the write)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from catalog import log_map, registry, scopes
from log import zk as zkpaths
from log.client import LogClient, Tags
from log.seals import Stint
from record import codec
from record.model import HandOff, Open, Record
from runtime import world
from runtime.refusals import Refusal

RETRY_S = 0.2
T = TypeVar("T")


class HandOffError(Exception):
    """A hand-off that cannot go on as asked; the text names the argument at fault."""


def hand_off(logs: LogClient, kv: registry.KvTopology, shard: int, to: int, timeout_s: float,
             progress: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Hand `shard` over to log `to`, or take up its hand-off under way; a dict of what it
    did (with `took_s`, from the hand-off's beginning in the map to the map naming the new
    log: the shard's writes can be held only within it, from when the old log seals the
    shard). HandOffError naming the argument when it cannot."""
    zk, t0 = logs.zk, world.monotonic()
    kv = registry.read_kv(zk) or kv  # its scopes as they are now
    deadline = t0 + timeout_s
    m = registry.read_log_map(zk, kv, logs.topology().logs)
    if not 0 <= shard < kv.shards:
        raise HandOffError(f"SHARD: {shard}, this cluster has shards 0..{kv.shards - 1}")
    if not 0 <= to < m.logs:
        raise HandOffError(f"--to: log {to} is not one of the key-value store's logs 0..{m.logs - 1} "
                           "(midtown log add gives it more)")
    h = m.handing_of(shard)
    want, there = scopes.scope_of_shard(kv.scopes, shard), scopes.scope_of_log(kv.scopes, to)
    if want != there and h is None:  # shards of different scopes never share a log (catalog/scopes.py)
        its = ", ".join(map(str, scopes.logs_of(kv.scopes, want, m.logs)))
        raise HandOffError(f"--to: log {to} carries the shards of scope {there!r}, and shard {shard} is in "
                           f"scope {want!r} (its logs: {its})")
    if h is None and m.log_of(shard) == to:
        return {"shard": shard, "from": to, "to": to, "handed": False, "took_s": 0.0}
    if h is not None and h.new != to:
        raise HandOffError(f"--to: shard {shard} is being handed over to log {h.new}; run the command "
                           f"with --to {h.new} to finish that first")
    if h is None:
        old = m.log_of(shard)
        begin = log_map.Handing(shard, old, to, _end(logs, old) + 1)
        progress(f"shard {shard}: hand-off from log {old} to log {to} begun")
        m = _until(deadline, "begin", lambda: registry.begin_handoff(zk, m, begin))
        h = begin
        t0 = world.monotonic()
    gen, base, floor = m.stint(shard)
    hold, old, scan_from = f"hand-off of shard {shard}", h.old, h.scan_from
    if h.at < 0:
        # The old log keeps its positions from scan_from on until the record is noted: a
        # node that truncates it by a map from before the beginning is held back as well
        first = _until(deadline, "hold", lambda: zkpaths.hold_truncation(zk, old, hold, scan_from))
        since = max(h.scan_from, first)  # (no hand-off record is appended before the hold)
        zkpaths.change_seal(zk, h.old, shard, Stint(gen, to=h.new))
        found = _find(logs, h, since, gen, deadline)
        if found is None:
            start = _start(logs, m, h)
            rec = Record(b"", "", "", shard, b"", (HandOff(h.new, start, gen),))
            _append(logs, h.old, rec, Tags((shard,), seal=shard, to=h.new, generation=gen), deadline)
            # Acknowledged, so committed: a read that does not show it came from a server
            # behind (one that took a writer's change late, the simulation found): again
            found = _find(logs, h, since, gen, deadline)
            while found is None and world.monotonic() < deadline:
                world.sleep(RETRY_S)
                found = _find(logs, h, since, gen, deadline)
            if found is None:
                raise HandOffError(f"shard {shard}: its hand-off record in log {h.old} was acknowledged "
                                   f"but not found from position {since}; run the command again")
        noted = log_map.Handing(shard, h.old, h.new, h.scan_from, *found)
        m = _until(deadline, "record", lambda: registry.note_handoff_record(zk, kv, noted))
        h = noted
    # Noted in the map: the old log's truncation waits for the shard's holders from here
    _until(deadline, "release", lambda: zkpaths.hold_truncation(zk, old, hold, None))
    at, ts, start = h.at, h.ts, h.start
    progress(f"shard {shard}: sealed in log {h.old} at position {at}")
    opening = Tags((shard,), open=shard, generation=gen + 1)
    rec = Record(b"", "", "", shard, b"", (Open(gen + 1),))
    _append(logs, h.new, rec, opening, deadline)
    zkpaths.change_seal(zk, h.new, shard, Stint(gen + 1))
    _append(logs, h.new, rec, opening, deadline)
    done = log_map.Handoff(shard, h.old, at, h.new, start, gen + 1, at + 1 + base - start, max(floor, ts))
    _until(deadline, "finish", lambda: registry.finish_handoff(zk, kv, done))
    took = world.monotonic() - t0
    progress(f"shard {shard}: in log {h.new} from position {start} ({took:.3f} s from its beginning; "
             "writes were held within it)")
    return {"shard": shard, "from": h.old, "to": h.new, "handed": True, "at": at, "start": start,
            "generation": gen + 1, "took_s": round(took, 4)}


def _start(logs: LogClient, m: log_map.LogMap, h: log_map.Handing) -> int:
    """The position of the new log that no record of the shard there stands before (the
    hand-off record names it): past the log's end as a server reports it, and past the
    shard's last hand-off record in it if the shard comes back to a log it left, for the
    server asked may be behind (a writer's change heard late, the simulation found: its
    records of the earlier stint then stood past the position named, and a replica
    awaiting the shard's open record stopped at them). Every record of the shard in the
    new log stands before that hand-off record, which sealed the shard there."""
    start = _end(logs, h.new) + 1
    prev = m.last_handoff(h.shard)
    return max(start, prev.at + 1) if prev is not None and prev.old == h.new else start


def _end(logs: LogClient, log_id: int) -> int:
    """The log's last committed position as its writer reports it (-1: none)."""
    row = next((r for r in logs.status() if r["log"] == log_id), None)
    return -1 if row is None else int(row["last"])


def _find(logs: LogClient, h: log_map.Handing, since: int, gen: int,
          deadline: float) -> tuple[int, int, int] | None:
    """The shard's first hand-off record to `h.new` ending its stint `gen` in `h.old`, from
    `since`: its (position, log time, the new log's position it names), the one every
    replica applies. Read from the log's writer, again while it has none or changes (its
    server died)."""
    while True:
        try:
            return _scan(logs, h, since, gen, max(1.0, deadline - world.monotonic()))
        except Refusal as e:
            if world.monotonic() >= deadline:
                raise HandOffError(f"shard {h.shard}: log {h.old} could not be read ({e}); run the command "
                                   "again to go on") from None
            world.sleep(RETRY_S)


def _scan(logs: LogClient, h: log_map.Handing, since: int, gen: int,
          timeout_s: float) -> tuple[int, int, int] | None:
    """(A hand-off record of an earlier stint is stepped over, as the replicas step over it
    (storage_node/handoff.py): `since`, the log's end when the hand-off began, can stand
    below the shard's stint, read from a server behind, and a shard handed to this log
    and back before had its record there. The simulation found a driver taking that one
    for its own: the map named it, and every replica waited for the shard's record there.)"""
    for e in logs.read(h.old, since, timeout_s=timeout_s):
        try:
            rec = codec.record_from_bytes(e.payload) if e.payload else None
        except Exception:
            continue
        op = rec.hand_off() if rec is not None and rec.shard == h.shard else None
        if op is not None and ends_stint(op, h, gen):
            return e.position, e.timestamp_ms, op.from_position
    return None


def ends_stint(op: HandOff, h: log_map.Handing, gen: int) -> bool:
    """Whether a hand-off record of the shard is the one of hand-off `h` ending its stint
    `gen` (a record written before the generation was said: taken as it)."""
    return op.to == h.new and op.generation in (gen, None)


def _append(logs: LogClient, log_id: int, rec: Record, tags: Tags, deadline: float) -> None:
    """Append a hand-off's record (admitted by the writer, being of the shard's stint there),
    retried until it is acknowledged or the time is out."""
    payload = codec.record_to_bytes(rec)
    while True:
        left = deadline - world.monotonic()
        if left <= 0:
            raise HandOffError(f"shard {rec.shard}: log {log_id} did not take its record in time; run the "
                               "command again to go on")
        try:
            logs.append(log_id, [payload], timeout_s=left, tags=tags)
            return
        except Refusal:
            world.sleep(min(RETRY_S, max(0.0, deadline - world.monotonic())))


def _until(deadline: float, step: str, write: Callable[[], T]) -> T:
    """A ZooKeeper write, tried again while ZooKeeper is away or the time lasts."""
    while True:
        try:
            return write()
        except registry.Conflict as e:
            raise HandOffError(str(e)) from None
        except Exception as e:
            if world.monotonic() >= deadline:
                raise HandOffError(f"the hand-off's {step} could not be written ({e}); run the command "
                                   "again") from None
            world.sleep(RETRY_S)


