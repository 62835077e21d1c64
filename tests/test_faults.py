"""Expected faults are logged as one line, once per run of them; defects keep their
traceback (runtime/faults.py, runtime/loops.py)."""

from __future__ import annotations

import logging
import threading
import time

import grpc
import pytest
from kazoo.exceptions import ConnectionLoss, NoNodeError, SessionExpiredError

from runtime import faults, loops
from runtime.refusals import Refusal


class _Rpc(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


@pytest.mark.parametrize("e", [SessionExpiredError(), ConnectionLoss(), TimeoutError("t"),
                               ConnectionRefusedError(),
                               Refusal(grpc.StatusCode.UNAVAILABLE, "log server 2: Connection refused"),
                               _Rpc(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")])
def test_faults_of_the_world_are_expected(e: BaseException) -> None:
    assert faults.expected(e)


@pytest.mark.parametrize("e", [KeyError("x"), AssertionError("invariant"), NoNodeError(),
                               Refusal(grpc.StatusCode.INTERNAL, "bug"),
                               _Rpc(grpc.StatusCode.INVALID_ARGUMENT, "x")])
def test_defects_are_not(e: BaseException) -> None:
    assert not faults.expected(e)


def test_one_line_is_one_line_and_bounded() -> None:
    line = faults.one_line(_Rpc(grpc.StatusCode.UNAVAILABLE, "failed to connect\nsecond line" + "x" * 1000))
    assert "\n" not in line and len(line) <= faults.LINE_CHARS_MAX
    assert line.startswith("_Rpc: UNAVAILABLE: failed to connect")


def test_an_episode_logs_its_first_expected_failure_and_its_end(caplog: pytest.LogCaptureFixture) -> None:
    lg = logging.getLogger("test.episode")
    ep = faults.Episode(lg, "usage")
    with caplog.at_level(logging.DEBUG, logger="test.episode"):
        for _ in range(3):
            ep.failed(SessionExpiredError(), "retrying")
        ep.succeeded()
        ep.failed(KeyError("k"))
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.getMessage() for r in warnings] == ["usage: SessionExpiredError; retrying", "usage failed"]
    assert warnings[0].exc_info is None, "an expected fault's traceback is for DEBUG"
    assert warnings[1].exc_info is not None, "a defect keeps its traceback"
    assert any(r.levelno == logging.INFO and "working again after 3 failures" in r.getMessage()
               for r in caplog.records)


def test_calls_failing_together_log_one_line_per_method_and_episode(caplog: pytest.LogCaptureFixture) -> None:
    """Calls of one method failing side by side on one fault make one WARNING line; a
    method quiet for Calls.QUIET_S starts a new episode; a defect keeps its traceback."""
    now = [100.0]
    calls = faults.Calls(logging.getLogger("test.calls"), lambda: now[0])
    with caplog.at_level(logging.DEBUG, logger="test.calls"):
        for _ in range(5):
            calls.failed("Truncate", ConnectionLoss())
        calls.failed("Append", ConnectionLoss())
        now[0] += faults.Calls.QUIET_S
        calls.failed("Truncate", ConnectionLoss())
        calls.failed("Truncate", KeyError("k"))
    warned = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.getMessage() for r in warned] == ["Truncate: ConnectionLoss", "Append: ConnectionLoss",
                                                "Truncate: ConnectionLoss", "Truncate failed"]
    assert [r.exc_info is not None for r in warned] == [False, False, False, True]


def test_a_loop_failing_on_zookeeper_logs_one_line_at_warning(caplog: pytest.LogCaptureFixture) -> None:
    stop, runs = threading.Event(), []

    def body() -> None:
        runs.append(1)
        raise SessionExpiredError()

    with caplog.at_level(logging.DEBUG, logger="midtown.loops"):
        loops.every("positions", 0.01, body, stop, first_at_once=True)
        deadline = time.monotonic() + 10
        while len(runs) < 4 and time.monotonic() < deadline:
            time.sleep(0.02)
        stop.set()
    warnings = [r for r in caplog.records if r.name == "midtown.loops" and r.levelno >= logging.WARNING]
    assert len(runs) >= 4
    assert len(warnings) == 1 and warnings[0].exc_info is None
    assert warnings[0].getMessage().startswith("positions: SessionExpiredError; retrying in")
