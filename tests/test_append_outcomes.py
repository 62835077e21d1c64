"""log/append.py, the Append call's core that the gRPC service, the in-process link and
the simulator's network answer with: each way a writer can answer becomes the same
outcome, a redirect included, and the in-process link (log/local.py) gives it as a value
for the server of its process and hands a call to another server to the link it wraps."""

from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

import grpc
import pytest

from log import append
from log.client_link import Answered
from log.driver import AppendResult, Busy, WriterFailed
from log.local import ProcessLog
from log.seals import Sealed
from runtime import refusals
from runtime.refusals import BadRequest, Refusal


class Driver:
    def __init__(self, submit: Any = None, result: Any = None) -> None:
        self.failed = SimpleNamespace(is_set=lambda: False)
        self._submit, self._result = submit, result

    def submit(self, payloads: list[bytes], tags: Any = None) -> Future:
        if isinstance(self._submit, Exception):
            raise self._submit
        f: Future = Future()
        if isinstance(self._result, Exception):
            f.set_exception(self._result)
        elif self._result is not None:
            f.set_result(self._result)
        return f  # else never done: the wait times out


def node(driver: Driver | None) -> Any:
    hurried: list[tuple[int, int]] = []
    return SimpleNamespace(addr="a:1", server_id=1, zk=None, writers={} if driver is None else {3: driver},
                           hurried=hurried,
                           lingering=SimpleNamespace(hurry=lambda log_id, pos: hurried.append((log_id, pos))))


class Others:
    """The link a ProcessLog hands other servers' calls to: records them."""
    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    def append(self, addr: str, log_id: int, payloads: list[bytes], timeout_s: float,
               tags: Any = None) -> Answered:
        self.calls.append((addr, log_id))
        return Answered((0, 0, 0, 0))

    def tail(self, addr: str, log_id: int) -> Any:
        self.calls.append((addr, log_id))
        return None


def _status(r: Refusal) -> tuple[Any, ...]:
    """What a refusal's caller sees of it: its type, code, text and trailers."""
    return type(r), r.code, r.text, r.trailers


def local(n: Any, addr: str = "a:1", payloads: list[bytes] | None = None, timeout_s: float = 1) -> Any:
    batch = [b"x"] if payloads is None else payloads
    try:
        return ProcessLog(n, Others()).append(addr, 3, batch, timeout_s).result(0)
    except Refusal as e:  # the append's outcome: a refusal, raised
        return e


@pytest.mark.parametrize("driver,code", [
    (Driver(submit=Busy("full")), grpc.StatusCode.RESOURCE_EXHAUSTED),
    (Driver(submit=WriterFailed("gone")), grpc.StatusCode.UNAVAILABLE),
    (Driver(result=WriterFailed("gone")), grpc.StatusCode.UNAVAILABLE),
    (Driver(), grpc.StatusCode.DEADLINE_EXCEEDED),
    (Driver(result=Sealed(5, 2)), grpc.StatusCode.FAILED_PRECONDITION),
])
def test_each_refusal_is_one_outcome_both_ways(driver: Driver, code: grpc.StatusCode) -> None:
    n = node(driver)
    got = append.append(n, 3, [b"x"], 0.01, hurry=True)
    assert isinstance(got, Refusal) and got.code == code
    # a batch refused whole, its shard handed over (log/seals.py): the client is told why
    assert (got.reason == refusals.SEALED) == (code == grpc.StatusCode.FAILED_PRECONDITION)
    assert _status(local(n, timeout_s=0.01)) == _status(got)
    assert n.hurried == []


def test_an_appended_batch_hurries_the_streams_only_when_asked() -> None:
    n = node(Driver(result=AppendResult(10, 2, 5, 1)))
    assert append.append(n, 3, [b"x", b"y"], 1, hurry=True) == AppendResult(10, 2, 5, 1)
    assert n.hurried == [(3, 11)]
    assert local(n, payloads=[b"x", b"y"]) == (10, 2, 5, 1)
    assert n.hurried == [(3, 11)]  # the in-process port: its coordinator is beside it


def test_no_writer_here_is_a_redirect_and_bad_batches_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    n = node(None)
    assert append.append(n, 3, [b"x"], 1, hurry=True) is None
    writer: dict[str, Any] | None = {"server": 2, "addr": "b:2"}
    monkeypatch.setattr(append.zkpaths, "read_writer", lambda zk, log_id: writer)
    for got in (append.answer(n, 3, [b"x"], 1, hurry=True), local(n)):
        assert (got.code, got.redirect, got.reason) == (
            grpc.StatusCode.FAILED_PRECONDITION, "b:2", "not-writer")
        assert "the writer is server 2 at b:2" in got.message
    writer = None  # none yet (an election under way), or this server's own node
    for w in (None, {"server": 1, "addr": "a:1"}):
        writer = w
        got = local(n)
        assert (got.code, got.redirect, got.reason) == (grpc.StatusCode.UNAVAILABLE, "", "no-writer")
    assert got.trailers == (("midtown-refused", "no-writer"),)
    redirect = Refusal(grpc.StatusCode.FAILED_PRECONDITION, "m", reason="not-writer", redirect="b:2")
    assert redirect.trailers == (("midtown-refused", "not-writer"), ("midtown-writer", "b:2"))
    others = Others()
    assert ProcessLog(n, others).append("b:2", 3, [b"x"], 1).result(0) == (0, 0, 0, 0)  # another server's
    ProcessLog(n, others).tail("b:2", 3)
    assert others.calls == [("b:2", 3), ("b:2", 3)]
    with pytest.raises(BadRequest, match="payloads"):
        append.append(n, 3, [], 1, hurry=True)
    refused = local(n, payloads=[])
    assert isinstance(refused, Refusal) and refused.code == grpc.StatusCode.INVALID_ARGUMENT
    assert refused.text.startswith("payloads")
