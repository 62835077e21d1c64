"""The log server's Prometheus metrics (served by runtime/metrics.py; docs/operations.md)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

APPENDS = Counter("midtown_log_appended_entries_total", "Entries acknowledged to appenders, by log", ["log"])
APPEND_BATCH = Histogram("midtown_log_append_batch_entries", "Entries per replicated append batch",
                         buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000, 10000))
FSYNC = Histogram("midtown_log_fsync_seconds", "Time to make a replica's write batch durable",
                  buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5))
EPOCH = Gauge("midtown_log_writer_epoch", "The epoch of each log this server writes (0: not its writer)",
              ["log"])
COMMIT_LAG = Gauge("midtown_log_commit_lag_entries",
                   "Entries a writer has sent that a quorum has not acknowledged yet", ["log"])
PREFERENCE_YIELDS = Counter("midtown_log_preference_yields_total",
                            "Logs this server stopped writing for their preferred data center (log prefer), "
                            "by log",
                            ["log"])
ENSEMBLE_CHANGES = Counter("midtown_log_ensemble_changes_total",
                           "Open segments a writer moved off copies that stopped answering", ["log"])
