"""A strong dataset's shard read whole, for the Spark connector and the SDK's shard scans:
ScanShard (every key of one shard, in pages, from one replica's view at one log position,
a token going on in that view) and ShardSplits (the shard's keys cut into ranges of about
a size, each with a token). Strong: at a position at or after every write acknowledged
before the call (the log's ReadIndex). The requests are checked in checks.py; the calls
go to the replicas through coordinator/replicas.py."""

from __future__ import annotations

from typing import Any

import grpc

from catalog.datasets import Dataset
from coordinator import limits
from coordinator.checks import check_shard, check_shard_scan, scan_cursor
from coordinator.node import Coordinator
from midtown_pb import kv_pb2 as pb
from runtime.refusals import BadRequest, Refusal

Code = grpc.StatusCode


def strong_only(d: Dataset, what: str) -> None:
    if d.consistency == "eventual":
        raise Refusal(Code.FAILED_PRECONDITION, f"header.dataset: {d.name!r} is eventually consistent; "
                      f"{what} strong datasets")


def min_position(c: Coordinator, log_id: int) -> int:
    """The position a strong read of a shard of `log_id` must see: its ReadIndex, plus one."""
    idx = c.read_index(log_id)
    if idx is None:
        raise Refusal(Code.UNAVAILABLE, "the shard's log did not answer; retry")
    return idx + 1


def at_read_index(c: Coordinator, sreq: Any, consistency: int) -> None:
    """A strong scan's or split's position to see, of the log the map names for its shard
    (a replica that takes the shard from another refuses it: it was handed over); an
    eventual one's: none."""
    if consistency not in (pb.STRONG, pb.EVENTUAL):
        raise BadRequest(f"consistency: {consistency}; a shard scan is STRONG (0) or EVENTUAL (1)")
    if consistency == pb.STRONG:
        sreq.log_id = c.log_map.log_of(sreq.shard)
        sreq.min_position = min_position(c, sreq.log_id)


def scan_shard(c: Coordinator, req: pb.ScanShardRequest, d: Dataset, deadline_s: float) -> Any:
    """Every key of `d` in one shard, in pages; with a token, the scan goes on in the view
    it names (on the replica that holds it)."""
    strong_only(d, "a shard scan reads")
    check_shard(req.shard, c.kv.shards)
    cursor = scan_cursor(req.token, d.id, d.name, req.shard) if req.token else None
    check_shard_scan(req)
    sreq = pb.StorageScanShardRequest(dataset=d.id, shard=req.shard, wait_ms=2000,
                                      page=req.page or limits.SHARD_SCAN_PAGE_DEFAULT,
                                      max_bytes=req.max_bytes, cursor=req.token, arrow=req.arrow)
    if cursor is not None:
        return c.replicas.scan_shard(sreq, deadline_s, node=cursor.node)
    if req.HasField("partition_key"):
        sreq.partition_key = req.partition_key
    at_read_index(c, sreq, req.consistency)
    try:
        return c.replicas.scan_shard(sreq, deadline_s)
    except Refusal:
        c.refresh_log_map()  # (a replica may have refused it: the shard went to another log)
        raise


def shard_splits(c: Coordinator, req: pb.ShardSplitsRequest, d: Dataset, deadline_s: float) -> Any:
    """The shard's keys of `d` cut into ranges of about split_bytes, each with a token a
    ScanShard reads, all from one replica's view at one position."""
    strong_only(d, "a shard scan reads")
    check_shard(req.shard, c.kv.shards)
    sreq = pb.StorageShardSplitsRequest(dataset=d.id, shard=req.shard, wait_ms=2000,
                                        split_bytes=req.split_bytes or limits.SHARD_SPLIT_BYTES_DEFAULT)
    at_read_index(c, sreq, req.consistency)
    if req.HasField("partition_key"):
        sreq.partition_key = req.partition_key
    sreq.time_left_ms = max(1, int(deadline_s * 1000))  # a node reads the shard's keys no longer
    got = c.replicas.first_answer("ShardSplits", sreq, deadline_s, req.shard)
    if got is None:
        c.refresh_log_map()  # (as for a scan)
        raise Refusal(Code.UNAVAILABLE, "no storage node could split the shard; retry")
    return got
