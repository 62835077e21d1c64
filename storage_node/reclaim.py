"""Reclaiming space: which dedup entries and which expired values can never matter again.

A shard's records all come through one log, whose timestamps never go backwards, and a
node answers reads at the log time it has applied up to. So once a node has applied a log
up to log time T, every record it will still apply from that log, and every read of its
shards, is judged at a time of at least T:

* a request id seen within DEDUP_WINDOW_MS of log time returns the first outcome
  (storage_node/apply.py); an entry written before T - DEDUP_WINDOW_MS is ignored by all
  of them;
* a value that expired at or before T is invisible to all of them (reads, scans, CAS and
  increments treat it as absent).

Deleting either changes no outcome, whenever each replica does it, so replicas reclaim on
their own; digests chain the writes of records, not the stored state, so they stay equal.
One exception, harmless: a scan page skips at most 64 expired rows before it stops with a
cursor, so a replica that has not reclaimed yet may end a page earlier, with the same items
in the same order.

Both are found through indexes by log and time (`keys.dedup_time_key`, `keys.expiry_key`),
written in the same batch as what they index. The applier reclaims at most
RECLAIM_BATCH_MAX of each per log every RECLAIM_INTERVAL_S, inside its own batches, so
what a record writes again in the same batch is never lost to a reclaim beside it."""

from __future__ import annotations

from storage_node.apply import DEDUP_WINDOW_MS

RECLAIM_INTERVAL_S = 1.0
RECLAIM_BATCH_MAX = 5_000


def dedup_cutoff(applied_log_time_ms: int) -> int:
    """Dedup entries of a log written before this log time are ignored by every record
    the node will still apply from that log."""
    return applied_log_time_ms - DEDUP_WINDOW_MS


def expiry_cutoff(applied_log_time_ms: int) -> int:
    """Values of a log's shards that expire before this log time (at or before the applied
    one: `Stored.live_at`) are invisible to every later record and read."""
    return applied_log_time_ms + 1
