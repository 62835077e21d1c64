"""Calls over one long-lived stream (runtime/call_stream.py), against a real gRPC server in
this process whose Replica.ReplicateStream handler the test controls: answers come in
turn, a refusal or a hang ends the stream with StreamFailed, and a hung answer is cancelled
by the watchdog's rule once overdue (the stream's timeout, or the call's own) instead of
holding its caller forever."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent import futures

import grpc
import pytest

from midtown_pb import log_pb2 as pb
from midtown_pb import log_pb2_grpc
from runtime.call_stream import CallStream, StreamFailed, cancel_overdue

HANG = 7  # a request with this log id is never answered
REFUSE = 8  # ... ends the stream with INVALID_ARGUMENT


class _Replica(log_pb2_grpc.ReplicaServicer):
    def __init__(self) -> None:
        self.release = threading.Event()

    def ReplicateStream(self, requests: Iterator[pb.ReplicateRequest],
                        ctx: grpc.ServicerContext) -> Iterator[pb.ReplicateResponse]:
        for req in requests:  # answers with fenced_epoch = the entries' count, to tell them apart
            log_id = req.requests[0].log_id
            if log_id == HANG:
                self.release.wait(30)
            if log_id == REFUSE:
                ctx.abort(grpc.StatusCode.INVALID_ARGUMENT, "requests[0]: refused")
            yield pb.ReplicateResponse(responses=[
                pb.AddEntriesResponse(result=pb.OK, fenced_epoch=len(r.entries)) for r in req.requests])


@pytest.fixture
def replica() -> Iterator[tuple[_Replica, log_pb2_grpc.ReplicaStub]]:
    servicer = _Replica()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    log_pb2_grpc.add_ReplicaServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield servicer, log_pb2_grpc.ReplicaStub(channel)
    finally:
        servicer.release.set()
        channel.close()
        server.stop(0)


def _req(log_id: int, entries: int = 1) -> pb.ReplicateRequest:
    return pb.ReplicateRequest(requests=[pb.AddEntriesRequest(
        log_id=log_id, entries=[pb.Entry(position=i) for i in range(entries)])])


def test_each_request_gets_its_own_answer_in_turn(replica: tuple[_Replica, log_pb2_grpc.ReplicaStub]) -> None:
    stream = CallStream(replica[1].ReplicateStream, timeout_s=5)
    for n in (3, 1, 4, 1, 5):
        assert stream.call(_req(0, n)).responses[0].fenced_epoch == n
    stream.close()
    with pytest.raises(StreamFailed):
        stream.call(_req(0))


def test_a_refused_request_ends_the_stream_with_its_status(
        replica: tuple[_Replica, log_pb2_grpc.ReplicaStub]) -> None:
    stream = CallStream(replica[1].ReplicateStream, timeout_s=5)
    with pytest.raises(StreamFailed) as e:
        stream.call(_req(REFUSE))
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert stream.closed
    # The next batch opens a new stream, which works.
    assert CallStream(replica[1].ReplicateStream, timeout_s=5).call(_req(0, 2)).responses[0].fenced_epoch == 2


def test_an_overdue_answer_is_cancelled_not_waited_for(
        replica: tuple[_Replica, log_pb2_grpc.ReplicaStub]) -> None:
    timeout_s = 0.5
    stream = CallStream(replica[1].ReplicateStream, timeout_s=timeout_s)
    assert stream.call(_req(0)).responses[0].fenced_epoch == 1
    assert not stream.overdue(time.monotonic() + 60)  # nothing unanswered
    failed: list[StreamFailed] = []

    def call() -> None:
        try:
            stream.call(_req(HANG))
        except StreamFailed as e:
            failed.append(e)

    t0 = time.monotonic()
    caller = threading.Thread(target=call)
    caller.start()
    # The watchdog's rule, as log/peers.py runs it: nothing is cancelled before the
    # deadline, the hung stream is once past it.
    while not stream.overdue(time.monotonic()):
        assert cancel_overdue([stream], time.monotonic()) == 0
        time.sleep(0.05)
    assert time.monotonic() - t0 >= timeout_s
    assert cancel_overdue([stream], time.monotonic()) == 1
    caller.join(10)
    assert not caller.is_alive(), "the outlet is still waiting on a cancelled stream"
    assert len(failed) == 1 and failed[0].code == grpc.StatusCode.CANCELLED
    assert stream.closed


def test_a_call_may_set_its_own_deadline(replica: tuple[_Replica, log_pb2_grpc.ReplicaStub]) -> None:
    stream = CallStream(replica[1].ReplicateStream, timeout_s=60)
    caller = threading.Thread(target=lambda: pytest.raises(StreamFailed, stream.call, _req(HANG), 0.3))
    caller.start()
    time.sleep(0.1)
    assert not stream.overdue(time.monotonic())
    assert stream.overdue(time.monotonic() + 0.3)  # its own 0.3 s, not the stream's 60
    stream.close()
    caller.join(10)
    assert not caller.is_alive()
