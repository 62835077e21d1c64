"""A long-lived gRPC stream used as a sequence of calls: each request sent on it is
answered by the next response, in turn (the caller keeps one request in flight). A log
writer's server replicates to each peer this way (Replica.ReplicateStream, log/peers.py)
instead of making a unary call per batch. (The SDK's calls to coordinators and the storage
nodes' answers were tried the same way and not kept: docs/performance.md.)

Why a stream: on this machine a Python gRPC server spends about half the CPU on a message
of an open stream that it spends on a unary call, and the round trip is about a third
shorter (docs/performance.md@71edb5a, "Calls over streams, and gathering").

A stream that fails (the peer restarted, refused a request, went away) is closed; the
caller opens a new one for its next request. A stream whose answer is overdue (a paused or
unreachable peer) is cancelled by the watchdog (`watch`), so that a caller never waits
longer than a unary call's deadline would have let it. Either way the request in flight
has no answer: StreamFailed, with the status code."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc

_END = None  # ends the request iterator
WATCHDOG_S = 0.25  # how often the watchdog looks for overdue answers


class StreamFailed(Exception):
    """The stream is gone; the request on it has no answer. args[0]: the status code."""

    @property
    def code(self) -> grpc.StatusCode:
        return self.args[0]  # type: ignore[no-any-return]


class CallStream:
    def __init__(self, open_stream: Callable[[Iterator[Any]], Iterator[Any]], timeout_s: float) -> None:
        """`open_stream(requests)`: the stream-stream call (a stub's method, with whatever
        metadata it needs); `timeout_s`: how long an answer may take unless `call` says."""
        self._requests: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._responses = open_stream(iter(self._requests.get, _END))
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._due: float | None = None  # when the unanswered request's answer is due, if one is
        self.closed = False

    def call(self, req: Any, timeout_s: float | None = None) -> Any:
        """Send `req` and wait for its answer (due within `timeout_s`, else the stream's
        timeout). StreamFailed, and the stream closed, if the stream ended, failed or was
        cancelled first."""
        with self._lock:
            if self.closed:
                raise StreamFailed(grpc.StatusCode.CANCELLED)
            self._due = time.monotonic() + (self.timeout_s if timeout_s is None else timeout_s)
        self._requests.put(req)
        try:
            return next(self._responses)
        except grpc.RpcError as e:
            self.close()
            raise StreamFailed(e.code()) from None
        except StopIteration:
            self.close()
            raise StreamFailed(grpc.StatusCode.UNAVAILABLE) from None
        finally:
            with self._lock:
                self._due = None

    def overdue(self, now: float) -> bool:
        with self._lock:
            return self._due is not None and now > self._due

    def close(self) -> None:
        with self._lock:
            if self.closed:
                return
            self.closed = True
        self._requests.put(_END)
        self._responses.cancel()  # type: ignore[attr-defined]


def cancel_overdue(streams: list[CallStream], now: float) -> int:
    """Cancel the streams whose answer is overdue (their callers get StreamFailed);
    returns how many."""
    n = 0
    for s in streams:
        if s.overdue(now):
            s.close()
            n += 1
    return n


def watch(streams: Callable[[], list[CallStream]], stop: threading.Event) -> None:
    """A watchdog: until `stop` is set, cancel the overdue ones among `streams()`; then
    close them all."""
    while not stop.wait(WATCHDOG_S):
        cancel_overdue(streams(), time.monotonic())
    for s in streams():
        s.close()
