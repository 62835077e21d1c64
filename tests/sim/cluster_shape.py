"""The whole cluster's shape in the seeded simulation (tests/sim/nodes.py): its storage
nodes, shards and logs, the coordinator's address, and the applications' writes that the
end checks (tests/sim/end_checks.py) hold the nodes to."""

from __future__ import annotations

from dataclasses import dataclass, field

from fleet import failure_domains
from fleet.failure_domains import Domain
from record.model import Incr, Record

SHARDS = 6
NODES = (0, 1, 2, 3)
REPLICAS = 3
LOGS = 2  # key-value logs: shard s's records go to log s % LOGS (catalog/routing.py)
MACHINES = 3  # storage node n runs on machine n % MACHINES: nodes 0 and 3 share one
NODE_MACHINES = failure_domains.lookup({n: Domain(f"m{n % MACHINES}") for n in NODES})
COORDINATOR = "sim-coordinator:0"  # its address: the records' callback, the SDK's
PKEYS = [b"k%d" % i for i in range(10)]


@dataclass
class Write:
    record: Record  # its operations, partitioning key and shard
    request_ids: list[bytes] = field(default_factory=list)  # what the SDK sent it under
    acked: bool = False  # its client had its result
    done_at: float | None = None  # when


def counted(w: Write, i: int) -> bool:
    """Whether write `i` increments its own key, n<i> (a check-and-set alone does not)."""
    return any(isinstance(op, Incr) and op.local_key == b"n%d" % i for op in w.record.ops)
