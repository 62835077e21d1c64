"""Protobuf <-> core conversions, at the edge: the core never sees *_pb2 types."""

from __future__ import annotations

from log.entry import Entry
from log.messages import (
    LEASE_WAIT_MS_MAX,
    AddEntries,
    AddReply,
    Fence,
    FenceReply,
    ReadRange,
    ReadRangeReply,
    Result,
)
from log.seals import NONE, Tags
from midtown_pb import log_pb2 as pb
from runtime.refusals import BadRequest


def tags_to_pb(req: pb.AppendRequest, tags: Tags) -> pb.AppendRequest:
    """An Append's tags (log/seals.py) written into its request."""
    req.shards.extend(tags.shards)
    req.generations.extend(tags.generations)
    if tags.seal != NONE:
        req.seal.shard, req.seal.to, req.seal.generation = tags.seal, tags.to, tags.generation
    if tags.open != NONE:
        req.open.shard, req.open.generation = tags.open, tags.generation
    return req


def tags_from_pb(req: pb.AppendRequest) -> Tags:
    """An Append's tags as its request carries them; BadRequest naming the field at fault
    (log/append.py checks there is one shard per payload)."""
    seal, to = (req.seal.shard, req.seal.to) if req.HasField("seal") else (NONE, NONE)
    opens, generation = (req.open.shard, req.open.generation) if req.HasField("open") else (NONE, 0)
    if req.HasField("seal"):
        generation = req.seal.generation
    return Tags(tuple(req.shards), tuple(req.generations), seal, to, opens, generation)


def entry_to_pb(e: Entry) -> pb.Entry:
    return pb.Entry(position=e.position, epoch=e.epoch, timestamp_ms=e.timestamp_ms, payload=e.payload)


def entry_from_pb(m: pb.Entry) -> Entry:
    return Entry(m.position, m.epoch, m.timestamp_ms, m.payload)


def fence_to_pb(f: Fence) -> pb.FenceRequest:
    return pb.FenceRequest(log_id=f.log_id, epoch=f.epoch, segment_epoch=f.segment_epoch)


def fence_from_pb(m: pb.FenceRequest) -> Fence:
    if m.epoch < 1:
        raise BadRequest("epoch: must be >= 1")
    return Fence(m.log_id, m.epoch, m.segment_epoch)


def fence_reply_to_pb(r: FenceReply) -> pb.FenceResponse:
    return pb.FenceResponse(
        result=r.result.name, fenced_epoch=r.fenced_epoch, lac=r.lac, last=r.last,
        first=r.first, first_ts=r.first_ts, lease_wait_ms=r.lease_wait_ms,
    )


def fence_reply_from_pb(m: pb.FenceResponse) -> FenceReply:
    if m.lease_wait_ms > LEASE_WAIT_MS_MAX:  # a broken peer: no promise lasts that long
        raise BadRequest(f"lease_wait_ms: {m.lease_wait_ms}, no promise is longer than {LEASE_WAIT_MS_MAX}")
    return FenceReply(Result(m.result), m.fenced_epoch, m.lac, m.last, m.first, m.first_ts,
                      m.lease_wait_ms)


def add_to_pb(a: AddEntries) -> pb.AddEntriesRequest:
    return pb.AddEntriesRequest(
        log_id=a.log_id, epoch=a.epoch, segment_epoch=a.segment_epoch,
        entries=[entry_to_pb(e) for e in a.entries], lac=a.lac, lease_ms=a.lease_ms, trace=a.trace,
    )


def add_from_pb(m: pb.AddEntriesRequest) -> AddEntries:
    if m.epoch < 1:
        raise BadRequest("epoch: must be >= 1")
    return AddEntries(
        m.log_id, m.epoch, m.segment_epoch, tuple(entry_from_pb(e) for e in m.entries), m.lac,
        m.lease_ms, trace=m.trace,
    )


def add_reply_to_pb(r: AddReply) -> pb.AddEntriesResponse:
    return pb.AddEntriesResponse(result=r.result.name, fenced_epoch=r.fenced_epoch)


def add_reply_from_pb(m: pb.AddEntriesResponse) -> AddReply:
    return AddReply(Result(m.result), m.fenced_epoch)


def read_to_pb(r: ReadRange) -> pb.ReadRangeRequest:
    return pb.ReadRangeRequest(
        log_id=r.log_id, epoch=r.epoch, segment_epoch=r.segment_epoch, first=r.first, last=r.last
    )


def read_from_pb(m: pb.ReadRangeRequest) -> ReadRange:
    return ReadRange(m.log_id, m.epoch, m.segment_epoch, m.first, m.last)


def read_reply_to_pb(r: ReadRangeReply) -> pb.ReadRangeResponse:
    return pb.ReadRangeResponse(
        result=r.result.name, fenced_epoch=r.fenced_epoch,
        entries=[entry_to_pb(e) for e in r.entries], answered_last=r.answered_last,
        trunc_first=r.trunc_first, trunc_ts=r.trunc_ts,
    )


def read_reply_from_pb(m: pb.ReadRangeResponse) -> ReadRangeReply:
    return ReadRangeReply(
        Result(m.result), m.fenced_epoch, tuple(entry_from_pb(e) for e in m.entries),
        m.answered_last, m.trunc_first, m.trunc_ts,
    )
