"""A storage node's reads, of its own state: a get or a scan as of the position it has
applied (waiting, briefly, to reach the position a strong read needs), batches of them, a
shard of one dataset from one log position, and a whole-state checkpoint for a peer that
bootstraps. storage_node/node.py builds one over its store and positions."""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterator

import grpc
from rocksdict import Checkpoint, Options, Rdict

from catalog import registry
from catalog.routing import check_shard, log_of
from log.rocks_store import bounded_items
from midtown_pb import kv_pb2 as pb
from runtime.refusals import Refusal
from storage_node import codec, keys, shard_copy
from storage_node.apply import apply
from storage_node.limits import READ_WAIT_MS_MAX, SHARD_SCAN_PAGE_MAX, SHARD_SCAN_ROWS_MAX
from storage_node.model import Record
from storage_node.store import BatchView, NodeStore


class Behind(Exception):
    """This replica has not applied far enough for the read yet."""


def _items(db: Rdict, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
    return bounded_items(db, prefix, keys.prefix_end(prefix))


def check_held(node_id: int, shard: int, shards: int, holds: Callable[[int], bool],
               field: str = "") -> None:
    """ValueError for a shard the cluster does not have; Behind for one this node does not
    hold (catalog/replica_sets.py): another node may answer."""
    check_shard(shard, shards, field)
    if not holds(shard):
        raise Behind(f"storage node {node_id} does not hold shard {shard}")


class Reads:
    def __init__(self, node_id: int, store: NodeStore, data_dir: str, commit_lock: threading.Lock,
                 cond: threading.Condition, positions: dict[int, tuple[int, int]],
                 kv: Callable[[], registry.KvTopology], kv_logs: int,
                 holds: Callable[[int], bool], scan_rows_max: int = SHARD_SCAN_ROWS_MAX) -> None:
        """`positions`: the node's (next position, log time) per log, updated by its applier
        under `commit_lock`, which notifies `cond`; `holds(shard)`: whether this node holds
        a shard (catalog/replica_sets.py)."""
        self.node_id = node_id
        self.store = store
        self.data_dir = data_dir
        self.commit_lock = commit_lock
        self.cond = cond
        self.positions = positions
        self.kv = kv
        self.kv_logs = kv_logs
        self.holds = holds
        self.scan_rows_max = scan_rows_max

    def read(self, req: pb.ReadRequest, field: str = "") -> pb.ReadResponse:
        """A read of this replica's current state, expiry judged by the log time it has
        applied up to. ValueError names a bad field; Behind: not applied far enough yet."""
        self._check_held(req.shard, field)
        if req.op.WhichOneof("op") not in ("get", "scan"):
            raise ValueError(f"{field}op: only get and scan read a replica")
        log_id = log_of(req.shard, self.kv_logs)
        self.wait_applied(log_id, req.min_position, req.wait_ms)
        pos, ts = self.positions[log_id]
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
        with self.commit_lock:
            self.store.sync()
            Checkpoint(self.store.db).create_checkpoint(path)
        db = Rdict(path, Options(raw_mode=True))
        try:
            yield db
        finally:
            db.close()
            shutil.rmtree(path, ignore_errors=True)

    def shard_copy(self, req: pb.SnapshotRequest) -> tuple[int, int, Iterator[tuple[bytes, bytes]]]:
        """A copy of one shard this node holds, for a shard move's destination: (the log
        position it stands at, the log time there, its keys and values), from one
        checkpoint taken once the shard's log is applied up to req.min_position. The caller
        reads the pairs before it does anything else (the checkpoint goes with them)."""
        self._check_held(req.shard)
        log_id = log_of(req.shard, self.kv_logs)
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
        """One dataset's live keys in one shard, all from the state at one log position
        (said in every message), `req.page` per message; at least one message."""
        self._check_held(req.shard)
        if not 1 <= req.page <= SHARD_SCAN_PAGE_MAX:
            raise ValueError(f"page: {req.page}, must be between 1 and {SHARD_SCAN_PAGE_MAX}")
        log_id = log_of(req.shard, self.kv_logs)
        self.wait_applied(log_id, req.min_position, req.wait_ms)
        prefix = keys.dataset_shard_prefix(req.shard, req.dataset)
        rows: list[tuple[bytes, bytes]] = []
        with self.commit_lock:
            pos, ts = self.positions[log_id]
            for kv in self.store.under(prefix):
                rows.append(kv)
                if len(rows) > self.scan_rows_max:
                    raise Refusal(grpc.StatusCode.FAILED_PRECONDITION,
                                  f"{req.shard} holds more than {self.scan_rows_max} keys of this "
                                  "dataset; a scan of it is refused (use more shards)", field="shard")
        return self._shard_pages(rows, len(prefix), pos, ts, req.page)

    @staticmethod
    def _shard_pages(rows: list[tuple[bytes, bytes]], prefix_len: int, pos: int, ts: int,
                     page: int) -> Iterator[pb.ScanShardResponse]:
        items: list[pb.ShardItem] = []
        for k, v in rows:
            s = keys.decode_stored(v)
            if not s.live_at(ts):
                continue
            pkey, lkey = keys.split_value_key(k, prefix_len)
            items.append(pb.ShardItem(partition_key=pkey, local_key=lkey, value=codec.stored_to_pb(s)))
            if len(items) >= page:
                yield pb.ScanShardResponse(items=items, position=pos)
                items = []
        yield pb.ScanShardResponse(items=items, position=pos)

    def _check_held(self, shard: int, field: str = "") -> None:
        check_held(self.node_id, shard, self.kv().shards, self.holds, field)

    def wait_applied(self, log_id: int, min_position: int, wait_ms: int) -> None:
        """Until this replica has applied `log_id` up to `min_position` (exclusive)."""
        if not min_position:
            return
        deadline = time.monotonic() + min(wait_ms, READ_WAIT_MS_MAX) / 1000
        with self.cond:
            while self.positions[log_id][0] < min_position:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise Behind(f"replica {self.node_id} has applied log {log_id} up to "
                                 f"{self.positions[log_id][0]}, not {min_position}")
                self.cond.wait(left)

    def read_many(self, req: pb.ReadManyRequest) -> pb.ReadManyResponse:
        if not 0 <= req.log_id < self.kv_logs:
            raise ValueError(f"log_id: log {req.log_id} carries no key-value data "
                             f"(logs 0..{self.kv_logs - 1} do)")
        self.wait_applied(req.log_id, req.min_position, req.wait_ms)
        for i, r in enumerate(req.requests):
            if r.shard < self.kv().shards and log_of(r.shard, self.kv_logs) != req.log_id:
                raise ValueError(f"requests[{i}].shard: {r.shard} is not on log {req.log_id}")
        return pb.ReadManyResponse(
            responses=[self.read(r, f"requests[{i}].") for i, r in enumerate(req.requests)])
