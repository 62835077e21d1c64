"""The ReadIndex rule (DESIGN.md, "Coordinators"), for logs whose segments live on
ensembles (log/ensemble.py): which replicas to ask, and what their answers allow. Pure:
the log client (LogClient.read_index, which the coordinator asks) uses it.

A read that arrived at time t may be served by a storage replica that has applied the
log through P, where P is at least the position of every entry acknowledged before t.
Ask, after t, the replicas of the log's last segment as the reader knows the metadata,
for their last stored position and the highest writer epoch they have seen. Then:

* Answers from a fence quorum of that segment's replicas (n - ack_quorum + 1) intersect
  the ack quorum of every entry acknowledged in it: the highest `last` among them covers
  them, and `first - 1` covers the sealed segments before it.
* A newer segment could hold acknowledged entries the answers miss. But the writer that
  opened the first newer segment fenced a fence quorum of this segment's replicas before
  it appended anything, so if it acknowledged anything before t, one of the answers shows
  its epoch, higher than the segment's: then the metadata is stale (`Stale`), and the
  reader reads it again and asks that segment's replicas.
* Metadata read after t (`fresh`) names every segment opened before t: no epoch check.

No segment yet, or too few answers: None (the caller reads through the log instead)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from log import limits
from log.metadata import LogMetadata


class TailReply(NamedTuple):
    last: int  # the replica's last stored position of the log (-1: none)
    epoch: int  # the highest writer epoch it has seen for the log
    clock_ms: int = 0  # the replica's wall clock when it answered (0: not said)


class Stale(Exception):
    """A replica has seen a writer newer than the metadata's last segment."""


def replicas_to_ask(meta: LogMetadata) -> tuple[int, ...]:
    seg = meta.last_segment
    return seg.replicas if seg is not None else ()


def read_index(meta: LogMetadata, replies: Mapping[int, TailReply], fresh: bool,
               ack_quorum: int = limits.ACK_QUORUM) -> int | None:
    """P from the replies of the last segment's replicas (others are ignored); Stale when
    `meta` was read before the read arrived (not `fresh`) and a reply shows a newer writer."""
    seg = meta.last_segment
    if seg is None or not enough(meta, replies, ack_quorum):
        return None
    got = [replies[r] for r in seg.replicas if r in replies]
    if not fresh and any(r.epoch > seg.epoch for r in got):
        raise Stale(f"log {meta.log_id}: a replica has seen an epoch above {seg.epoch}")
    return max([seg.first - 1, *(r.last for r in got)])


def enough(meta: LogMetadata, replies: Mapping[int, TailReply],
           ack_quorum: int = limits.ACK_QUORUM) -> bool:
    """Whether the replies already hold a fence quorum of the last segment's replicas."""
    seg = meta.last_segment
    return seg is not None and sum(1 for r in seg.replicas if r in replies) >= \
        limits.fence_quorum(len(seg.replicas), ack_quorum)
