"""Bounds a storage node keeps, and why. (Its tunable intervals are Settings,
storage_node/settings.py; a dataset's bounds are the catalog's, catalog/limits.py.)"""

# Answers to a coordinator: the replicas of a shard that answer each record (routing
# chooses them, catalog/routing.py): two, so that one slow or paused replica delays nobody.
CALLBACK_REPLICAS = 2
# A record that a storage node in its coordinator's process answers (Record.answered_beside):
# the other answering replicas answer one in this many (by log position), so that their
# shard digests are still compared with the answering node's, at a sixteenth of the calls.
DIGEST_SAMPLE = 16
# Eventual values one LwwRead scan or LwwRange page returns at most.
LWW_PAGE_MAX = 10_000
# Health: a node more than this many entries behind a log's writer is still catching up
# (NOT_SERVING); its lag is measured every LAG_INTERVAL_S.
HEALTH_LAG_MAX = 1_000
LAG_INTERVAL_S = 2.0
# Entries applied and written together at most.
APPLY_BATCH_ENTRIES_MAX = 5_000
# Bytes of keys and values per message of a shard scan, unless the request says
# (storage_node/views.py holds the state a scan pages through).
SHARD_SCAN_BYTES_DEFAULT = 1 << 20
# Rows per message of a shard scan at most (the coordinator's default is 1,000).
SHARD_SCAN_PAGE_MAX = 10_000
# How long a read waits at most for this replica to apply up to the position it needs.
READ_WAIT_MS_MAX = 5_000
# Counting what each dataset stores reads every key of the node (storage_node/usage.py):
# a count rests between pieces so as to take at most USAGE_DUTY of a core while it runs,
# over at most USAGE_SPREAD_S (a node holding so much that it would take longer rests
# less: measured, a count of a few million keys in one burst took every core of a
# three-node machine for seconds, and an ingestion through Spark caught in it ran at
# two thirds of its speed); a node holding much also counts less often than
# Settings.usage_interval_s, so that counting takes at most USAGE_DUTY of the time, and
# at least every USAGE_INTERVAL_MAX_S after the last count ended. A report, dated when its
# count began, is about 2 * USAGE_SPREAD_S + USAGE_INTERVAL_MAX_S (100 s) old at most when
# the next comes (a count busier than the last runs a little past its spread), within the
# coordinators' memory of the writes they let in (coordinator/quotas.py, 120 s).
USAGE_DUTY = 0.05
USAGE_SPREAD_S = 20.0
USAGE_INTERVAL_MAX_S = 60.0
# Results queued for one coordinator, and sent in one call at most (storage_node/callbacks.py).
CALLBACK_BATCH_MAX = 5000
CALLBACK_QUEUE_MAX = 100_000  # beyond it the oldest are dropped: their callers time out and retry
# A dataset's id in a request (its name and incarnation, `name#3`): the key layout keeps its
# length in one byte (storage_node/keys.py). The catalog's names are far shorter (64
# characters and the incarnation); a longer one comes only from a broken or hostile caller.
DATASET_ID_BYTES_MAX = 255
