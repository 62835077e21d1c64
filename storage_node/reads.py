"""A storage node's reads, of its own state: a get or a scan as of the position it has
applied (waiting, briefly, to reach the position a strong read needs), batches of them, a
shard of one dataset from one log position, and a whole-state checkpoint for a peer that
bootstraps. storage_node/node.py builds one over its store and positions."""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator

import grpc
from rocksdict import Checkpoint, Options, Rdict

from catalog import registry
from catalog.log_map import LogMap
from catalog.routing import check_shard
from midtown_pb import kv_pb2 as pb
from record import codec, staleness
from record.model import Behind, Record
from runtime import world
from runtime.disk import bounded_items
from runtime.refusals import BadRequest, Refusal
from storage_node import arrow_pages, checks, keys, shard_copy
from storage_node.apply import apply
from storage_node.handoff import Place
from storage_node.limits import READ_WAIT_MS_MAX, SHARD_SCAN_BYTES_DEFAULT, SHARD_SCAN_PAGE_MAX
from storage_node.store import BatchView, NodeStore
from storage_node.views import TooManyViews, View, ViewGone, Views


def _released(first: pb.ScanShardResponse, rest: Iterator[pb.ScanShardResponse],
              release: Callable[[], None]) -> Iterator[pb.ScanShardResponse]:
    """`first`, then `rest`; `release()` once the stream ends, fails or is dropped."""
    try:
        yield first
        yield from rest
    finally:
        release()


def cut_splits(items: Iterable[tuple[bytes, bytes]], prefix_len: int, start: bytes, end: bytes,
               split_bytes: int, out_of_time: Callable[[], bool]) -> list[tuple[bytes, bytes, int, int]]:
    """Key ranges of about `split_bytes` (keys and values as stored) over `items`, the
    stored keys from `start` to `end` (suffixes after a `prefix_len`-byte prefix; end b"":
    to the last), in order: (start, end, bytes, keys) each, covering [start, end) with no
    gap. A range is cut at a key, so a key larger than split_bytes is a range of its own;
    no keys: one empty range. Keys are counted as stored (expired ones not yet reclaimed
    too). TimeoutError once `out_of_time()`, asked at every key (pure)."""
    out: list[tuple[bytes, bytes, int, int]] = []
    size = count = 0
    for k, v in items:
        if out_of_time():
            raise TimeoutError(f"the shard's keys were not all read within the call's deadline "
                               f"({count + sum(c for *_, c in out)} read); give it more time")
        if size and size + len(k) + len(v) > split_bytes:
            out.append((start, k[prefix_len:], size, count))
            start, size, count = k[prefix_len:], 0, 0
        size += len(k) + len(v)
        count += 1
    out.append((start, end, size, count))
    return out


def _cursor_at(cur: pb.ScanCursor, start: bytes, end: bytes) -> bytes:
    """`cur` (its node, view, dataset, shard and position) over [start, end), as a token."""
    c = pb.ScanCursor()
    c.CopyFrom(cur)
    c.start, c.end = start, end
    return c.SerializeToString()


def _range_end(prefix: bytes, end: bytes) -> bytes | None:
    """The stored key a range with suffix `end` stops before (b"": the prefix's end)."""
    return prefix + end if end else keys.prefix_end(prefix)


