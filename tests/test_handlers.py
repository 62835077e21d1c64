"""The one way a server's method ends (runtime/handlers.py), on a real gRPC server on
loopback: a Refusal becomes its code, "field: message" and trailers; a request that does
not parse is INVALID_ARGUMENT naming its type; any other exception is INTERNAL naming the
method, never gRPC's bare UNKNOWN; a stream refused between two messages ends with that
status after them."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kazoo.exceptions import ConnectionLoss

from midtown_pb import kv_pb2 as pb
from runtime import handlers
from runtime.refusals import BadRequest, Refusal

SERVICE = "test.Handlers"


def _ok(req: pb.GetRequest, ctx: Any) -> pb.GetResponse:
    return pb.GetResponse(found=bool(req.key.partition))


def _refuse(req: pb.GetRequest, ctx: Any) -> pb.GetResponse:
    raise Refusal(grpc.StatusCode.FAILED_PRECONDITION, "not now", (("midtown-refused", "why"),), field="key")


def _bad(req: pb.GetRequest, ctx: Any) -> pb.GetResponse:
    raise BadRequest("too long", field="key.local")


def _bug(req: pb.GetRequest, ctx: Any) -> pb.GetResponse:
    return {}["missing"]  # type: ignore[no-any-return]


def _zk_away(req: pb.GetRequest, ctx: Any) -> pb.GetResponse:
    raise ConnectionLoss()  # ZooKeeper's connection dropped under the method: expected


def _zk_away_late(req: pb.GetRequest, ctx: Any) -> pb.GetResponse:
    import time
    time.sleep(0.6)  # past the caller's deadline
    raise ConnectionLoss()


def _stream(req: pb.GetRequest, ctx: Any) -> Iterator[pb.GetResponse]:
    yield pb.GetResponse(found=True)
    yield pb.GetResponse(found=False)
    raise Refusal(grpc.StatusCode.OUT_OF_RANGE, "reclaimed", field="from")


def _echo(reqs: Iterator[pb.GetRequest], ctx: Any) -> Iterator[pb.GetResponse]:
    for r in reqs:
        yield pb.GetResponse(found=bool(r.key.partition))


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[grpc.Channel, list[tuple[str, str]]]]:
    seen: list[tuple[str, str]] = []

    def outcome(method: str, code: str) -> None:
        seen.append((method, code))
    methods = {name: handlers.unary(name, pb.GetRequest, fn, outcome=outcome)
               for name, fn in (("Ok", _ok), ("Refuse", _refuse), ("Bad", _bad), ("Bug", _bug),
                                ("ZkAway", _zk_away), ("ZkAwayLate", _zk_away_late))}
    methods["Stream"] = handlers.unary_stream("Stream", pb.GetRequest, _stream, outcome=outcome)
    methods["Echo"] = handlers.stream_stream("Echo", pb.GetRequest, _echo, outcome=outcome)
    s = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    s.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(SERVICE, methods)])
    port = s.add_insecure_port("127.0.0.1:0")
    s.start()
    ch = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield ch, seen
    finally:
        ch.close()
        s.stop(0)


def _unary(ch: grpc.Channel, method: str, body: bytes) -> Any:
    return ch.unary_unary(f"/{SERVICE}/{method}", request_serializer=lambda b: b,
                          response_deserializer=pb.GetResponse.FromString)(body, timeout=10)


def _status(ch: grpc.Channel, method: str, body: bytes) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as e:
        _unary(ch, method, body)
    return e.value


GET = pb.GetRequest(key=pb.Key(partition=b"p")).SerializeToString()


def test_each_ending_gets_its_status(server: tuple[grpc.Channel, list[tuple[str, str]]]) -> None:
    ch, seen = server
    assert _unary(ch, "Ok", GET).found
    e = _status(ch, "Refuse", GET)
    assert (e.code(), e.details()) == (grpc.StatusCode.FAILED_PRECONDITION, "key: not now")
    assert ("midtown-refused", "why") in tuple(e.trailing_metadata() or ())
    e = _status(ch, "Bad", GET)
    assert (e.code(), e.details()) == (grpc.StatusCode.INVALID_ARGUMENT, "key.local: too long")
    e = _status(ch, "Bug", GET)
    assert e.code() == grpc.StatusCode.INTERNAL and "Bug" in (e.details() or "")
    e = _status(ch, "Ok", b"\xff\xff\xff")
    assert (e.code(), e.details()) == (grpc.StatusCode.INVALID_ARGUMENT, "request: not a valid GetRequest")
    assert [s for s in seen if s[0] != "Ok"][:3] == [("Refuse", "FAILED_PRECONDITION"),
                                                     ("Bad", "INVALID_ARGUMENT"), ("Bug", "INTERNAL")]


def test_a_stream_refused_between_messages_ends_with_that_status(
        server: tuple[grpc.Channel, list[tuple[str, str]]]) -> None:
    ch, _ = server
    call = ch.unary_stream(f"/{SERVICE}/Stream", request_serializer=lambda b: b,
                           response_deserializer=pb.GetResponse.FromString)(GET, timeout=10)
    got = []
    with pytest.raises(grpc.RpcError) as e:
        for m in call:
            got.append(m.found)
    assert got == [True, False]
    assert (e.value.code(), e.value.details()) == (grpc.StatusCode.OUT_OF_RANGE, "from: reclaimed")


def test_a_stream_of_requests_ends_at_one_that_does_not_parse(
        server: tuple[grpc.Channel, list[tuple[str, str]]]) -> None:
    ch, _ = server
    call = ch.stream_stream(f"/{SERVICE}/Echo", request_serializer=lambda b: b,
                            response_deserializer=pb.GetResponse.FromString)(iter([GET, b"\xff\xff", GET]),
                                                                             timeout=10)
    got = []
    with pytest.raises(grpc.RpcError) as e:
        for m in call:
            got.append(m.found)
    assert got == [True]
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(body=st.binary(max_size=64), method=st.sampled_from(["Ok", "Refuse", "Bad", "Bug"]))
def test_no_request_ends_in_unknown(server: tuple[grpc.Channel, list[tuple[str, str]]], body: bytes,
                                    method: str) -> None:
    ch, _ = server
    try:
        _unary(ch, method, body)
    except grpc.RpcError as e:
        assert e.code() in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION,
                            grpc.StatusCode.INTERNAL), (e.code(), e.details())
        assert e.details()


def test_a_client_that_goes_away_is_no_error(server: tuple[grpc.Channel, list[tuple[str, str]]],
                                             caplog: pytest.LogCaptureFixture) -> None:
    """A stream of requests cancelled by its client (a writer's replication stream when the
    writer stops) ends the method: nothing to answer, and nothing logged as a failure."""
    import threading
    import time

    ch, _ = server
    release = threading.Event()

    def requests() -> Iterator[bytes]:
        yield GET
        release.wait(10)

    call = ch.stream_stream(f"/{SERVICE}/Echo", request_serializer=lambda b: b,
                            response_deserializer=pb.GetResponse.FromString)(requests(), timeout=10)
    with caplog.at_level("ERROR", logger="midtown.handlers"):
        assert next(call).found
        call.cancel()
        time.sleep(0.5)
        release.set()
        time.sleep(0.2)
    assert [r.getMessage() for r in caplog.records if r.name == "midtown.handlers"] == []


def test_an_expected_fault_is_unavailable_and_one_line(server: tuple[grpc.Channel, list[tuple[str, str]]],
                                                       caplog: pytest.LogCaptureFixture) -> None:
    """A fault of the world (ZooKeeper away, a peer refused: runtime/faults.py) ends the
    call UNAVAILABLE, for the client to retry, logged as one line without a traceback (a
    log server's Truncate logged one at ERROR when its session's connection dropped)."""
    ch, seen = server
    with caplog.at_level(logging.DEBUG, logger="midtown.handlers"):
        e = _status(ch, "ZkAway", GET)
    assert e.code() == grpc.StatusCode.UNAVAILABLE
    assert (e.details() or "").startswith("ZkAway: ConnectionLoss")
    assert ("ZkAway", "UNAVAILABLE") in seen
    warned = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert warned and all(r.exc_info is None for r in warned)


def test_an_expected_fault_after_the_caller_went_away_is_one_line(
        server: tuple[grpc.Channel, list[tuple[str, str]]], caplog: pytest.LogCaptureFixture) -> None:
    """A fault of the world raised once the call's deadline has passed (a log server's
    Truncate whose ZooKeeper session expired while its caller gave up: the simulation's
    seed 86) ends as one line, not as an exception gRPC logs with its traceback."""
    import time

    ch, seen = server
    with caplog.at_level(logging.INFO):
        with pytest.raises(grpc.RpcError) as e:
            ch.unary_unary(f"/{SERVICE}/ZkAwayLate", request_serializer=lambda b: b,
                           response_deserializer=pb.GetResponse.FromString)(GET, timeout=0.2)
        assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        deadline = time.monotonic() + 5
        while ("ZkAwayLate", "UNAVAILABLE") not in seen and time.monotonic() < deadline:
            time.sleep(0.05)
    assert ("ZkAwayLate", "UNAVAILABLE") in seen
    assert [r.getMessage() for r in caplog.records if r.exc_info is not None] == []
