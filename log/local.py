"""Appends to the log writers of this process, handed straight to them (the host layout,
coordinator/host.py): the LogClient's LocalAppends port. The same checks and outcomes
as the Append call (log/server.py), as values; a log this server does not write goes
through gRPC (the server answers with a redirect)."""

from __future__ import annotations

from concurrent.futures import TimeoutError as FutureTimeout

import grpc

from log.client import AppendRefused, Placement
from log.driver import Busy, WriterFailed
from log.entry import validate_batch
from log.node import Node
from runtime import inprocess


class NodeAppends:
    def __init__(self, node: Node) -> None:
        self.node = node

    def append(self, addr: str, log_id: int, payloads: list[bytes],
               timeout_s: float) -> Placement | AppendRefused | None:
        if addr != self.node.addr:
            return None
        d = self.node.writers.get(log_id)
        if d is None or d.failed.is_set():
            return None  # not writing it here: the server answers with a redirect
        try:
            validate_batch(payloads)
        except ValueError as e:
            return AppendRefused(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        inprocess.used("append")
        try:
            r = d.submit(payloads).result(timeout=timeout_s)
        except Busy as e:
            return AppendRefused(grpc.StatusCode.RESOURCE_EXHAUSTED, f"{e}; retry later")
        except WriterFailed as e:
            return AppendRefused(grpc.StatusCode.UNAVAILABLE,
                                 f"log {log_id}: outcome unknown, the writer stopped ({e})")
        except FutureTimeout:
            return AppendRefused(grpc.StatusCode.DEADLINE_EXCEEDED, f"log {log_id}: outcome unknown")
        return r.first_position, r.count, r.timestamp_ms, r.epoch
