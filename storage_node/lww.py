"""Eventually consistent datasets on a storage node: last writer wins.

Their values skip the logs: a coordinator writes each one straight to the replicas,
stamped with a version from its hybrid clock (coordinator/eventual.py). A replica keeps,
per key, the value with the highest version it has seen; a delete is a tombstone that
keeps its version, so an older write arriving late cannot bring the value back. Writes
that arrive together are compared and stored in one synced batch (group commit): a
replica acknowledges only what is durable.

They live under their own keys (b"E", beside the log-applied b"K" keys), so they touch
neither the shards' digests nor the log positions.

Replicas also repair each other in the background (anti-entropy): now and then a node
reads a peer's values shard by shard (`Storage.LwwRange`) and keeps those newer than its
own, by the same rule, so a replica that missed writes while it was down catches up even
on keys nobody reads.

Tombstones and expired values are deleted (purged) once they are older than a grace period
(Settings.tombstone_grace_s, a day): by then anti-entropy has carried them to every replica that
was up. A replica that was down for longer than the grace could still hold a value whose
tombstone its peers have purged, and would hand it back to them; so a node that finds,
at start, that its peers have run more than the grace past the last time it was up
(`outlived`) drops its eventual values and takes them again from its peers.

Anti-entropy compares before it reads: each replica keeps, per shard, the XOR of a hash of
every (key, version) it holds (`item_hash`), updated in the same write batch as the values,
so replicas that agree on a shard exchange one number for it instead of its values."""

from __future__ import annotations

import hashlib
import struct

from rocksdict import WriteBatch

from midtown_pb import kv_pb2 as pb
from record.versions import version_millis
from runtime import world
from runtime.group_commit import GroupCommit
from runtime.refusals import BadRequest
from storage_node import keys
from storage_node.store import NodeStore

_H = struct.Struct(">QQ?")  # version, expires_at_ms, deleted
_Q = struct.Struct(">Q")


def key(shard: int, dataset: str, pkey: bytes, lkey: bytes) -> bytes:
    return prefix(shard, dataset, pkey) + lkey


def prefix(shard: int, dataset: str, pkey: bytes) -> bytes:
    return keys.eventual(keys.partition_prefix(shard, dataset, pkey))


def encode(v: pb.LwwValue) -> bytes:
    return _H.pack(v.version, v.expires_at_ms, v.deleted) + v.value


def decode(b: bytes) -> pb.LwwValue:
    version, expires, deleted = _H.unpack_from(b)
    return pb.LwwValue(value=bytes(b[_H.size:]), version=version, expires_at_ms=expires,
                       deleted=deleted)


PURGE_BATCH_MAX = 10_000  # purged in one pass (one synced batch) at most; the rest next time


def purgeable(stored: bytes, now_ms: int, grace_ms: int) -> bool:
    """A stored tombstone, or value past its expiry, older than the grace (`stale`)."""
    version, expires_at_ms, deleted = _H.unpack_from(stored)
    return stale(version, expires_at_ms, deleted, now_ms, grace_ms)


def stale(version: int, expires_at_ms: int, deleted: bool, now_ms: int, grace_ms: int) -> bool:
    """A tombstone, or a value past its expiry, older than the grace: nothing a read could
    return, and every replica that was up has had the time to learn of it."""
    if deleted:
        return version_millis(version) < now_ms - grace_ms
    return bool(expires_at_ms) and expires_at_ms < now_ms - grace_ms


def outlived(last_up_ms: int, peers_up_ms: int, grace_ms: int) -> bool:
    """Have this node's peers run for more than the grace since it was last up? (0: it
    does not know when it was up, or no peer has said.) Then tombstones it never saw may
    have been purged, and its own values cannot be trusted to be newest."""
    return last_up_ms > 0 and peers_up_ms - last_up_ms > grace_ms


def item_hash(k: bytes, version: int) -> int:
    """One (key, version)'s part of its shard's hash: a shard's hash is the XOR of its
    items', so adding, replacing or removing one changes it by one XOR."""
    return int.from_bytes(hashlib.blake2b(k + version.to_bytes(8, "big"), digest_size=8).digest(), "big")


def wins(version: int, held: int | None) -> bool:
    """Whether a write of `version` replaces what a replica holds (None: nothing)."""
    return held is None or version > held


