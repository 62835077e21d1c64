"""A writer's server replicating to one peer over one long-lived gRPC stream
(Replica.ReplicateStream) instead of a unary call per batch: the outlet of that peer
(log/peers.py) sends each batch as a message and takes the next response as its answer. An
outlet keeps one batch in flight, so the answers come in turn.

Why a stream: on this machine a Python gRPC server spends about half the CPU on a message
of an open stream that it spends on a unary call, and the round trip is about a third
shorter (docs/performance.md, "Replication over streams").

A stream that fails (the peer restarted, refused a message, went away) is dropped; the
next batch opens a new one. A stream whose answer is overdue (a paused or unreachable
peer) is cancelled by the watchdog (`cancel_overdue`), so that an outlet never waits
longer than a unary call's deadline would have let it. Either way the batch counts as
lost, and the writers resend what no quorum acknowledged on their tick."""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

import grpc

from midtown_pb import log_pb2 as pb

_END = None  # ends the request iterator


class StreamFailed(Exception):
    """The stream is gone; the batch on it has no answer."""


class ReplicaStream:
    def __init__(self, stub: Any, timeout_s: float) -> None:
        self._requests: queue.SimpleQueue[pb.ReplicateRequest | None] = queue.SimpleQueue()
        self._responses = stub.ReplicateStream(iter(self._requests.get, _END))
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._sent_at: float | None = None  # when the unanswered request went, if one did
        self.closed = False

    def call(self, req: pb.ReplicateRequest) -> pb.ReplicateResponse:
        """Send `req` and wait for its answer. StreamFailed (and the stream closed) if the
        stream ended, failed or was cancelled first; the status's code comes with it."""
        with self._lock:
            if self.closed:
                raise StreamFailed(grpc.StatusCode.CANCELLED)
            self._sent_at = time.monotonic()
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
                self._sent_at = None

    def overdue(self, now: float) -> bool:
        with self._lock:
            return self._sent_at is not None and now - self._sent_at > self.timeout_s

    def close(self) -> None:
        with self._lock:
            if self.closed:
                return
            self.closed = True
        self._requests.put(_END)
        self._responses.cancel()


def cancel_overdue(streams: list[ReplicaStream], now: float) -> int:
    """Cancel the streams whose answer is overdue (their outlets see StreamFailed);
    returns how many."""
    n = 0
    for s in streams:
        if s.overdue(now):
            s.close()
            n += 1
    return n