def _items(db: Rdict, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
    return bounded_items(db, prefix, keys.prefix_end(prefix))


def check_held(node_id: int, shard: int, shards: int, holds: Callable[[int], bool],
               field: str = "") -> None:
    """BadRequest for a shard the cluster does not have; Behind for one this node does not
    hold (catalog/replica_sets.py): another node may answer."""
    check_shard(shard, shards, field)
    if not holds(shard):
        raise Behind(f"storage node {node_id} does not hold shard {shard}")


class Reads:
    def __init__(self, node_id: int, store: NodeStore, data_dir: str, commit_lock: threading.Lock,
                 cond: threading.Condition, positions: dict[int, tuple[int, int]],
                 kv: Callable[[], registry.KvTopology], log_map: Callable[[], LogMap],
                 holds: Callable[[int], bool], place_of: Callable[[int], Place],
                 reread_log_map: Callable[[], None] = lambda: None,
                 clock_doubt: Callable[[int], str | None] = lambda _: None) -> None:
        """`clock_doubt(log)`: why this node's clock may not serve bounded reads of a log now
        (record/staleness.py ClockWatch; None: it may). `positions`: the node's (next
        position, log time) per log, updated by its applier
        under `commit_lock`, which notifies `cond`; `holds(shard)`: whether this node holds
        a shard (catalog/replica_sets.py); `place_of(shard)`: the log it takes the shard's
        records from (storage_node/handoff.py); `reread_log_map()`: read the shard -> log
        map from ZooKeeper now (a log added since the last read)."""
        self.node_id = node_id
        self.store = store
        self.data_dir = data_dir
        self.commit_lock = commit_lock
        self.cond = cond
        self.positions = positions
        self.kv = kv
        self.log_map = log_map
        self.holds = holds
        self.place_of = place_of
        self.reread_log_map = reread_log_map
        self.clock_doubt = clock_doubt
        self.views = Views(data_dir, self._take_checkpoint, world.monotonic)

    def read(self, req: pb.ReadRequest, field: str = "") -> pb.ReadResponse:
        """A read of this replica's current state, expiry judged by the log time it has
        applied up to. BadRequest names a bad field; Behind: not applied far enough yet."""
        self._check_held(req.shard, field)
        if req.op.WhichOneof("op") not in ("get", "scan"):
            raise BadRequest(f"{field}op: only get and scan read a replica")
        place = self.place_of(req.shard)
        log_id = place.log
        self.wait_applied(log_id, req.min_position, req.wait_ms)
        pos, ts = self.positions[log_id]
        if req.max_staleness_ms:
            self.check_fresh(log_id, ts, req.max_staleness_ms)
        pos, ts = pos + place.version_base, place.log_time(ts)  # the shard's own order and time
        op = codec.op_from_pb(req.op)
        rec = Record(b"", "", req.dataset, req.shard, req.partition_key, (op,))
        view = BatchView(self.store)
        applied = apply(view, rec, log_id, pos, ts, self.node_id)
        assert applied.result is not None
        return pb.ReadResponse(result=codec.op_result_to_pb(applied.result.results[0]), position=pos)

    @contextlib.contextmanager
    def checkpoint(self) -> Iterator[Iterator[tuple[bytes, bytes]]]:
        """Every key of this node's state as it stood at one moment (a batch whole, with its
        positions, or not at all), for a peer that bootstraps from it."""
        with self._checkpointed() as db:
            yield (kv for kv in db.items())  # type: ignore[misc]

    @contextlib.contextmanager
    def _checkpointed(self) -> Iterator[Rdict]:
        """This node's state as it stood at one moment. A RocksDB checkpoint (hard links,
        taken while no batch commits, its write-ahead log flushed first: batches are
        written without a sync, and a checkpoint holds only what reached the files),
        read and then deleted: rocksdict 0.3.29's snapshot iterators do not isolate from
        later writes (tried)."""
        path = os.path.join(self.data_dir, f"checkpoint-{uuid.uuid4().hex}")
        self._take_checkpoint(path)
        db = Rdict(path, Options(raw_mode=True))
        try:
            yield db
        finally:
            db.close()
            shutil.rmtree(path, ignore_errors=True)

    def _take_checkpoint(self, path: str) -> None:
        with self.commit_lock:
            self.store.sync()
            Checkpoint(self.store.db).create_checkpoint(path)

    def shard_copy(self, req: pb.SnapshotRequest) -> tuple[int, int, Iterator[tuple[bytes, bytes]]]:
        """A copy of one shard this node holds, for a shard move's destination: (the log
        position it stands at, the log time there, its keys and values), from one
        checkpoint taken once the shard's log is applied up to req.min_position. The caller
        reads the pairs before it does anything else (the checkpoint goes with them)."""
        self._check_held(req.shard)
        log_id = self.place_of(req.shard).log
        self.wait_applied(log_id, req.min_position, req.wait_ms)
        cm = self._checkpointed()
        db = cm.__enter__()
        # The position as the checkpoint holds it, written with the effects in one batch
        # (tried: without the flush above, a copy whose position came from memory lacked
        # the shard's last thousand records).
        saved = db.get(keys.position_key(log_id))
        tail, ts = keys.decode_u64(saved, 2) if saved is not None else (0, 0)
        mark = db.get(keys.mark_key(req.shard))
        at = shard_copy.effective(tail, {req.shard: keys.decode_u64(mark, 1)[0]} if mark else {}, req.shard)

        def pairs() -> Iterator[tuple[bytes, bytes]]:
            try:
                for prefix in keys.shard_prefixes(req.shard):
                    yield from _items(db, prefix)
                for prefix in keys.index_prefixes(log_id):
                    yield from ((k, v) for k, v in _items(db, prefix) if keys.shard_index_entry(k, req.shard))
            finally:
                cm.__exit__(None, None, None)
        return at, ts, pairs()

    def scan_shard(self, req: pb.StorageScanShardRequest) -> Iterator[pb.ScanShardResponse]:
        """One dataset's live keys in one shard (or one partitioning key's), all from one
        view of this node's state (storage_node/views.py), in pages of at most `req.page`
        items and `req.max_bytes` bytes; each page's `next` names where the scan goes on in
        that view (empty on the last). A cursor goes on from where it names; without one, a
        view at or after `req.min_position` is opened. Pages are read as they are sent: the
        memory a scan holds is a page, whatever the shard's size."""
        if not 1 <= req.page <= SHARD_SCAN_PAGE_MAX:
            raise BadRequest(f"page: {req.page}, must be between 1 and {SHARD_SCAN_PAGE_MAX}")
        view, cur = self._view_for(req.cursor, req.dataset, req.shard, req.min_position, req.wait_ms,
                                   req.partition_key if req.HasField("partition_key") else None,
                                   req.log_id if req.HasField("log_id") else None)
        try:
            pages = self._pages(view, cur, req.page, req.max_bytes or SHARD_SCAN_BYTES_DEFAULT, req.arrow)
            first = next(pages)
        except BaseException:
            self.views.release(view)
            raise
        return _released(first, pages, lambda: self.views.release(view))

    def shard_splits(self, req: pb.StorageShardSplitsRequest) -> pb.ShardSplitsResponse:
        """The dataset's keys in one shard (or one partitioning key's), from one view, cut
        into key ranges of about `req.split_bytes` (keys and values) each: a token per
        range, which scan_shard reads. A range is cut at a key, so one key larger than
        split_bytes is a range of its own; no keys: one empty range."""
        until = world.monotonic() + req.time_left_ms / 1000 if req.time_left_ms else float("inf")
        view, cur = self._view_for(b"", req.dataset, req.shard, req.min_position, req.wait_ms,
                                   req.partition_key if req.HasField("partition_key") else None,
                                   req.log_id if req.HasField("log_id") else None)
        try:
            prefix = keys.dataset_shard_prefix(cur.shard, cur.dataset)
            items = bounded_items(view.db, prefix + cur.start, _range_end(prefix, cur.end))
            try:
                cut = cut_splits(items, len(prefix), cur.start, cur.end, req.split_bytes,
                                 lambda: world.monotonic() > until)
            except TimeoutError as e:
                raise Refusal(grpc.StatusCode.DEADLINE_EXCEEDED, str(e)) from None
            return pb.ShardSplitsResponse(position=cur.position, splits=[
                pb.ShardSplit(token=_cursor_at(cur, start, end), bytes=size, keys=count)
                for start, end, size, count in cut])
        finally:
            self.views.release(view)

    def _view_for(self, cursor: bytes, dataset: str, shard: int, min_position: int, wait_ms: int,
                  partition_key: bytes | None, asked_log: int | None) -> tuple[View, pb.ScanCursor]:
        """The view a scan reads and where in it: the cursor's (which must name this node,
        `dataset` and `shard`), or a view opened now at or after `min_position` of
        `asked_log` (None: the shard's log here), from the start of the shard's keys of
        `dataset` (of `partition_key`'s only, if given)."""
        if cursor:
            cur = pb.ScanCursor()
            try:
                cur.ParseFromString(cursor)
            except Exception:
                raise BadRequest("cursor: not a scan cursor") from None
            if cur.node != self.node_id or cur.dataset != dataset or cur.shard != shard:
                raise BadRequest(f"cursor: for storage node {cur.node}, shard {cur.shard}, not this "
                                 f"scan's (node {self.node_id}, shard {shard})")
            try:
                return self.views.get(cur.view), cur
            except ViewGone as e:
                raise Refusal(grpc.StatusCode.FAILED_PRECONDITION, str(e), field="token") from None
        self._check_held(shard)
        log_id = self.place_of(shard).log if asked_log is None else asked_log
        if log_id not in self.positions:
            raise BadRequest(f"log_id: log {log_id} carries no key-value data here")
        self.wait_applied(log_id, min_position, wait_ms)
        checks.placed_in(self.place_of(shard).log, shard, log_id)  # (once applied as far as asked)
        try:
            view = self.views.open(log_id, min_position)
        except TooManyViews as e:
            raise Refusal(grpc.StatusCode.RESOURCE_EXHAUSTED, str(e)) from None
        start = end = b""
        if partition_key is not None:
            n = len(keys.dataset_shard_prefix(shard, dataset))
            start = keys.partition_prefix(shard, dataset, partition_key)[n:]
            end = keys.prefix_end(start) or b""  # None: all 0xff, to the shard's end
        return view, pb.ScanCursor(node=self.node_id, view=view.id, dataset=dataset, shard=shard,
                                   position=view.position(log_id)[0], start=start, end=end)

    def _pages(self, view: View, cur: pb.ScanCursor, page: int, max_bytes: int,
               arrow: bool = False) -> Iterator[pb.ScanShardResponse]:
        """The live items from `cur.start` to `cur.end` in `view`, page by page; each page's
        `next` is a cursor at the key after its last (at least one message). `arrow`: each
        page's items as one Arrow record batch (storage_node/arrow_pages.py)."""
        prefix = keys.dataset_shard_prefix(cur.shard, cur.dataset)
        n = len(prefix)
        ts = self.place_of(cur.shard).log_time(view.position(self.place_of(cur.shard).log)[1])
        items = bounded_items(view.db, prefix + cur.start, _range_end(prefix, cur.end))
        if arrow:
            yield from self._arrow_pages(cur, items, n, ts, page, max_bytes)
            return
        out: list[pb.ShardItem] = []
        size = 0
        for k, v in items:
            s = keys.decode_stored(v)
            if s.live_at(ts):
                pkey, lkey = keys.split_value_key(k, n)
                out.append(pb.ShardItem(partition_key=pkey, local_key=lkey, value=codec.stored_to_pb(s)))
                size += len(k) + len(v)
                if len(out) >= page or size >= max_bytes:
                    # (the next page from the least key after k)
                    yield pb.ScanShardResponse(items=out, position=cur.position,
                                               next=_cursor_at(cur, k[n:] + b"\x00", cur.end))
                    out, size = [], 0
        yield pb.ScanShardResponse(items=out, position=cur.position)

    @staticmethod
    def _arrow_pages(cur: pb.ScanCursor, items: Iterator[tuple[bytes, bytes]], n: int, ts: int,
                     page: int, max_bytes: int) -> Iterator[pb.ScanShardResponse]:
        """_pages' pages as Arrow record batches: the stored entries gathered as read (the
        expired ones are left out when the page is cut into columns), nothing else done
        per item (the loop it shared with _pages, a method call and two checks an item,
        took a third of a page's time)."""
        ks: list[bytes] = []
        vs: list[bytes] = []
        size = 0
        for k, v in items:
            ks.append(k)
            vs.append(v)
            size += len(k) + len(v)
            if len(ks) >= page or size >= max_bytes:
                yield pb.ScanShardResponse(arrow=arrow_pages.ipc(ks, vs, n, ts), position=cur.position,
                                           next=_cursor_at(cur, k[n:] + b"\x00", cur.end))
                ks, vs, size = [], [], 0
        yield pb.ScanShardResponse(arrow=arrow_pages.ipc(ks, vs, n, ts), position=cur.position)

    def _check_held(self, shard: int, field: str = "") -> None:
        check_held(self.node_id, shard, self.kv().shards, self.holds, field)

    def wait_applied(self, log_id: int, min_position: int, wait_ms: int) -> None:
        """Until this replica has applied `log_id` up to `min_position` (exclusive)."""
        if not min_position:
            return
        deadline = world.monotonic() + min(wait_ms, READ_WAIT_MS_MAX) / 1000
        with self.cond:
            while self.positions[log_id][0] < min_position:
                left = deadline - world.monotonic()
                if left <= 0:
                    raise Behind(f"replica {self.node_id} has applied log {log_id} up to "
                                 f"{self.positions[log_id][0]}, not {min_position}")
                self.cond.wait(left)

    def check_fresh(self, log_id: int, applied_ms: int, bound_ms: int) -> None:
        """A bounded read (record/staleness.py): Behind unless this replica has applied
        `log_id` up to a log time (`applied_ms`) recent enough by its own clock, and that
        clock is not in doubt."""
        doubt = self.clock_doubt(log_id)
        if doubt is not None:
            raise Behind(f"replica {self.node_id} serves no bounded read now: {doubt}")
        now = world.wall_ms()
        if not staleness.fresh_enough(applied_ms, now, bound_ms):
            raise Behind(f"replica {self.node_id} has applied log {log_id} up to log time "
                         f"{now - applied_ms} ms ago, not within {bound_ms} ms")

    def read_many(self, req: pb.ReadManyRequest) -> pb.ReadManyResponse:
        if req.log_id >= self.log_map().logs:  # `log add` may have given it since the map was read
            self.reread_log_map()
        m = self.log_map()
        if not 0 <= req.log_id < m.logs:
            raise BadRequest(f"log_id: log {req.log_id} carries no key-value data "
                             f"(logs 0..{m.logs - 1} do)")
        self.wait_applied(req.log_id, req.min_position, req.wait_ms)
        for i, r in enumerate(req.requests):
            if r.shard >= self.kv().shards or self.place_of(r.shard).log == req.log_id:
                continue
            if not m.may_carry(r.shard, req.log_id):  # a shard of another log, unless the map moved on
                self.reread_log_map()
                m = self.log_map()
                if not m.may_carry(r.shard, req.log_id):
                    raise BadRequest(f"requests[{i}].shard: {r.shard} is not on log {req.log_id}")
            checks.placed_in(self.place_of(r.shard).log, r.shard, req.log_id, f"requests[{i}].shard: ")
        return pb.ReadManyResponse(
            responses=[self.read(r, f"requests[{i}].") for i, r in enumerate(req.requests)])
