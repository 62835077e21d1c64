"""log/append.py, the Append call's core that the gRPC service and the in-process port
both answer with: each way a writer can answer becomes the same outcome, and the
in-process port (log/local.py) gives it as a value."""

from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

import grpc
import pytest

from log import append
from log.client import AppendRefused
from log.driver import AppendResult, Busy, WriterFailed
from log.local import NodeAppends
from runtime.refusals import BadRequest


class Driver:
    def __init__(self, submit: Any = None, result: Any = None) -> None:
        self.failed = SimpleNamespace(is_set=lambda: False)
        self._submit, self._result = submit, result

    def submit(self, payloads: list[bytes]) -> Future:
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
    return SimpleNamespace(addr="a:1", writers={} if driver is None else {3: driver}, hurried=hurried,
                           lingering=SimpleNamespace(hurry=lambda log_id, pos: hurried.append((log_id, pos))))


@pytest.mark.parametrize("driver,code", [
    (Driver(submit=Busy("full")), grpc.StatusCode.RESOURCE_EXHAUSTED),
    (Driver(submit=WriterFailed("gone")), grpc.StatusCode.UNAVAILABLE),
    (Driver(result=WriterFailed("gone")), grpc.StatusCode.UNAVAILABLE),
    (Driver(), grpc.StatusCode.DEADLINE_EXCEEDED),
])
def test_each_refusal_is_one_outcome_both_ways(driver: Driver, code: grpc.StatusCode) -> None:
    n = node(driver)
    got = append.append(n, 3, [b"x"], 0.01, hurry=True)
    assert isinstance(got, AppendRefused) and got.code == code
    assert NodeAppends(n).append("a:1", 3, [b"x"], 0.01) == got
    assert n.hurried == []


def test_an_appended_batch_hurries_the_streams_only_when_asked() -> None:
    n = node(Driver(result=AppendResult(10, 2, 5, 1)))
    assert append.append(n, 3, [b"x", b"y"], 1, hurry=True) == AppendResult(10, 2, 5, 1)
    assert n.hurried == [(3, 11)]
    assert NodeAppends(n).append("a:1", 3, [b"x", b"y"], 1) == (10, 2, 5, 1)
    assert n.hurried == [(3, 11)]  # the in-process port: its coordinator is beside it


def test_no_writer_here_and_bad_batches() -> None:
    n = node(None)
    assert append.append(n, 3, [b"x"], 1, hurry=True) is None  # the service redirects
    assert NodeAppends(n).append("a:1", 3, [b"x"], 1) is None  # the port goes through gRPC
    assert NodeAppends(n).append("b:2", 3, [b"x"], 1) is None  # another server's address
    with pytest.raises(BadRequest, match="payloads"):
        append.append(n, 3, [], 1, hurry=True)
    refused = NodeAppends(n).append("a:1", 3, [], 1)
    assert isinstance(refused, AppendRefused) and refused.code == grpc.StatusCode.INVALID_ARGUMENT
