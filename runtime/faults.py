"""Expected faults, and how a server logs a failure (issue 68, item 4).

A peer that refuses or does not answer, a ZooKeeper session that expired or a connection
being re-established, a deadline missed: these happen every time a machine is paused or
cut off, and are handled (retried, passed over, taken over). Each is logged as one line
naming what failed and why, once per episode (the first failure of a run of them, then
the recovery), with the traceback at DEBUG only. Anything else is a defect, and keeps its
traceback at WARNING: a traceback at WARNING or above in a server's log means a bug."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent import futures

import grpc
from kazoo.exceptions import ConnectionClosedError, ConnectionLoss, OperationTimeoutError, SessionExpiredError
from kazoo.handlers.threading import KazooTimeoutError

# gRPC codes that say a peer was away, slow or shedding load, not that anything is wrong here.
EXPECTED_CODES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
                            grpc.StatusCode.CANCELLED, grpc.StatusCode.RESOURCE_EXHAUSTED})
ZK_FAULTS = (ConnectionLoss, ConnectionClosedError, OperationTimeoutError, SessionExpiredError,
             KazooTimeoutError)
OTHER_FAULTS = (ConnectionError, TimeoutError, futures.TimeoutError)
LINE_CHARS_MAX = 300  # a one-line description is cut here


def expected(e: BaseException) -> bool:
    """Whether `e` is a fault of the world (a peer, ZooKeeper, the network, a deadline)
    rather than a defect: gRPC errors and Midtown's own errors with an EXPECTED_CODES
    code (Refusal, the SDK's errors: any exception whose `code` is one), ZooKeeper's
    connection and session errors, connection errors and timeouts."""
    if isinstance(e, ZK_FAULTS + OTHER_FAULTS):
        return True
    code = getattr(e, "code", None)
    if callable(code):  # grpc.RpcError
        try:
            code = code()
        except Exception:
            return False
    return isinstance(code, grpc.StatusCode) and code in EXPECTED_CODES


def one_line(e: BaseException) -> str:
    """`e` as one line: its type and the first line of its message, cut short."""
    details = getattr(e, "details", None)
    text = details() if callable(details) and isinstance(e, grpc.RpcError) else str(e)
    code = getattr(e, "code", None)
    if isinstance(e, grpc.RpcError) and callable(code):
        text = f"{code().name}: {text}"
    first = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    line = f"{type(e).__name__}: {first}" if first else type(e).__name__
    return line if len(line) <= LINE_CHARS_MAX else line[:LINE_CHARS_MAX - 3] + "..."


def log_failure(logger: logging.Logger, what: str, e: BaseException, level: int = logging.WARNING) -> None:
    """Log that `what` failed with `e`: one line at `level` if it is expected (the
    traceback at DEBUG), else with its traceback (a defect)."""
    if expected(e):
        logger.log(level, "%s: %s", what, one_line(e))
        logger.debug("%s: the traceback", what, exc_info=e)
    else:
        logger.log(max(level, logging.WARNING), "%s failed", what, exc_info=e)


class Episode:
    """A task's failures in a row, logged once: the first expected one at WARNING in one
    line, the next ones of the same run at DEBUG, and the recovery at INFO. An unexpected
    failure is logged every time, with its traceback."""

    def __init__(self, logger: logging.Logger, what: str) -> None:
        self.logger = logger
        self.what = what
        self.failures = 0

    def failed(self, e: BaseException, then: str = "") -> None:
        """`then`: what happens next ("retrying in 0.4 s")."""
        self.failures += 1
        suffix = f"; {then}" if then else ""
        if not expected(e):
            self.logger.warning("%s failed%s", self.what, suffix, exc_info=e)
        elif self.failures == 1:
            self.logger.warning("%s: %s%s", self.what, one_line(e), suffix)
            self.logger.debug("%s: the traceback", self.what, exc_info=e)
        else:
            self.logger.debug("%s: %s (failure %d in a row)%s", self.what, one_line(e), self.failures,
                              suffix, exc_info=e)

    def succeeded(self) -> None:
        if self.failures:
            self.logger.info("%s: working again after %d failure%s", self.what, self.failures,
                             "" if self.failures == 1 else "s")
        self.failures = 0


class Calls:
    """Expected failures of calls that run side by side (a server's gRPC methods): the
    first of an episode of one method at WARNING in one line, the others at DEBUG, until
    the method has gone QUIET_S without one. Five Truncate calls failing together on a
    ZooKeeper connection that was lost made five lines."""

    QUIET_S = 5.0

    def __init__(self, logger: logging.Logger, clock: Callable[[], float]) -> None:
        self.logger = logger
        self.clock = clock
        self._last: dict[str, float] = {}
        self._lock = threading.Lock()

    def failed(self, what: str, e: BaseException) -> None:
        if not expected(e):
            log_failure(self.logger, what, e)  # a defect: every time, with its traceback
            return
        now = self.clock()
        with self._lock:
            last = self._last.get(what)
            self._last[what] = now
        if last is not None and now - last < self.QUIET_S:
            self.logger.debug("%s: %s", what, one_line(e), exc_info=e)
        else:
            log_failure(self.logger, what, e)
