"""The SDK's retry policy, one for Client and AsyncClient: a call's attempts under one
deadline. The request id stays the same on every attempt, so a retry of a write that was
applied returns its first outcome; a retried request is marked (its first attempt may have
been applied, so a put waits for the storage nodes' outcome instead of the log's
acknowledgement); an error a retry cannot help is raised at once; a coordinator that was
unavailable is left for another; the pauses back off from 20 ms to 1 s, with jitter, and
never run past the deadline. Pure but for the clock: the clients do the calls and sleeps."""

from __future__ import annotations

from typing import Any

import grpc

from midtown import errors
from midtown_pb import kv_pb2 as pb
from runtime import world

# What an error says when an earlier attempt of the same call may have been applied.
EARLIER_ATTEMPT = (" (this was a retry: an earlier attempt of the request may have been applied; "
                   "read the key to know)")
BACKOFF_FIRST_S, BACKOFF_MAX_S = 0.02, 1.0


class Attempts:
    """One call's attempts. Per attempt: `left = a.start(req)` (the seconds left for it;
    DeadlineExceeded when none), the call with `timeout=left`, and on a gRPC error `switch,
    pause = a.failed(e)` (raises what a retry cannot cure), then another coordinator if
    `switch`, and a sleep of `pause`."""

    def __init__(self, method: str, retries: int, timeout_s: float,
                 known_down_s: float | None = None) -> None:
        """`known_down_s`: give up (Unavailable) once every attempt for this long failed on
        coordinators known to be down (refusing connections); None: retry until the deadline."""
        self.method = method
        self.retries = retries
        self.deadline = world.monotonic() + timeout_s
        self.attempt = -1
        self._backoff = BACKOFF_FIRST_S
        self.known_down_s = known_down_s
        self._down_since: float | None = None  # the first of the failures in a row on a known-down one

    def start(self, req: Any) -> float:
        self.attempt += 1
        left = self.deadline - world.monotonic()
        if left <= 0:
            raise errors.DeadlineExceeded(f"{self.method}: no answer within the deadline")
        if self.attempt:
            mark_retry(req)
        return left

    def left(self) -> float:
        """Seconds left before the call's deadline (0 if none)."""
        return max(0.0, self.deadline - world.monotonic())

    def unanswered(self, e: grpc.RpcError) -> bool:
        """Whether the failed attempt `e` means the coordinator did not answer within the
        call's deadline (DEADLINE_EXCEEDED once the deadline has passed): the clients pass
        it over for a while (Endpoints.unanswered), whether it was paused, cut off, wedged
        or waiting on something that is."""
        return bool(e.code() == grpc.StatusCode.DEADLINE_EXCEEDED and world.monotonic() >= self.deadline)

    def failed(self, e: grpc.RpcError, down: str | None = None) -> tuple[bool, float]:
        """(whether to try another coordinator, the pause first), or the error raised.
        `down`: why the coordinator tried is known to be down (Endpoints.known_down)."""
        switch = retry_or_raise(e, self.attempt, self.retries)
        now = world.monotonic()
        pause = min(self._backoff * (1 + world.random()), max(0.0, self.deadline - now))
        self._backoff = min(self._backoff * 2, BACKOFF_MAX_S)
        if down is None:
            self._down_since = None
        elif self._down_since is None:
            self._down_since = now
        if down is not None and self.known_down_s is not None:
            assert self._down_since is not None
            left = self._down_since + self.known_down_s - now
            if left <= 0:
                took = now - self._down_since
                raise errors.Unavailable(f"{self.method}: {down} (attempt {self.attempt + 1}, "
                                         f"{took:.1f}s after the first; is the cluster up?)")
            pause = min(pause, left)
        return switch, pause


def retry_or_raise(e: grpc.RpcError, attempt: int, retries: int) -> bool:
    """After a failed attempt: raise its error if a retry cannot help (or none is left),
    else whether to try another coordinator (it was unavailable)."""
    if errors.refused_for_quota(e):  # retrying cannot help
        raise errors.from_rpc(e, EARLIER_ATTEMPT if attempt else "") from None
    if e.code() not in errors.RETRYABLE or attempt == retries:
        raise errors.from_rpc(e) from None
    return bool(e.code() == grpc.StatusCode.UNAVAILABLE)


def read_retry_or_raise(e: grpc.RpcError, attempt: int, retries: int, deadline: float) -> None:
    """A read failed part-way: raise its error unless a retry may cure it and there is time."""
    if e.code() not in errors.RETRYABLE or attempt == retries or world.monotonic() > deadline:
        raise errors.from_rpc(e) from None


def mark_retry(req: Any) -> None:
    """A request sent again: its first attempt may have been applied (so a put waits for
    the storage nodes' outcome instead of the log's acknowledgement)."""
    if isinstance(req, pb.ManyRequest):
        for item in req.items:
            getattr(item, item.WhichOneof("call")).header.first_attempt = False
    elif "header" in req.DESCRIPTOR.fields_by_name and req.HasField("header"):
        req.header.first_attempt = False
