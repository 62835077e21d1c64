"""Every bound the log enforces, with the reason for it (TigerBeetle style: units last)."""

# Positions start here on a fresh log.
FIRST_POSITION = 0

# One payload: a storage-node record is usually small; 2 MiB holds the largest one (a
# check-and-set of the largest value against the largest value, coordinator/limits.py)
# while keeping one entry well under gRPC's message limit.
PAYLOAD_BYTES_MAX = 2 * 1024 * 1024

# One append call: a bounded batch keeps one replication message under GRPC_MESSAGE_BYTES_MAX.
BATCH_ENTRIES_MAX = 10_000
BATCH_BYTES_MAX = 8 * 1024 * 1024

# gRPC messages between all Midtown processes, and the options every process and client
# uses: defined with the transport (runtime/transport.py).
from runtime.transport import GRPC_MESSAGE_BYTES_MAX, GRPC_OPTIONS  # noqa: E402,F401

# Entries a writer has sent but not yet seen acknowledged by a quorum. Beyond this, appends
# wait: it bounds memory and the tail that a recovering writer has to read back.
INFLIGHT_ENTRIES_MAX = 50_000

# The longest a Read stream may ask its server to hold entries back to send them together
# (log/linger.py).
LINGER_MS_MAX = 1_000

# Entries a replication or recovery read message carries at most.
MESSAGE_ENTRIES_MAX = 2_000

# Logs per cluster (fixed at creation), and the number of log servers each log uses.
LOGS_DEFAULT = 16
LOGS_MAX = 4096
ENSEMBLE_SIZE = 3
ACK_QUORUM = 2  # of ENSEMBLE_SIZE; a write is durable once this many replicas synced it

# A writer resends entries a replica has not acknowledged after this long.
RESEND_INTERVAL_MS = 500

# ZooKeeper session (a writer that loses its session stops acknowledging; another server
# takes over once the session expires): defined with the connection (fleet/connect.py).
from fleet.connect import ZK_SESSION_TIMEOUT_S, ZK_TICK_MS  # noqa: E402,F401

# A non-preferred server waits this long before contesting a log with no writer, so that
# writers stay spread over the servers (each log has a preferred server).
ELECTION_BACKOFF_S = 0.5

# A writer whose log has taken no append for this long appends a time mark (an entry with
# an empty payload): the log's time, by which storage nodes judge expiry, then moves on a
# quiet cluster too, so that a value is never read more than about this long past its TTL.
TIME_MARK_IDLE_MS = 1000

# Replica-to-replica calls.
REPLICA_RPC_TIMEOUT_S = 2.0

# A recovering writer gives up (and tries again from scratch) after this long.
RECOVERY_TIMEOUT_S = 10.0

# AddEntries messages one Replicate call carries at most (a writer's outlet sends one per
# log with entries queued, so at most one per log; far fewer in practice).
REPLICATE_MESSAGES_MAX = LOGS_MAX

# Entries one Read stream message carries at most.
READ_BATCH_ENTRIES_MAX = 1_000


def fence_quorum(ensemble: int, ack_quorum: int) -> int:
    """Replicas a new writer must fence so that the old writer can never again gather an
    ack quorum: with fewer than `ack_quorum` unfenced replicas left, no append completes."""
    assert 0 < ack_quorum <= ensemble
    return ensemble - ack_quorum + 1


# Epochs and positions a replica accepts: far beyond what a cluster reaches (an epoch per
# election, a position per entry), and low enough that epoch + 1, position + 1 and a range's
# end fit the 64-bit fields of every message. A request past them (only a broken or hostile
# peer sends one) is refused before it can fence a replica out of reach of any writer.
EPOCH_MAX = 2**62
POSITION_MAX = 2**62

# ReadIndex rounds (LogClient.read_index): each replica's Tail call, and the wait for a
# fence quorum of them (a replica slower than this is passed over: another one answers);
# the Tail calls in flight at once, per process; how stale a client's view of the
# registered log servers may be (ZooKeeper read at most this often).
TAIL_CALL_TIMEOUT_S = 1.0
TAIL_QUORUM_WAIT_S = 1.5
TAIL_THREADS = 16
SERVERS_CACHE_S = 1.0

