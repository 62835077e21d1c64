"""Appends to the log writers of this process, handed straight to them (the host layout,
coordinator/host.py): the LogClient's LocalAppends port. The Append call's own core
(log/append.py), its outcomes as values; a log this server does not write goes through
gRPC (the server answers with a redirect)."""

from __future__ import annotations

import grpc

from log import append
from log.client import AppendRefused, Placement
from log.node import Node
from runtime import inprocess


class NodeAppends:
    def __init__(self, node: Node) -> None:
        self.node = node

    def append(self, addr: str, log_id: int, payloads: list[bytes],
               timeout_s: float) -> Placement | AppendRefused | None:
        if addr != self.node.addr:
            return None
        try:
            r = append.append(self.node, log_id, payloads, timeout_s, hurry=False)
        except ValueError as e:  # a batch over a limit (BadRequest)
            return AppendRefused(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        if r is None or isinstance(r, AppendRefused):
            return r  # None: not writing it here, the server answers with a redirect
        inprocess.used("append")
        return r.first_position, r.count, r.timestamp_ms, r.epoch
