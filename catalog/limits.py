"""Bounds on what the catalog holds (a dataset's settings), and why. The coordinator
enforces them on requests too (coordinator/limits.py takes them from here)."""

# TTL: up to ten years, in milliseconds.
TTL_MS_MAX = 10 * 365 * 24 * 3600 * 1000
# Rate limits (requests per second): a dataset's is set when it is created.
RATE_LIMIT_MAX = 1_000_000
QUOTA_BYTES_MAX = 2**60  # a dataset's storage quota: 1 EiB at most
DATASET_NAME_MAX = 64
# A dataset's event-id settings: a year of log time, and ids per shard (each ~100 bytes
# with its index: 100 million is about 10 GB a shard).
DEDUP_WINDOW_MS_MAX = 366 * 24 * 3600 * 1000
DEDUP_MAX_IDS_MAX = 100_000_000
# Event ids (exactly-once ingestion, docs/exactly-once.md): a dataset's window and size cap
# when it sets none. Segment keeps four weeks of ids; a cap per shard keeps a burst of ids
# from taking a node down (the oldest go first).
EVENT_WINDOW_MS_DEFAULT = 28 * 24 * 3600 * 1000
EVENT_IDS_PER_SHARD_DEFAULT = 1_000_000
