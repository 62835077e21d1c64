"""Reclaiming the dedup table: which remembered outcomes can never matter again.

A record whose request id was seen on its shard within DEDUP_WINDOW_MS of log time
returns the first outcome (storage_node/apply.py); an entry older than that is ignored.
A shard's records all come through one log, whose timestamps never go backwards, so once
a node has applied that log up to log time T, every record it will ever apply there has a
time of at least T, and an entry written before T - DEDUP_WINDOW_MS is ignored by all of
them. Deleting it changes no outcome, whenever each replica does it: replicas reclaim on
their own, and their answers and digests (which do not cover the table) stay equal.

Entries are found through an index by log and log time (`keys.dedup_time_key`), written in
the same batch as the entry. The applier reclaims at most RECLAIM_BATCH_MAX entries per log
every RECLAIM_INTERVAL_S, inside its own batches, so a record that rewrites an id in the
same batch is never lost to a reclaim running beside it."""

from __future__ import annotations

from storage_node.apply import DEDUP_WINDOW_MS

RECLAIM_INTERVAL_S = 1.0
RECLAIM_BATCH_MAX = 5_000


def cutoff(applied_log_time_ms: int) -> int:
    """Entries of a log written before this log time are ignored by every record the node
    will still apply from that log."""
    return applied_log_time_ms - DEDUP_WINDOW_MS
