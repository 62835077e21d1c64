"""Bounds a coordinator enforces on requests, and why."""

from catalog.limits import (  # noqa: F401 (a dataset's settings: the catalog's bounds)
    DATASET_NAME_MAX,
    DEDUP_MAX_IDS_MAX,
    DEDUP_WINDOW_MS_MAX,
    QUOTA_BYTES_MAX,
    RATE_LIMIT_MAX,
    TTL_MS_MAX,
)
from log import limits as log_limits

# Keys: partitioning keys name a tenant's entity (a user id, a device); local keys a field
# or a row under it. Small keys keep every record and every scan page small.
PARTITION_KEY_BYTES_MAX = 1024
LOCAL_KEY_BYTES_MAX = 4096
# A value, with its record envelope, must fit one log entry.
VALUE_BYTES_MAX = log_limits.PAYLOAD_BYTES_MAX - 64 * 1024
# Operations in one atomic batch (one record).
BATCH_OPS_MAX = 1000
BATCH_BYTES_MAX = log_limits.PAYLOAD_BYTES_MAX - 64 * 1024
# Scan pages.
SCAN_LIMIT_DEFAULT = 100
SCAN_LIMIT_MAX = 1000
REQUEST_ID_BYTES_MAX = 64
# Every client connection gets the coordinator's --client-rate-limit (requests per second).
CLIENT_RATE_LIMIT_DEFAULT = 5_000
# Requests a coordinator holds while waiting for the log or a storage node.
PENDING_MAX = 20_000
# How long a coordinator waits for a storage node's answer when the client set no deadline.
DEFAULT_DEADLINE_S = 10.0

# Records whose answers a coordinator still takes (request id -> log, shard): the answers
# of every replica arrive within seconds; at 20,000 requests/s this covers 10 s.
SENT_RECORDS_MAX = 200_000

# A bulk write (WriteMany): groups per call, and bytes per event id. A few thousand rows per
# call is what the Spark connector sends; the bound keeps one call's records and answers
# well under the gRPC message limit.
WRITE_MANY_GROUPS_MAX = 20_000
EVENT_ID_BYTES_MAX = 256
# Rows per streamed message of a shard scan (ScanShard).
SHARD_SCAN_PAGE_DEFAULT = 1_000
SHARD_SCAN_PAGE_MAX = 10_000
