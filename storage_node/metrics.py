"""The storage node's Prometheus metrics (served by runtime/metrics.py; docs/operations.md)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

APPLIED = Counter("midtown_storage_applied_records_total",
                  "Log records applied to this node's shards, by log", ["log"])
TAILED = Counter("midtown_storage_tailed_entries_total",
                 "Log entries read in order (records of any shard, and time marks), by log", ["log"])
POSITION = Gauge("midtown_storage_position", "The next position to apply, by log", ["log"])
LAG = Gauge("midtown_storage_lag_entries", "Entries the log's writer holds beyond what this node applied",
            ["log"])
LAG_MS = Gauge("midtown_storage_lag_ms",
               "How far behind its log's writer this replica is in log time: the writer's clock when it "
               "last answered, less the stamp of the last entry applied (0 when none is missing), by log",
               ["log"])
DIVERGED = Gauge("midtown_storage_diverged_shards",
                 "Shards whose digest differs from a peer's at the same position (last comparison)")
EVENT_IDS = Gauge("midtown_storage_event_ids", "Event ids held (the dedup table), by dataset", ["dataset"])
ANSWERS = Counter("midtown_storage_answers_total",
                  "Results sent to the coordinators that wait on them (not those in this process), by log",
                  ["log"])
WATCH_STREAMS = Counter("midtown_storage_watch_streams_total",
                        "Watch streams this node served (a coordinator relays each to its client)")
