"""Eventually consistent datasets at the coordinator (DESIGN.md): no log; quorum writes
and reads against the storage replicas, the highest version winning (last writer wins),
read repair, and partial success reported as such.

* A write is stamped with a version from the coordinator's hybrid clock (milliseconds,
  a counter, the coordinator's id: unique, and increasing on each coordinator) and sent to
  every replica; it succeeds once a majority has it durably (W = 2 of 3). Fewer than that
  but at least one: the write is on those replicas and may be read, and the client is told
  so (UNAVAILABLE, "partial").
* A read asks every replica and answers from the first majority (R = 2 of 3): the highest
  version among them wins, so a read sees every write acknowledged before it began (W + R
  > N). Replicas among them that hold an older version (or nothing) get the winner
  written back (read repair), without the reader waiting.
* A delete is a tombstone with its version; expiry is judged by the reading coordinator's
  clock against the expiry the writing coordinator stamped (there is no log time here).

Pure logic here; the calls to the replicas are made by coordinator/node.py."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from midtown_pb import kv_pb2 as pb
from record.versions import COUNTER_BITS, ID_BITS, version_millis
from runtime import world


def quorum(n: int) -> int:
    """A majority of `n` replicas."""
    return n // 2 + 1


class HybridClock:
    """Versions `ms << 22 | counter << 8 | coordinator id`: increasing on this coordinator
    even if its clock steps back, and never equal to another coordinator's."""

    def __init__(self, coord_id: int, now_ms: object = None) -> None:
        if not 0 <= coord_id < 1 << ID_BITS:
            raise ValueError(f"coordinator id: {coord_id}; eventual datasets need ids 0..255")
        self.coord_id = coord_id
        self._now_ms = now_ms or world.wall_ms
        self._last = 0  # (ms << COUNTER_BITS) | counter
        self._lock = world.lock()

    def next(self) -> int:
        with self._lock:
            t = max(self._now_ms() << COUNTER_BITS, self._last + 1)  # type: ignore[operator]
            self._last = t
        return (t << ID_BITS) | self.coord_id

    millis = staticmethod(version_millis)


def stamp(value: bytes, version: int, ttl_ms: int, deleted: bool) -> pb.LwwValue:
    """A write's value: a TTL counts from the version's milliseconds (tombstones never expire)."""
    expires = HybridClock.millis(version) + ttl_ms if ttl_ms and not deleted else 0
    return pb.LwwValue(value=value, version=version, expires_at_ms=expires, deleted=deleted)


def local_quorum(replicas: Sequence[int], dc_of: Mapping[int, str], dc: str) -> tuple[tuple[int, ...], int]:
    """Whose answers make a quorum for a call from data center `dc` (the caller's): the
    shard's `replicas` in `dc` when some are there, of whom a majority (Cassandra's
    LOCAL_QUORUM: a write is still sent to every replica, nobody waits for the others,
    and anti-entropy brings every data center to the same values); else every replica.
    (The replicas counted, the number the majority is of, up or not.)"""
    local = tuple(r for r in replicas if dc and dc_of.get(r) == dc)
    return (local, len(local)) if local else (tuple(replicas), len(replicas))


def write_shortfall(acks: int, n: int) -> str | None:
    """None if `acks` of `n` replicas make a write done; else why not, for the client."""
    need = quorum(n)
    if acks >= need:
        return None
    if acks:
        return (f"partial: the write reached {acks} of {n} replicas, fewer than a majority "
                f"({need}); it may be read, and a retry makes it certain")
    return "no storage replica took the write; retry"


def read_shortfall(answers: int, n: int) -> str | None:
    """None if `answers` of `n` replicas make a read; else why not."""
    need = quorum(n)
    return None if answers >= need else \
        f"read from {answers} of {n} replicas, fewer than a majority ({need}); retry"


def live(v: pb.LwwValue | None, now_ms: int) -> bool:
    return v is not None and not v.deleted and (v.expires_at_ms == 0 or v.expires_at_ms > now_ms)


def winner(answers: list[pb.LwwReadResponse]) -> pb.LwwValue | None:
    """The highest version any replica holds for a single key (None: none holds one)."""
    best: pb.LwwValue | None = None
    for a in answers:
        for it in a.items:
            if best is None or it.value.version > best.version:
                best = it.value
    return best


def needs_repair(answer: pb.LwwReadResponse, best: pb.LwwValue) -> bool:
    held = max((it.value.version for it in answer.items), default=0)
    return held < best.version


def scan_page(answers: list[pb.LwwReadResponse], asked: int, limit: int,
              now_ms: int) -> tuple[list[pb.LwwItem], bytes]:
    """Merge scans of several replicas (each asked for up to `asked` items) into a page of
    at most `limit` live items and the key to continue from (empty: no more). A replica
    that filled its answer may hold more keys after its last one, so only keys up to the
    lowest such last key are known from every answer."""
    bound: bytes | None = None
    for a in answers:
        if len(a.items) >= asked:
            last = a.items[-1].local_key
            bound = last if bound is None or last < bound else bound
    best: dict[bytes, pb.LwwValue] = {}
    for a in answers:
        for it in a.items:
            if bound is not None and it.local_key > bound:
                continue
            cur = best.get(it.local_key)
            if cur is None or it.value.version > cur.version:
                best[it.local_key] = it.value
    items = [pb.LwwItem(local_key=k, value=v) for k, v in sorted(best.items()) if live(v, now_ms)]
    if len(items) > limit:
        return items[:limit], items[limit].local_key
    return items, (bound + b"\x00" if bound is not None else b"")
