"""The items of one KV.Many call (a client's coalesced single-key operations) run as one
batch behind the coordinator, not one thread and one log append each:

* writes: through the one write path (coordinator/node.py `run_writes`, which runs a
  single write as a batch of one): every item's record built as its own call would build
  it, all records of one log in one Append; the plain puts on a first attempt answered at
  the log's acknowledgement, the others when a storage node answers;
* strong reads: one ReadIndex round per log for all of the call's reads of that log (the
  index asked after they all arrived bounds every write acknowledged before any of them),
  the logs' rounds at the same time; a read whose round failed goes through the log.

Each item keeps its own request id, deadline and outcome: one that fails (a bad key, a
record too large, its log unavailable, no answer in time) fails alone, as an Refusal in its
place. Pure batching: an item's outcome is what its own call would have given."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeAlias

from catalog.datasets import Dataset
from coordinator import limits
from coordinator.node import STRONG_READS, Coordinator, read_header
from midtown_pb import kv_pb2 as pb
from record import codec
from record.model import Op, OpResult
from runtime import world
from runtime.refusals import Refusal

Read: TypeAlias = tuple[Dataset, pb.RequestHeader, bytes, Op]  # dataset, header, partition key, a get

# The logs' ReadIndex rounds of one call at the same time (a round waits on Tail calls
# that run on the coordinator's own pool: not this one, so neither can starve the other).
_ROUNDS = world.Pool("many-round", limits.MANY_ROUND_THREADS)


def run_reads(c: Coordinator, reads: Sequence[Read],
              deadline_s: float) -> list[tuple[OpResult, int] | Refusal]:
    """Each strong read's (result, position), as Coordinator.strong_read returns it, or the
    Refusal that ended it."""
    out: list[tuple[OpResult, int] | Refusal | None] = [None] * len(reads)
    by_log: dict[int, list[tuple[int, pb.ReadRequest]]] = {}
    for i, (d, _, pkey, op) in enumerate(reads):
        try:
            log_id, req = c.read_request(d, pkey, op)
        except Refusal as e:
            out[i] = e
            continue
        by_log.setdefault(log_id, []).append((i, req))
    rounds = list(by_log.items())
    later = [_ROUNDS.submit(c.read_round, log_id, [r for _, r in items]) for log_id, items in rounds[1:]]
    answered = ([c.read_round(rounds[0][0], [r for _, r in rounds[0][1]])] if rounds else []) + [
        f.result() for f in later]
    through_log: list[int] = []
    for (_, items), answers in zip(rounds, answered):
        if answers is None:
            through_log.extend(i for i, _ in items)
            continue
        for (i, _), rr in zip(items, answers):
            out[i] = (codec.op_result_from_pb(rr.result), rr.position)
    if through_log:
        STRONG_READS.labels(path="log").inc(len(through_log))
        writes = [(d, read_header(h), pkey, [op]) for d, h, pkey, op in (reads[i] for i in through_log)]
        for i, r in zip(through_log, c.run_writes(writes, deadline_s)):
            out[i] = r if isinstance(r, Refusal) else (r.results[0], r.position)
    assert all(o is not None for o in out)
    return out  # type: ignore[return-value]
