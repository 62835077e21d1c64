"""Watch: every committed change of a strong dataset from the given positions (or from
now), per shard in log order, relayed from one replica of each shard (docs/api.md
"Watch"). The request is checked in checks.py; the streams come from
coordinator/replicas.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from catalog.datasets import Dataset
from coordinator import limits
from coordinator.checks import check_partition, check_watch
from coordinator.node import Coordinator
from coordinator.shard_reads import min_position, strong_only
from midtown_pb import kv_pb2 as pb
from runtime.refusals import Refusal


def watch(c: Coordinator, req: pb.WatchRequest, d: Dataset, deadline_s: float,
          active: Callable[[], bool]) -> Any:
    """The changes of `d`'s shards (or of the partitioning key's shard alone) while
    `active()`, until the request's duration or `deadline_s`."""
    strong_only(d, "changes are streamed of")
    shards = c.kv.shards
    starts = dict(getattr(req, "from"))
    only: int | None = None
    if req.HasField("partition_key"):
        check_partition(req.partition_key, "partition_key")
        only = d.shard_of(req.partition_key, shards)
    check_watch(req, starts, shards, only)
    sreq = pb.StorageWatchRequest(dataset=d.id,
                                  duration_ms=req.duration_ms or limits.WATCH_DURATION_MS_DEFAULT)
    if req.from_now:  # one ReadIndex round per log, for all the dataset's shards (its scope's)
        by_log: dict[int, int] = {}
        m = c.log_map
        for s in [only] if only is not None else d.shards(shards):
            lg = m.log_of(s)
            if lg not in by_log:
                by_log[lg] = min_position(c, lg)
            # in the shard's own order (a shard handed over: its stint's version base), of
            # the log named (a replica that takes it from another refuses)
            starts[s] = by_log[lg] + m.stint(s)[1]
            sreq.logs[s] = lg
    getattr(sreq, "from").update(starts)
    if only is not None:
        sreq.partition_key = req.partition_key
    # Each shard from the replica beside its log's writer where there is one (the host
    # layout): it applies as the writer commits, where the others' Read streams linger.
    try:
        return c.replicas.watch(sreq, deadline_s, active,
                                lambda shard: c.replicas.beside(c.logs.writer_addr(c.log_map.log_of(shard))))
    except Refusal:
        if req.from_now:
            c.refresh_log_map()  # (as for a scan)
        raise
