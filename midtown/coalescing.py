"""Coalescing in the SDK: single-key operations that a Client's threads issue while one of
its calls is in flight travel together in the next call (KV.Many), as Kafka's producer
batches the records that pile up while a send is in flight.

A lone caller pays nothing: with no call in flight its operation goes at once, as its own
call. Under load, calls carry what queued while the previous one ran, at most ITEMS_MAX
operations and BYTES_MAX bytes. LANES calls may be in flight at once (a thread always uses
the same lane), so that one slow call does not hold every thread back.

Each operation keeps its own request id, its own outcome and its own deadline: the
coordinator handles every item as its own call (coordinator/server.py, `many`), so an item
that fails fails alone, and one whose failure a retry may cure (UNAVAILABLE, a deadline, a
rate limit) is retried on its own, marked as a retry. Each operation is linearizable as
it was alone: the operations of one call were all in flight at once, and a thread's next
operation starts after its previous one has answered.

The batching itself is runtime.group_commit: the caller that finds its lane free sends
the call, the others wait for their answers."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from midtown import errors
from midtown_pb import kv_pb2 as pb
from runtime.group_commit import GroupCommit

ITEMS_MAX = 256  # operations in one call (the coordinator takes up to MANY_ITEMS_MAX)
BYTES_MAX = 4 << 20  # request bytes in one call, under gRPC's message limit
LANES = 4  # calls of one Client in flight at once

# The Client's method -> the ManyItem / ManyAnswer field that carries it.
FIELDS = {"Get": "get", "Put": "put", "Delete": "delete", "CheckAndSet": "check_and_set",
          "Increment": "increment"}


class _Pending(NamedTuple):
    method: str
    req: Any
    deadline: float  # time.monotonic()
    size: int


class Coalescer:
    def __init__(self, call: Callable[[str, Any, float], Any]) -> None:
        """`call(method, request, timeout_s)`: one call with the client's retries (Client._call)."""
        self._call = call
        self._lanes = [GroupCommit(self._run, size=lambda p: p.size, max_size=BYTES_MAX)
                       for _ in range(LANES)]
        self.calls = 0  # calls made, and operations they carried (for tests and stats)
        self.operations = 0
        self._count = threading.Lock()

    def call(self, method: str, req: Any, timeout_s: float) -> Any:
        """The response to `req` as its own call would give it, or its error raised."""
        lane = self._lanes[threading.get_ident() % LANES]
        out = lane.call(_Pending(method, req, time.monotonic() + timeout_s, req.ByteSize() + 16))
        if isinstance(out, BaseException):
            raise out
        return out

    def _run(self, items: list[_Pending]) -> list[Any]:
        """One call for `items` (the group commit hands at most BYTES_MAX of them): their
        responses or errors, in order."""
        out: list[Any] = []
        for i in range(0, len(items), ITEMS_MAX):
            out += self._send(items[i:i + ITEMS_MAX])
        return out

    def _send(self, items: list[_Pending]) -> list[Any]:
        with self._count:
            self.calls += 1
            self.operations += len(items)
        if len(items) == 1:
            return [self._alone(items[0])]
        now = time.monotonic()
        many = pb.ManyRequest(items=[pb.ManyItem(**{FIELDS[p.method]: p.req}) for p in items])
        try:
            resp = self._call("Many", many, max(0.001, max(p.deadline for p in items) - now))
        except errors.MidtownError as e:
            return [e] * len(items)
        out: list[Any] = []
        for p, a in zip(items, resp.answers):
            if a.code == 0:
                out.append(getattr(a, FIELDS[p.method]))
                continue
            err = errors.from_answer(a.code, a.message, a.refused)
            if (err.code in errors.RETRYABLE and not isinstance(err, errors.QuotaExceeded)
                    and p.deadline > time.monotonic()):
                p.req.header.first_attempt = False  # the first may have been applied
                out.append(self._alone(p))
            else:
                out.append(err)
        return out

    def _alone(self, p: _Pending) -> Any:
        try:
            return self._call(p.method, p.req, max(0.001, p.deadline - time.monotonic()))
        except errors.MidtownError as e:
            return e
