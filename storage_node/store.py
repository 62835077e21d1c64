"""The storage node's RocksDB state (rocksdict) and the view the pure apply step reads:
the database plus the writes of the records already applied in the current batch."""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator

from rocksdict import WriteBatch

from midtown_pb import kv_pb2 as pb
from record import codec
from record.model import GroupResult, RecordResult, Stored
from runtime.disk import OpenDb, SyncedDb
from storage_node import changes, keys
from storage_node.apply import Applied, Event
from storage_node.handoff import Place

# Bloom filters on the node's state: ~1% false positives at 10 bits a key. Most lookups of
# an ingestion are of event ids never seen, which without filters read an index block of
# every table file, more of them as the table of ids grows (docs/performance.md).
STORE_BLOOM_BITS_PER_KEY = 10
_I = struct.Struct(">I")
_Q = struct.Struct(">Q")


class NodeStore:
    def __init__(self, path: str, open_db: OpenDb = SyncedDb) -> None:
        """`open_db`: the disk port (runtime/disk.py); the simulator's can lose power."""
        self.synced = open_db(path, bloom_bits_per_key=STORE_BLOOM_BITS_PER_KEY)
        self.db = self.synced.db
        # (shard, dataset) -> a log time no held event id is older than: the oldest one's,
        # when last read. Ids only get younger (new ones carry the log's time, which only
        # grows; aging removes the oldest), so an old reading stays true; it spares a
        # RocksDB iterator per batch and shard to learn that none is past the window.
        self.oldest_floor: dict[tuple[int, str], int] = {}

    def close(self) -> None:
        self.db.close()

    def _get(self, key: bytes) -> bytes | None:
        v = self.db.get(key)
        return bytes(v) if v is not None else None

    def get(self, key: bytes) -> Stored | None:
        b = self._get(key)
        return keys.decode_stored(b) if b is not None else None

    def under(self, prefix: bytes, start: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        """(key, value) of each key that starts with `prefix`, in order, from prefix + start."""
        yield from self.synced.items(prefix + start, keys.prefix_end(prefix))

    def local_range(self, prefix: bytes, start: bytes, end: bytes, limit: int) -> list[tuple[bytes, bytes]]:
        """Up to `limit` (local key, stored bytes) under `prefix`, local key in [start, end)
        (end empty: to the last)."""
        out: list[tuple[bytes, bytes]] = []
        if limit <= 0:
            return out
        for k, v in self.under(prefix, start):
            lkey = k[len(prefix):]
            if end and lkey >= end:
                break
            out.append((lkey, v))
            if len(out) >= limit:
                break
        return out

    def scan(self, prefix: bytes, start: bytes, end: bytes, limit: int) -> list[tuple[bytes, Stored]]:
        return [(lk, keys.decode_stored(v)) for lk, v in self.local_range(prefix, start, end, limit)]

    def dedup(self, shard: int, request_id: bytes) -> tuple[int, RecordResult] | None:
        b = self._get(keys.dedup_key(shard, request_id))
        if b is None:
            return None
        return _Q.unpack_from(b)[0], codec.result_from_pb(pb.RecordResult.FromString(b[8:]))

    def event(self, shard: int, dataset: str, event_id: bytes) -> Event | None:
        b = self._get(keys.event_key(shard, dataset, event_id))
        return decode_event(b) if b is not None else None

    def held_events(self, shard: int, dataset: str, event_ids: list[bytes]) -> dict[bytes, Event]:
        if not event_ids:
            return {}
        prefix = keys.event_key(shard, dataset, b"")
        got = self.db.get([prefix + e for e in event_ids])  # one multi-get
        assert got is not None
        return {e: decode_event(bytes(b)) for e, b in zip(event_ids, got) if b is not None}

    def event_count(self, shard: int, dataset: str) -> int:
        b = self._get(keys.event_count_key(shard, dataset))
        return _Q.unpack(b)[0] if b else 0

    def oldest_events(self, shard: int, dataset: str, n: int,
                      skip: set[tuple[int, int]] | None = None) -> Iterator[tuple[int, int, bytes, int]]:
        """(position, seq, event id, log time) of `dataset` in `shard`, oldest first, up to `n`."""
        prefix = keys.event_order_prefix(shard, dataset)
        got = 0
        for k, v in self.under(prefix):
            pos = _Q.unpack_from(k, len(prefix))[0]
            ts, ids = keys.decode_event_chunk(v)
            for seq, eid in ids:
                if got >= n:
                    return
                if skip and (pos, seq) in skip:
                    continue
                got += 1
                yield pos, seq, eid, ts

    def event_chunk(self, shard: int, dataset: str,
                    position: int) -> tuple[int, list[tuple[int, bytes]]] | None:
        """(log time, [(seq, event id)]) recorded at `position`, if any are still held."""
        b = self._get(keys.event_chunk_key(shard, dataset, position))
        return keys.decode_event_chunk(b) if b is not None else None

    def event_counts(self) -> Iterator[tuple[int, str, int]]:
        """(shard, dataset, event ids held) for every dataset and shard holding some."""
        for k, v in self.under(b"N"):
            shard, dataset = keys.decode_event_count_key(k)
            yield shard, dataset, _Q.unpack(v)[0]

    def change_floor(self, shard: int) -> int:
        """The position below which `shard`'s changes are reclaimed here."""
        b = self._get(keys.change_floor_key(shard))
        return _Q.unpack(b)[0] if b else 0

    def drop_applied(self, log_id: int, dataset: str) -> bool:
        return self._get(keys.drop_key(log_id, dataset)) is not None

    def digest(self, shard: int) -> int:
        b = self._get(keys.digest_key(shard))
        return _Q.unpack(b)[0] if b else 0

    def next_position(self, log_id: int) -> tuple[int, int]:
        """(next position to apply, log timestamp of the last applied record)."""
        b = self._get(keys.position_key(log_id))
        if b is None:
            return 0, 0
        pos, ts = keys.decode_u64(b, 2)
        return pos, ts

    def last_up_ms(self) -> int:
        """When this node last said it was up (0: never)."""
        b = self._get(keys.LAST_UP)
        return _Q.unpack(b)[0] if b else 0

    def set_last_up(self, ms: int) -> None:
        self.db.put(keys.LAST_UP, _Q.pack(ms))

    def member_positions(self) -> dict[tuple[int, int], int]:
        return {keys.decode_member_position_key(k): _Q.unpack(v)[0] for k, v in self.under(b"Q")}

    def marks(self) -> dict[int, int]:
        """Shard -> its mark (storage_node/shard_copy.py), for the shards that came by a copy."""
        return {_I.unpack_from(k, 1)[0]: _Q.unpack(v)[0] for k, v in self.under(b"M")}

    def place(self, shard: int) -> Place | None:
        b = self._get(keys.place_key(shard))
        return keys.decode_place(b) if b is not None else None

    def places(self) -> dict[int, Place]:
        """Shard -> where its records come from, for the shards handed to another log
        (storage_node/handoff.py); the others' is their first log."""
        return {_I.unpack_from(k, 1)[0]: keys.decode_place(v) for k, v in self.under(b"S")}

    def has_shard_data(self, shard: int) -> bool:
        """Whether any key of `shard` is stored here (values, digest, ids, eventual values)."""
        return any(next(self.under(p), None) is not None for p in keys.shard_prefixes(shard))

    def index_entries_of(self, log_id: int, shard: int) -> list[bytes]:
        """The b"T" and b"X" index entries of `log_id` that belong to `shard`."""
        return [k for p in keys.index_prefixes(log_id) for k, _ in self.under(p)
                if keys.shard_index_entry(k, shard)]

    def batch(self) -> WriteBatch:
        """A new batch for `write` (made by the disk port, SyncedDb.batch)."""
        return self.synced.batch()

    def write(self, wb: WriteBatch) -> None:
        """Atomic but not yet durable: apply results are a function of the committed log
        alone, so a batch lost in a power failure is applied again from the log. Positions
        are published only after `sync` (DESIGN.md), so the log keeps what was lost."""
        self.synced.write(wb, sync=False)

    def sync(self) -> None:
        self.synced.sync()


class BatchView:
    """What apply reads while a batch of records is applied: the store, overlaid with the
    batch's own writes so far. `commit` turns the batch into one atomic write, with the
    log's new position in it: effects and position are atomic."""

    def __init__(self, store: NodeStore) -> None:
        self.store = store
        self.values: dict[bytes, Stored | None] = {}
        self.digests: dict[int, int] = {}
        self.dedups: dict[tuple[int, bytes], tuple[int, RecordResult]] = {}
        self.dedup_logs: dict[tuple[int, bytes], int] = {}  # the log each new entry came from
        self.expiring: dict[bytes, int] = {}  # key written with a TTL -> its log
        self.deletes: list[bytes] = []  # reclaimed entries and their index keys
        self.dropped: list[bytes] = []  # prefixes deleted: dropped datasets and shards, members' positions
        self.drop_markers: list[bytes] = []
        self.member_positions: dict[tuple[int, int], int] = {}  # (log, node) -> position
        self.marks: dict[int, int | None] = {}  # shard -> its new mark (None: none any more)
        self.places: dict[int, Place] = {}  # shard -> its new place among the logs (handoff.py)
        self.index_puts: list[bytes] = []  # index entries moved to another log (hand_over)
        # Event ids recorded (an Event) or aged out (None) by this batch, their order-index
        # entries added and removed, and the counts per (shard, dataset).
        self.events: dict[tuple[int, str], dict[bytes, Event | None]] = {}  # by (shard, dataset)
        # Per record that recorded ids, in log order: (position, log time, its ids -> Event),
        # the ids in seq order (apply records them so); one O chunk each at commit.
        self.event_order: dict[tuple[int, str], list[tuple[int, int, dict[bytes, Event]]]] = {}
        self.event_order_gone: dict[tuple[int, str], set[tuple[int, int]]] = {}
        self.event_counts: dict[tuple[int, str], int] = {}
        # The store's ids by age, read once per batch as far as asked (a RocksDB iterator
        # per record cost more than the rest of aging): (entries read, the rest).
        self._store_oldest: dict[tuple[int, str], tuple[list[tuple[int, int, bytes, int]],
                                                        Iterator[tuple[int, int, bytes, int]]]] = {}
        # Changes recorded (key, encoded), the next seq of each (shard, dataset, position),
        # and the shards whose changes below a position were reclaimed.
        self.changes: list[tuple[bytes, bytes]] = []
        self._seqs: dict[tuple[int, str, int], int] = {}
        self.change_floors: dict[int, int] = {}

    def get(self, key: bytes) -> Stored | None:
        if key in self.values:
            return self.values[key]
        if self.dropped and any(key.startswith(p) for p in self.dropped):
            return None
        return self.store.get(key)

    def scan(self, prefix: bytes, start: bytes, end: bytes, limit: int) -> list[tuple[bytes, Stored]]:
        gone = any(prefix.startswith(p) for p in self.dropped)
        base = {} if gone else dict(self.store.scan(prefix, start, end, limit + len(self.values)))
        n = len(prefix)
        for k, v in self.values.items():
            if k.startswith(prefix) and k[n:] >= start and (not end or k[n:] < end):
                if v is None:
                    base.pop(k[n:], None)
                else:
                    base[k[n:]] = v
        return sorted(base.items())[:limit]

    def dedup(self, shard: int, request_id: bytes) -> tuple[int, RecordResult] | None:
        return self.dedups.get((shard, request_id)) or self.store.dedup(shard, request_id)

    def digest(self, shard: int) -> int:
        return self.digests[shard] if shard in self.digests else self.store.digest(shard)

    def held_events(self, shard: int, dataset: str, event_ids: list[bytes]) -> dict[bytes, Event]:
        batch = self.events.get((shard, dataset))
        if not batch:
            return self.store.held_events(shard, dataset, event_ids)
        out = self.store.held_events(shard, dataset, [e for e in event_ids if e not in batch])
        out.update({e: ev for e in event_ids if e in batch and (ev := batch[e]) is not None})
        return out

    def event_count(self, shard: int, dataset: str) -> int:
        k = (shard, dataset)
        return self.event_counts[k] if k in self.event_counts else self.store.event_count(shard, dataset)

    def oldest_events(self, shard: int, dataset: str, n: int,
                      older_than: int | None = None) -> Iterator[tuple[int, int, bytes, int]]:
        """Lazily: the caller usually stops at the first (it is within the window). Nothing
        when the store's ids are known to be no older than `older_than`: this batch's are
        newer still (a shard's ids come from one log, whose time only grows)."""
        if older_than is not None and self.store.oldest_floor.get((shard, dataset), -1) >= older_than:
            return
        gone = self.event_order_gone.get((shard, dataset), set())
        got = 0
        for e in self._held_oldest(shard, dataset):
            if got >= n:
                return
            if (e[0], e[1]) not in gone:
                got += 1
                yield e
        for pos, ts, evs in self.event_order.get((shard, dataset), ()):
            for eid, ev in evs.items():
                if got >= n:
                    return
                if (pos, ev.seq) not in gone:
                    got += 1
                    yield pos, ev.seq, eid, ts

    def _held_oldest(self, shard: int, dataset: str) -> Iterator[tuple[int, int, bytes, int]]:
        """The store's ids oldest first (as before this batch: it writes nothing until
        commit), read from RocksDB only as far as any record of the batch has asked."""
        memo = self._store_oldest.get((shard, dataset))
        if memo is None:
            rest = iter(self.store.oldest_events(shard, dataset, 1 << 62))
            memo = self._store_oldest[(shard, dataset)] = ([], rest)
        seen, rest = memo
        i = 0
        while True:
            if i == len(seen):
                e = next(rest, None)
                if e is None:
                    return
                if not seen:  # the oldest held: ids only get younger (see NodeStore.oldest_floor)
                    floor = self.store.oldest_floor
                    floor[(shard, dataset)] = max(floor.get((shard, dataset), -1), e[3])
                seen.append(e)
            yield seen[i]
            i += 1

    def add(self, applied: Applied, shard: int, ts_ms: int, log_id: int = 0) -> None:
        for node, pos in applied.positions.items():
            self.member_positions[(log_id, node)] = pos
        if applied.dropped:  # what this batch wrote there before the drop goes too
            self.dropped.extend(applied.dropped)
            self.drop_markers.append(applied.drop_marker)
            for k in [k for k in self.values if any(k.startswith(p) for p in applied.dropped)]:
                del self.values[k]
                self.expiring.pop(k, None)
            self.changes = [(k, v) for k, v in self.changes if not k.startswith(applied.dropped)]
        self.values.update(applied.writes)
        for k, v in applied.writes.items():
            if v is not None and v.expires_at_ms:
                self.expiring[k] = log_id
        if not applied.positions:  # a published position changes no shard (its shard field is 0)
            self.digests[shard] = applied.digest
        if applied.dedup and applied.result is not None:
            self.dedups[(shard, applied.result.request_id)] = (ts_ms, applied.result)
            self.dedup_logs[(shard, applied.result.request_id)] = log_id
        if applied.events or applied.events_gone:
            ds = applied.dataset
            batch = self.events.setdefault((shard, ds), {})
            for eid, pos, seq in applied.events_gone:
                batch[eid] = None
                self.event_order_gone.setdefault((shard, ds), set()).add((pos, seq))
            batch.update(applied.events)
            if applied.events:  # all of one record: one position, one log time
                first = next(iter(applied.events.values()))
                self.event_order.setdefault((shard, ds), []).append((first.position, first.ts_ms,
                                                                     applied.events))
        if applied.event_count >= 0:
            self.event_counts[(shard, applied.dataset)] = applied.event_count

    def record_changes(self, shard: int, dataset: str, got: list[changes.Change]) -> None:
        """Record changes of `shard`'s dataset, numbered after those of their position so far."""
        for c in got:
            at = (shard, dataset, c.position)
            seq = self._seqs.get(at, 0)
            self._seqs[at] = seq + 1
            self.changes.append((keys.change_key(shard, dataset, c.position, seq), changes.encode(c)))

    def expiring_between(self, log_id: int, after_ts_ms: int, upto_ts_ms: int) -> list[tuple[int, bytes]]:
        """(expiry, value key) of each expiry index entry of `log_id` stored before this
        batch with an expiry in (after_ts_ms, upto_ts_ms], in order."""
        p = keys.expiry_prefix(log_id)
        return [(_Q.unpack_from(k, len(p))[0], bytes(k[len(p) + 8:]))
                for k in self.store.synced.keys(p + _Q.pack(after_ts_ms + 1), p + _Q.pack(upto_ts_ms + 1))]

    def reclaim_changes(self, before_ts_ms: Callable[[int], int], limit: int) -> int:
        """Delete, in this batch, up to `limit` changes recorded before log time
        `before_ts_ms(shard)`, oldest first in each (shard, dataset), and raise each
        shard's floor past what went. Returns how many went."""
        n = 0
        start = b"C"
        while n < limit:
            first = next(self.store.synced.keys(start, b"D"), None)
            if first is None:
                return n
            group = keys.change_group(first)
            shard = keys.shard_of_key(group)
            cutoff = before_ts_ms(shard)
            for k, v in self.store.under(group):
                if n >= limit or changes.log_time_of(v) >= cutoff:
                    break
                self.deletes.append(k)
                n += 1
                floor = keys.change_position(k) + 1
                if floor > self.change_floors.get(shard, 0):
                    self.change_floors[shard] = floor
            end = keys.prefix_end(group)
            if end is None:
                return n
            start = end
        return n

    def reclaim(self, log_id: int, before_ts_ms: int, limit: int) -> int:
        """Delete, in this batch, up to `limit` dedup entries of `log_id` written before
        log time `before_ts_ms` (storage_node/reclaim.py says why no outcome changes).
        An entry rewritten since (a later record with the same id) stays. Returns how many
        index entries were reclaimed."""
        def target(ts: int, rest: bytes) -> bytes | None:
            shard, rid = _I.unpack_from(rest)[0], rest[4:]
            cur = self.store._get(keys.dedup_key(shard, rid))
            if (shard, rid) in self.dedups or cur is None or _Q.unpack_from(cur)[0] != ts:
                return None  # rewritten since
            return keys.dedup_key(shard, rid)

        return self._walk_index(keys.dedup_time_prefix(log_id), before_ts_ms, limit, target)

    def reclaim_expired(self, log_id: int, before_ts_ms: int, limit: int) -> int:
        """Delete, in this batch, up to `limit` values of `log_id`'s shards that expired
        before log time `before_ts_ms`; a value written again since stays."""
        def target(expires_at: int, key: bytes) -> bytes | None:
            if key in self.values:
                return None  # written in this batch
            cur = self.store.get(key)
            return key if cur is not None and cur.expires_at_ms == expires_at else None

        return self._walk_index(keys.expiry_prefix(log_id), before_ts_ms, limit, target)

    def _walk_index(self, prefix: bytes, before: int, limit: int,
                    target: Callable[[int, bytes], bytes | None]) -> int:
        """Walk a time index (`prefix` time:8 rest) in time order up to `before`: delete
        each index entry and the entry `target(time, rest)` names, if any."""
        n = 0
        for k in self.store.synced.keys(prefix, keys.prefix_end(prefix)):
            if n >= limit:
                break
            t = _Q.unpack_from(k, len(prefix))[0]
            if t >= before:
                break
            self.deletes.append(k)
            gone = target(t, k[len(prefix) + 8:])
            if gone is not None:
                self.deletes.append(gone)
            n += 1
        return n

    def hand_over(self, shard: int, place: Place, old_log: int) -> None:
        """`shard` now takes its records from `place` (handed over from `old_log`, in this
        batch): its b"T" and b"X" index entries go to the new log's indexes, so that its
        request ids are reclaimed, and its values' expiries recorded, by the time of the
        log its records now come from."""
        self.places[shard] = place
        if place.log == old_log:
            return
        for k in self.store.index_entries_of(old_log, shard):
            self.deletes.append(k)
            self.index_puts.append(keys.with_log(k, place.log))
        for k, lg in self.expiring.items():  # this batch's own
            if lg == old_log and keys.shard_of_key(k) == shard:
                self.expiring[k] = place.log
        for sr, lg in self.dedup_logs.items():
            if lg == old_log and sr[0] == shard:
                self.dedup_logs[sr] = place.log

    def forget_member_positions(self, log_id: int) -> None:
        """Delete every member's published position of `log_id` in this batch (learned
        again from the next publications)."""
        self.dropped.append(keys.member_positions_prefix(log_id))

    def drop_shard(self, shard: int, log_id: int) -> None:
        """Delete everything of `shard` (of log `log_id`) in this batch, with its mark."""
        self.dropped.extend(keys.shard_prefixes(shard))
        self.deletes.extend(self.store.index_entries_of(log_id, shard))
        self.marks[shard] = None

    def commit(self, positions: dict[int, tuple[int, int]]) -> None:
        """Write the batch and each log's (next position, last timestamp), atomically."""
        wb = self.store.batch()
        for k in self.deletes:  # first: nothing this batch writes is among them
            wb.delete(k)
        for p in self.dropped:  # before the values: what was written after a drop stays
            end = keys.prefix_end(p)
            assert end is not None, p  # a dataset's prefixes end in its name's UTF-8, never 0xff
            wb.delete_range(p, end)
        for k in self.drop_markers:
            wb.put(k, b"")
        for k, v in self.values.items():
            if v is None:
                wb.delete(k)
            else:
                wb.put(k, keys.encode_stored(v))
                if k in self.expiring and v.expires_at_ms:
                    wb.put(keys.expiry_key(self.expiring[k], v.expires_at_ms, k), b"")
        for shard, d in self.digests.items():
            wb.put(keys.digest_key(shard), _Q.pack(d))
        for (shard, rid), (ts, res) in self.dedups.items():
            wb.put(keys.dedup_key(shard, rid), _Q.pack(ts) + codec.result_to_pb(res).SerializeToString())
            wb.put(keys.dedup_time_key(self.dedup_logs.get((shard, rid), 0), ts, shard, rid), b"")
        self._commit_event_order(wb)
        for (shard, ds), batch in self.events.items():
            prefix = keys.event_key(shard, ds, b"")
            for eid, e in batch.items():
                if e is None:
                    wb.delete(prefix + eid)
                else:
                    wb.put(prefix + eid, encode_event(e))
        for (shard, ds), n in self.event_counts.items():
            wb.put(keys.event_count_key(shard, ds), _Q.pack(n))
        for (lg, node), pos in self.member_positions.items():
            wb.put(keys.member_position_key(lg, node), _Q.pack(pos))
        for ck, cv in self.changes:
            wb.put(ck, cv)
        for shard, floor in self.change_floors.items():
            wb.put(keys.change_floor_key(shard), _Q.pack(max(floor, self.store.change_floor(shard))))
        for shard, mark in self.marks.items():
            if mark is None:
                wb.delete(keys.mark_key(shard))
            else:
                wb.put(keys.mark_key(shard), _Q.pack(mark))
        for shard, place in self.places.items():
            wb.put(keys.place_key(shard), keys.encode_place(place))
        for k in self.index_puts:
            wb.put(k, b"")
        for log_id, (next_position, last_ts) in positions.items():
            wb.put(keys.position_key(log_id), keys.encode_u64(next_position, last_ts))
        self.store.write(wb)

    def _commit_event_order(self, wb: WriteBatch) -> None:
        """One entry per record that recorded ids: this batch's records' ids still held,
        and the older entries that lost ids (aged out, or recorded again) rewritten."""
        for (shard, ds), gone in self.event_order_gone.items():
            mine = {pos for pos, _, _ in self.event_order.get((shard, ds), ())}
            older: dict[int, set[int]] = {}
            for pos, seq in gone:
                if pos not in mine:
                    older.setdefault(pos, set()).add(seq)
            for pos, seqs in older.items():
                chunk = self.store.event_chunk(shard, ds, pos)
                if chunk is None:
                    continue
                rest = [(seq, eid) for seq, eid in chunk[1] if seq not in seqs]
                key = keys.event_chunk_key(shard, ds, pos)
                if rest:
                    wb.put(key, keys.encode_event_chunk(chunk[0], rest))
                else:
                    wb.delete(key)
        for (shard, ds), order in self.event_order.items():
            lost = self.event_order_gone.get((shard, ds))
            for pos, ts, evs in order:
                ids = [(e.seq, eid) for eid, e in evs.items() if not lost or (pos, e.seq) not in lost]
                if ids:
                    wb.put(keys.event_chunk_key(shard, ds, pos), keys.encode_event_chunk(ts, ids))


_EVENT = struct.Struct(">QQI")


def encode_event(e: Event) -> bytes:
    """ts:8 position:8 seq:4, then the first outcome: nothing for the common one (applied at
    that position, no results), else its GroupResult."""
    head = _EVENT.pack(e.ts_ms, e.position, e.seq)
    f = e.first
    if f.applied and not f.duplicate and not f.results and f.position == e.position:
        return head
    return head + codec.group_result_to_pb(f).SerializeToString()


def decode_event(b: bytes) -> Event:
    ts, pos, seq = _EVENT.unpack_from(b)
    if len(b) == _EVENT.size:
        return Event(ts, pos, seq, GroupResult(True, False, (), pos))
    return Event(ts, pos, seq, codec.group_result_from_pb(pb.GroupResult.FromString(b[_EVENT.size:])))
