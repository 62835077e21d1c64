"""The log server of this process as the log client's link reaches it (the host layout,
coordinator/host.py): an Append to it is handed straight to its writer (the Append call's
own core, log/append.py, its outcome as a value) and a Tail answered by its replica, in the
caller's thread; a call to another server goes through the link this one wraps (gRPC)."""

from __future__ import annotations

from concurrent import futures

from log import append
from log import read_index as ri
from log.client_link import Answered, LogLink, PendingAppend
from log.node import Node
from runtime import inprocess, world


class ProcessLog:
    def __init__(self, node: Node, others: LogLink) -> None:
        self.node = node
        self.others = others

    def append(self, addr: str, log_id: int, payloads: list[bytes], timeout_s: float) -> PendingAppend:
        if addr != self.node.addr:
            return self.others.append(addr, log_id, payloads, timeout_s)
        inprocess.used("append")
        r = append.answer(self.node, log_id, payloads, timeout_s, hurry=False)
        return Answered(r if isinstance(r, append.AppendRefused) else
                        (r.first_position, r.count, r.timestamp_ms, r.epoch))

    def tail(self, addr: str, log_id: int) -> futures.Future[ri.TailReply]:
        if addr != self.node.addr:
            return self.others.tail(addr, log_id)
        inprocess.used("read_index")
        f: futures.Future[ri.TailReply] = world.future()
        f.set_result(self.node.tail_hurrying(log_id))
        return f
