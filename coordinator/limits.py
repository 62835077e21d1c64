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
# A value: 960 KiB.
VALUE_BYTES_MAX = 960 * 1024
# Operations in one atomic batch (one record), and the bytes of their local keys and values
# (expected values included) together: a check-and-set of the largest value against the
# largest value under the longest local key is within it, and the record's envelope
# (partitioning key, dataset, request id, callback, a few bytes per operation) fits the
# rest of one log entry.
BATCH_OPS_MAX = 1000
BATCH_BYTES_MAX = 2 * VALUE_BYTES_MAX + LOCAL_KEY_BYTES_MAX
# One record: one log entry.
RECORD_BYTES_MAX = log_limits.PAYLOAD_BYTES_MAX
assert BATCH_BYTES_MAX + PARTITION_KEY_BYTES_MAX + BATCH_OPS_MAX * 32 + 64 * 1024 <= RECORD_BYTES_MAX
# A bulk write's share of one shard is cut into records of about this size (one row,
# however large, goes alone): records that apply and answer in a few milliseconds.
BULK_RECORD_BYTES = 480 * 1024
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

# Digests remembered per (log, shard, position) to compare the replicas' answers: a few
# seconds of records at full speed; the oldest are forgotten first.
DIGESTS_KEPT = 200_000
# How stale the coordinator's view of the registered storage nodes and log servers may be
# (ZooKeeper is read at most this often; a node that left is skipped on its first failure).
MEMBERS_CACHE_S = 1.0
# A strong read waits at a replica for it to apply up to the read index at most this long
# (it is usually there already: positions advance continuously), within the whole call's.
READ_APPLY_WAIT_MS = 500
READ_CALL_TIMEOUT_S = 2.0
# Read repair of an eventual value at a stale replica: in the background, given up after.
REPAIR_TIMEOUT_S = 5.0
# An eventual scan asks each replica for this many rows beyond the page, to leave room for
# tombstones and expired values that merging drops.
EVENTUAL_SCAN_SLACK = 65
# Threads: the client port's handlers, the callback port's (answers from storage nodes,
# each carrying many) and read repairs (ReadIndex's Tail calls: log/limits.py).
CLIENT_THREADS = 128
CALLBACK_THREADS = 16
REPAIR_THREADS = 32
# A coalesced call (KV.Many): at most this many items (the SDK sends at most
# midtown.coalescing.ITEMS_MAX). Its writes and strong reads run together
# (coordinator/many.py), the logs' ReadIndex rounds on MANY_ROUND_THREADS threads; items of
# eventual datasets, and eventual reads, run as their own calls on MANY_THREADS threads.
MANY_ITEMS_MAX = 1000
MANY_THREADS = 128
MANY_ROUND_THREADS = 16

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
# Bytes per message of a shard scan at most (a request may ask fewer; one item always goes).
SHARD_SCAN_BYTES_MAX = 16 << 20
# A shard split's size when the request says none (as the Cassandra connector's
# split.sizeInMB, 512 by default).
SHARD_SPLIT_BYTES_DEFAULT = 512 << 20

# A watch stream (KV.Watch) lasts this long by default, at most WATCH_DURATION_MS_MAX; the
# client then starts it again from the positions it has seen (docs/api.md "Watch").
WATCH_DURATION_MS_DEFAULT = 60_000
WATCH_DURATION_MS_MAX = 600_000
# Messages a watch relays ahead of a slow client, per storage node streaming to it.
WATCH_QUEUE_MAX = 64
