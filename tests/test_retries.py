"""The SDK's one retry policy (midtown/retries.py), which Client and AsyncClient share: what
is retried, on which coordinator, how long it pauses, and that it ends by its deadline."""

from __future__ import annotations

import time

import grpc
import pytest

from midtown import errors
from midtown.retries import BACKOFF_MAX_S, Attempts
from midtown_pb import kv_pb2 as pb


class _Err(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode, details: str = "x") -> None:
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self) -> tuple:
        return ()


def _put() -> pb.PutRequest:
    return pb.PutRequest(header=pb.RequestHeader(dataset="d", request_id=b"r", first_attempt=True))


def test_an_unavailable_coordinator_is_left_and_a_retry_is_marked() -> None:
    a, req = Attempts("Put", retries=3, timeout_s=10), _put()
    assert a.start(req) > 9 and req.header.first_attempt
    switch, pause = a.failed(_Err(grpc.StatusCode.UNAVAILABLE))
    assert switch and 0 < pause <= 0.04
    a.start(req)
    assert not req.header.first_attempt and req.header.request_id == b"r"  # the same id, marked
    switch, _ = a.failed(_Err(grpc.StatusCode.DEADLINE_EXCEEDED))
    assert not switch  # a slow answer: the same coordinator again


def test_what_a_retry_cannot_cure_is_raised_at_once_and_the_last_failure_too() -> None:
    a = Attempts("Put", retries=2, timeout_s=10)
    a.start(_put())
    with pytest.raises(errors.InvalidArgument):
        a.failed(_Err(grpc.StatusCode.INVALID_ARGUMENT, "key: too long"))
    b = Attempts("Put", retries=1, timeout_s=10)
    for _ in range(2):
        b.start(_put())
        if b.attempt == 1:
            with pytest.raises(errors.MidtownError):
                b.failed(_Err(grpc.StatusCode.UNAVAILABLE))
        else:
            b.failed(_Err(grpc.StatusCode.UNAVAILABLE))


def test_pauses_back_off_to_a_second_and_never_past_the_deadline() -> None:
    a = Attempts("Get", retries=100, timeout_s=60)
    pauses = []
    for _ in range(12):
        a.start(_put())
        pauses.append(a.failed(_Err(grpc.StatusCode.UNAVAILABLE))[1])
    assert pauses[0] < pauses[3] and max(pauses) <= 2 * BACKOFF_MAX_S
    short = Attempts("Get", retries=100, timeout_s=0.05)
    short.start(_put())
    for _ in range(6):
        short.failed(_Err(grpc.StatusCode.UNAVAILABLE))
    assert short.failed(_Err(grpc.StatusCode.UNAVAILABLE))[1] <= 0.05
    time.sleep(0.06)
    with pytest.raises(errors.DeadlineExceeded, match="Get: no answer within the deadline"):
        short.start(_put())