class LwwReplica:
    def __init__(self, store: NodeStore, grace_ms: int) -> None:
        self.store = store
        self.grace_ms = grace_ms
        self._group: GroupCommit[tuple[bytes, pb.LwwValue], bool] = GroupCommit(self._write_batch)
        self._lock = world.lock()  # one compare-and-store at a time: writes and merges
        if not self._has_hashes():  # eventual values stored before there were shard hashes
            self.rehash(None)

    def _has_hashes(self) -> bool:
        return next(self.store.under(b"H"), None) is not None

    def hashes(self, shards: int) -> list[int]:
        """Each shard's hash (0 for a shard holding nothing)."""
        out = []
        for shard in range(shards):
            b = self.store._get(keys.lww_hash_key(shard))
            out.append(_Q.unpack(b)[0] if b else 0)
        return out

    def rehash(self, shards: set[int] | None) -> None:
        """Compute the hashes of these shards (None: all) from what they hold."""
        with self._lock:
            sums: dict[int, int] = {}
            prefixes = [b"E"] if shards is None else [keys.eventual_shard_prefix(s) for s in sorted(shards)]
            for p in prefixes:
                for k, v in self.store.under(p):
                    shard = keys.shard_of_key(k)
                    sums[shard] = sums.get(shard, 0) ^ item_hash(k, _H.unpack_from(v)[0])
            wb = self.store.batch()
            for shard in (shards if shards is not None else sums):
                wb.put(keys.lww_hash_key(shard), _Q.pack(sums.get(shard, 0)))
            if shards is None and not sums:
                wb.put(keys.lww_hash_key(0), _Q.pack(0))  # marks the hashes as kept from now on
            self.store.synced.write(wb, sync=True)

    def _store_with_hashes(self, wb: WriteBatch, changes: dict[int, int]) -> None:
        """Write `wb` with each shard's hash XORed with its change (under the lock)."""
        for shard, x in changes.items():
            if x:
                k = keys.lww_hash_key(shard)
                b = self.store._get(k)
                wb.put(k, _Q.pack((_Q.unpack(b)[0] if b else 0) ^ x))
        self.store.synced.write(wb, sync=True)

    def range(self, req: pb.LwwRangeRequest) -> pb.LwwRangeResponse:
        """A shard's values in key order after `req.after` (a key from an earlier page)."""
        p = keys.eventual_shard_prefix(req.shard)
        if req.after and not req.after.startswith(p):
            raise BadRequest(f"after: not a key of shard {req.shard}")
        out = pb.LwwRangeResponse()
        for k, v in self.store.under(p, req.after[len(p):] + b"\x00" if req.after else b""):
            if len(out.keys) >= req.limit:
                out.more = True
                return out
            out.keys.append(k)
            out.values.append(decode(v))
        return out

    def merge(self, resp: pb.LwwRangeResponse) -> int:
        """Keep what a peer holds that is newer than this replica's; returns how many."""
        if len(resp.keys) != len(resp.values):
            raise BadRequest("keys and values differ in number")
        now_ms = world.wall_ms()
        # Nothing already past the grace: this replica may have purged it on purpose.
        items = [(k, v) for k, v in zip(resp.keys, resp.values)
                 if k.startswith(b"E") and v.version
                 and not stale(v.version, v.expires_at_ms, v.deleted, now_ms, self.grace_ms)]
        return sum(self._write_batch(items)) if items else 0

    def write(self, req: pb.LwwWriteRequest) -> bool:
        """Store the value if it is newer than what this replica holds; True if it was.
        Returns once it is durable."""
        if not req.value.version:
            raise BadRequest("value.version: required (the coordinator's clock)")
        return self._group.call((key(req.shard, req.dataset, req.partition_key, req.local_key),
                                 req.value))

    def _write_batch(self, items: list[tuple[bytes, pb.LwwValue]]) -> list[bool]:
        with self._lock:
            return self._compare_and_store(items)

    def _compare_and_store(self, items: list[tuple[bytes, pb.LwwValue]]) -> list[bool]:
        held: dict[bytes, int] = {}
        changes: dict[int, int] = {}  # shard -> XOR of its hash's change
        wb = self.store.batch()
        out = []
        for k, v in items:
            if k not in held:
                cur = self.store._get(k)
                held[k] = _H.unpack_from(cur)[0] if cur is not None else -1
            ok = wins(v.version, held[k] if held[k] >= 0 else None)
            if ok:
                wb.put(k, encode(v))
                shard = keys.shard_of_key(k)
                x = item_hash(k, v.version) ^ (item_hash(k, held[k]) if held[k] >= 0 else 0)
                changes[shard] = changes.get(shard, 0) ^ x
                held[k] = v.version
            out.append(ok)
        self._store_with_hashes(wb, changes)
        return out

    def purge(self, seen: list[tuple[bytes, bytes]]) -> int:
        """Delete the keys still holding exactly what was seen (a newer write stays);
        returns how many were deleted."""
        wb = self.store.batch()
        changes: dict[int, int] = {}
        n = 0
        with self._lock:
            for k, v in seen:
                if self.store._get(k) == v:
                    wb.delete(k)
                    n += 1
                    shard = keys.shard_of_key(k)
                    changes[shard] = changes.get(shard, 0) ^ item_hash(k, _H.unpack_from(v)[0])
            if n:
                self._store_with_hashes(wb, changes)
        return n

    def drop_all(self) -> None:
        """Forget every eventual value (they are taken again from the peers)."""
        with self._lock:
            self.store.db.delete_range(b"E", b"F")
            self.store.db.delete_range(b"H", b"I")
            self.store.db.put(keys.lww_hash_key(0), _Q.pack(0))  # all shards empty: hashes 0
            self.store.sync()

    def read(self, req: pb.LwwReadRequest) -> pb.LwwReadResponse:
        """What this replica holds, tombstones and expired values included (the coordinator
        compares versions across replicas and judges expiry)."""
        p = prefix(req.shard, req.dataset, req.partition_key)
        if not req.scan:
            b = self.store._get(p + req.local_key)
            items = [] if b is None else [pb.LwwItem(local_key=req.local_key, value=decode(b))]
            return pb.LwwReadResponse(items=items)
        return pb.LwwReadResponse(items=[pb.LwwItem(local_key=lk, value=decode(v)) for lk, v in
                                         self.store.local_range(p, req.start, req.end, req.limit)])
