"""A log client asks every log server's Status at once (log/client_link.py GrpcLog
statuses): a storage node starting while servers do not answer (a data center lost, its
servers still registered) waits one call's timeout for all of them, not one per server."""

from __future__ import annotations

import threading
from concurrent import futures
from typing import Any

import grpc

from log.client_link import GrpcLog, one_by_one
from midtown_pb import log_pb2 as pb
from midtown_pb import log_pb2_grpc
from runtime.refusals import Refusal

CALLS = 3


class _Status(log_pb2_grpc.LogServicer):
    """Answers a Status only once CALLS of them are in at the same time (within 4 s, below
    the client's 5 s timeout): asked one after another, the first waits past it."""

    def __init__(self) -> None:
        self.together = threading.Barrier(CALLS, timeout=4)

    def Status(self, request: pb.StatusRequest, context: Any) -> pb.StatusResponse:
        try:
            self.together.wait()
        except threading.BrokenBarrierError:
            context.abort(grpc.StatusCode.UNAVAILABLE, "asked alone")
        return pb.StatusResponse(server_id=7, logs=[pb.LogStatus(log_id=0, first_position=3,
                                                                 last_position=9)])


def test_every_servers_status_is_asked_at_once() -> None:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=CALLS + 1))
    log_pb2_grpc.add_LogServicer_to_server(_Status(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        link = GrpcLog()
        got = link.statuses([f"127.0.0.1:{port}"] * CALLS)
        assert not [g for g in got if isinstance(g, Refusal)], got
        assert [(s.log_id, s.first, s.last) for g in got for s in g] == [(0, 3, 9)] * CALLS  # type: ignore[union-attr]
        # ... and a server that is not there is a Refusal in its place, the others answered
        closed = link.statuses(["127.0.0.1:1"])
        assert isinstance(closed[0], Refusal)
    finally:
        server.stop(None)


def test_a_backend_that_cannot_ask_at_once_asks_one_after_another_in_order() -> None:
    class Link:
        def __init__(self) -> None:
            self.asked: list[str] = []

        def status(self, addr: str) -> list[Any]:
            self.asked.append(addr)
            if addr == "b":
                raise Refusal(grpc.StatusCode.UNAVAILABLE, "b: down")
            return [addr]
    link = Link()
    got = one_by_one(link, ["a", "b", "c"])  # type: ignore[arg-type]
    assert link.asked == ["a", "b", "c"] and got[0] == ["a"] and got[2] == ["c"]
    assert isinstance(got[1], Refusal)
