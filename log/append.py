"""The Append call's core: a batch handed to this server's writer of a log, and its
outcome as a value, a redirect to the writer included. The gRPC service (log/server.py),
the in-process link (log/local.py, the host layout) and the simulator's network all answer
with it, so an append has the same checks and outcomes whichever way it came."""

from __future__ import annotations

from concurrent.futures import TimeoutError as FutureTimeout

import grpc

from log import zk as zkpaths
from log.driver import AppendResult, Busy, WriterDriver, WriterFailed
from log.entry import validate_batch
from log.node import Node
from log.seals import UNTAGGED, Sealed, Tags
from runtime import refusals, tracing
from runtime.refusals import BadRequest, Refusal


def append(node: Node, log_id: int, payloads: list[bytes], timeout_s: float,
           hurry: bool, tags: Tags = UNTAGGED) -> AppendResult | Refusal | None:
    """Append `payloads` with this server's writer of `log_id` and wait for the outcome,
    `timeout_s` at most; None when this server does not write the log now (the caller
    redirects, or goes through gRPC). BadRequest for a batch over a limit. With `hurry`,
    the log's lingering Read streams send the new entries at once (their coordinator, in
    another process, may wait for a replica's answer: log/linger.py). `tags`: each
    payload's shard, and whether the append seals or opens one (log/seals.py); an append
    with a record of a shard sealed here is refused whole (FAILED_PRECONDITION, SEALED)."""
    validate_batch(payloads)
    if tags.shards and len(tags.shards) != len(payloads):
        raise BadRequest(f"{len(tags.shards)} shards for {len(payloads)} payloads: name one per "
                         "payload (-1: none), or none at all", field="shards")
    d = node.writers.get(log_id)
    if d is None or d.failed.is_set():
        return None
    with tracing.span("log append", log=log_id, entries=len(payloads)):
        return _appended(node, d, log_id, payloads, timeout_s, hurry, tags)


def _appended(node: Node, d: WriterDriver, log_id: int, payloads: list[bytes], timeout_s: float,
              hurry: bool, tags: Tags) -> AppendResult | Refusal:
    try:
        fut = d.submit(payloads, tags)
    except Busy as e:
        return Refusal(grpc.StatusCode.RESOURCE_EXHAUSTED, f"{e}; retry later")
    except WriterFailed as e:  # not submitted: a retry through the new writer is safe
        return Refusal(grpc.StatusCode.UNAVAILABLE, f"log {log_id}: writer stopped ({e}); retry")
    try:
        r = fut.result(timeout=timeout_s)
    except WriterFailed as e:
        return Refusal(grpc.StatusCode.UNAVAILABLE, f"log {log_id}: outcome unknown, the writer "
                       f"stopped ({e}); retry through the new writer")
    except Sealed as e:  # nothing of it sequenced: sent where the shard went, it is safe
        return Refusal(grpc.StatusCode.FAILED_PRECONDITION, f"log {log_id}: {e}",
                       reason=refusals.SEALED)
    except FutureTimeout:
        return Refusal(grpc.StatusCode.DEADLINE_EXCEEDED, f"log {log_id}: outcome unknown")
    if hurry:
        node.lingering.hurry(log_id, r.first_position + r.count - 1)
    return r


def answer(node: Node, log_id: int, payloads: list[bytes], timeout_s: float,
           hurry: bool, tags: Tags = UNTAGGED) -> AppendResult | Refusal:
    """append(), or when this server does not write the log now, the refusal that sends
    the client on: the writer to ask (NOT_WRITER with its address), or none yet (NO_WRITER,
    UNAVAILABLE: an election or recovery is under way). A batch over a limit:
    INVALID_ARGUMENT."""
    try:
        r = append(node, log_id, payloads, timeout_s, hurry, tags)
    except BadRequest as e:  # a batch over a limit
        return e
    return r if r is not None else redirect(node, log_id)


def redirect(node: Node, log_id: int) -> Refusal:
    """Where an append to a log this server does not write should go."""
    try:
        w = zkpaths.read_writer(node.zk, log_id)
    except Exception:
        w = None
    if w is None or w["server"] == node.server_id:
        return Refusal(grpc.StatusCode.UNAVAILABLE,
                       f"log {log_id} has no writer right now (election or recovery under way); retry",
                       reason=refusals.NO_WRITER)
    return Refusal(grpc.StatusCode.FAILED_PRECONDITION,
                   f"log {log_id}: server {node.server_id} is not its writer; "
                   f"the writer is server {w['server']} at {w['addr']}",
                   redirect=w["addr"], reason=refusals.NOT_WRITER)
