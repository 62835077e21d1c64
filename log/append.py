"""The Append call's core: a batch handed to this server's writer of a log, and its
outcome as a value. The gRPC service (log/server.py) and the in-process port (log/local.py,
the host layout) both answer with it, so an append has the same checks and outcomes
whichever way it came."""

from __future__ import annotations

from concurrent.futures import TimeoutError as FutureTimeout

import grpc

from log.client import AppendRefused
from log.driver import AppendResult, Busy, WriterFailed
from log.entry import validate_batch
from log.node import Node


def append(node: Node, log_id: int, payloads: list[bytes], timeout_s: float,
           hurry: bool) -> AppendResult | AppendRefused | None:
    """Append `payloads` with this server's writer of `log_id` and wait for the outcome,
    `timeout_s` at most; None when this server does not write the log now (the caller
    redirects, or goes through gRPC). BadRequest for a batch over a limit. With `hurry`,
    the log's lingering Read streams send the new entries at once (their coordinator, in
    another process, may wait for a replica's answer: log/linger.py)."""
    validate_batch(payloads)
    d = node.writers.get(log_id)
    if d is None or d.failed.is_set():
        return None
    try:
        fut = d.submit(payloads)
    except Busy as e:
        return AppendRefused(grpc.StatusCode.RESOURCE_EXHAUSTED, f"{e}; retry later")
    except WriterFailed as e:  # not submitted: a retry through the new writer is safe
        return AppendRefused(grpc.StatusCode.UNAVAILABLE, f"log {log_id}: writer stopped ({e}); retry")
    try:
        r = fut.result(timeout=timeout_s)
    except WriterFailed as e:
        return AppendRefused(grpc.StatusCode.UNAVAILABLE, f"log {log_id}: outcome unknown, the writer "
                             f"stopped ({e}); retry through the new writer")
    except FutureTimeout:
        return AppendRefused(grpc.StatusCode.DEADLINE_EXCEEDED, f"log {log_id}: outcome unknown")
    if hurry:
        node.lingering.hurry(log_id, r.first_position + r.count - 1)
    return r
