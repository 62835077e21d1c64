"""Reads near the caller (docs/architecture.md, "Reads near the caller"): a bounded-staleness
read of a strong dataset, served by a replica in the caller's data center that has applied
the shard's log recently enough by its own clock (the rule: record/staleness.py), else
left to the caller to serve as a strong read (the writer's lease, or a ReadIndex round).
The request's fields are checked here, each refusal naming its field."""

from __future__ import annotations

import grpc

from catalog.datasets import Dataset
from coordinator.node import Coordinator
from coordinator.replicas import refused_by_all
from midtown_pb import kv_pb2 as pb
from record import codec, staleness
from record.model import Op
from runtime import world
from runtime.refusals import BadRequest, Refusal

Code = grpc.StatusCode

# A replica near the caller that does not answer within this share of the time left is
# passed over, the rest kept for the next one or for the strong read.
NEAR_TRY_SHARE = 0.5


def check_consistency(consistency: int, bound_ms: int, what: str) -> None:
    """A read's consistency and bound (`what`: the read, in messages)."""
    if consistency not in (pb.STRONG, pb.EVENTUAL, pb.BOUNDED):
        raise BadRequest(f"consistency: {consistency} is not one of STRONG (0), EVENTUAL (1), BOUNDED (2)")
    if consistency == pb.BOUNDED:
        if bound_ms <= 0:
            raise BadRequest(f"max_staleness_ms: a bounded {what} needs a bound above 0 ms")
        if bound_ms > staleness.MAX_STALENESS_MS:
            raise BadRequest(f"max_staleness_ms: {bound_ms} ms, the limit is {staleness.MAX_STALENESS_MS} "
                             "(a day)")
    elif bound_ms:
        raise BadRequest(f"max_staleness_ms: only a BOUNDED {what} takes a bound")


def strong_dataset(d: Dataset) -> None:
    """A bounded read is of a strong dataset's log."""
    if d.consistency == "eventual":
        raise Refusal(Code.FAILED_PRECONDITION, f"consistency: {d.name!r} is eventually consistent, its "
                      "reads are eventual (no log to bound them by); read it with consistency eventual")


def bounded_read(c: Coordinator, d: Dataset, dc: str, pkey: bytes, op: Op, bound_ms: int,
                 deadline_s: float) -> pb.ReadResponse | None:
    """`op` (a get or a scan) from a replica in data center `dc` fresh enough for `bound_ms`;
    None: none is (or none could be: a bound within the clocks' offset), and the caller
    serves it as a strong read in the time left."""
    if bound_ms <= 2 * staleness.MAX_CLOCK_OFFSET_MS:
        return None
    shard = d.shard_of(pkey, c.kv.shards)
    req = pb.ReadRequest(dataset=d.id, shard=shard, partition_key=pkey, op=codec.op_to_pb(op),
                         max_staleness_ms=bound_ms)
    end = world.monotonic() + deadline_s
    for addr in c.replicas.near(shard, dc):
        left = end - world.monotonic()
        if left <= 0:
            break
        try:
            return c.replicas.call(addr, "Read", req, left * NEAR_TRY_SHARE)  # type: ignore[no-any-return]
        except (grpc.RpcError, Refusal) as e:
            refused_by_all(e)  # behind, down or slow: the next, then the strong read
    return None
