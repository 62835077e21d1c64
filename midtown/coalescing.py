"""Coalescing in the SDK: single-key operations that a Client's threads issue while one of
its calls is in flight travel together in the next call (KV.Many), as Kafka's producer
batches the records that pile up while a send is in flight.

A lone caller pays nothing: with no call in flight its operation goes at once, as its own
call. Under load, calls carry what queued while the previous one ran, at most ITEMS_MAX
operations and BYTES_MAX bytes. One call per route (coordinator) is in flight at a time:
more calls in flight carry fewer operations each and cost more than they save (measured
with `midtown-bench kv`, 64 threads on one Client: put 1.18x etcd's throughput with one
call in flight, 0.99x with two, 0.75x with four; docs/performance.md).

Each operation keeps its own request id, its own outcome and its own deadline: the
coordinator handles every item as its own call (coordinator/server.py, `many`), so an item
that fails fails alone, and one whose failure a retry may cure (UNAVAILABLE, a deadline, a
rate limit) is retried on its own, marked as a retry, by its own caller.

**Every operation ends by its own deadline** (issue 33). An operation waits in the queue
behind the call in flight at most until its deadline (then DeadlineExceeded: it was never
sent). A coalesced call's timeout is the earliest deadline among its items, so no caller
(the one that sends it included) waits for it past its own deadline; an item whose call
failed in a way a retry may cure (the call's deadline was another item's) is retried
alone by its own caller's thread or coroutine within its own deadline, never by the
caller that sent the call, which would run the others' retries one after another.

Each operation is linearizable as it was alone: the operations of one call were all in
flight at once, and a thread's next operation starts after its previous one has answered.

The batching itself is runtime.group_commit: the caller that finds no call in flight
sends the next one, the others wait for their answers. After a call that carried several
operations, the next one first gathers their threads as they queue again (`gather`: a
fraction of a millisecond, 2 ms at most; never for a lone caller)."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

from midtown import errors
from midtown_pb import kv_pb2 as pb
from runtime import world
from runtime.group_commit import GroupCommit, GroupTimeout

ITEMS_MAX = 256  # operations in one call (the coordinator takes up to MANY_ITEMS_MAX)
BYTES_MAX = 4 << 20  # request bytes in one call, under gRPC's message limit

# The Client's method -> the ManyItem / ManyAnswer field that carries it.
FIELDS = {"Get": "get", "Put": "put", "Delete": "delete", "CheckAndSet": "check_and_set",
          "Increment": "increment"}


class _Pending(NamedTuple):
    method: str
    req: Any
    deadline: float  # world.monotonic()
    size: int


class _Counts:
    def __init__(self) -> None:
        self.calls = 0  # calls made, and operations they carried (for tests and stats)
        self.operations = 0
        self._counting = world.lock()

    def _count(self, n: int) -> None:
        with self._counting:
            self.calls += 1
            self.operations += n


class Coalescer(_Counts):
    def __init__(self, call: Callable[[str, Any, float, str | None], Any]) -> None:
        """`call(method, request, timeout_s, to)`: one call with the client's retries,
        first to coordinator `to` if not None (Client._call)."""
        super().__init__()
        self._call = call
        self._routes: dict[str | None, GroupCommit] = {}  # one call in flight to each
        self._routes_lock = world.lock()

    def call(self, method: str, req: Any, timeout_s: float, to: str | None = None) -> Any:
        """The response to `req` as its own call would give it, or its error raised.
        `to`: the coordinator it goes to (its route); operations with one route travel
        together."""
        route = self._routes.get(to) or self._route(to)
        p = pending(method, req, timeout_s)
        try:
            out = route.call(p, max(0.0, p.deadline - world.monotonic()))
        except GroupTimeout:
            raise not_sent(method) from None
        if out is RETRY:
            out = self._alone(p, None)
        if isinstance(out, BaseException):
            raise out
        return out

    def _route(self, to: str | None) -> GroupCommit:
        with self._routes_lock:
            if to not in self._routes:
                self._routes[to] = GroupCommit(lambda items: self._run(items, to), size=lambda p: p.size,
                                               max_size=BYTES_MAX, gather=gather)
            return self._routes[to]

    def _run(self, items: list[_Pending], to: str | None) -> list[Any]:
        """One call for `items` (the group commit hands at most BYTES_MAX of them): their
        responses or errors, in order."""
        out: list[Any] = []
        until = min(p.deadline for p in items)  # the calls end by the earliest deadline of all
        for i in range(0, len(items), ITEMS_MAX):
            out += self._send(items[i:i + ITEMS_MAX], to, until)
        return out

    def _send(self, items: list[_Pending], to: str | None, until: float) -> list[Any]:
        self._count(len(items))
        if len(items) == 1:
            p, = items
            r = self._alone(p, to, until)
            capped = until < p.deadline and isinstance(r, errors.MidtownError)
            return [retry_or(r, p) if capped else r]  # its own caller goes on with the time it has
        try:
            resp = self._call("Many", many_request(items), call_timeout(items, until), to)
        except errors.MidtownError as e:
            return [retry_or(e, p) for p in items]
        return answers(items, resp)

    def _alone(self, p: _Pending, to: str | None, until: float | None = None) -> Any:
        left = min(p.deadline, until or p.deadline) - world.monotonic()
        if left <= 0:
            return errors.DeadlineExceeded(f"{p.method}: no answer within the deadline")
        try:
            return self._call(p.method, p.req, left, to)
        except errors.MidtownError as e:
            return e


class AsyncCoalescer(_Counts):
    """The same for an event loop's coroutines (midtown/aio.py): while a route's call is in
    flight, operations queue on it; a task sends what queued as the route's next call. A
    lone operation finds no call in flight and goes at once."""

    def __init__(self, call: Callable[[str, Any, float, str | None], Awaitable[Any]]) -> None:
        """`call(method, request, timeout_s, to)`: one call with the client's retries."""
        super().__init__()
        self._call = call
        self._queues: dict[str | None, deque[tuple[_Pending, asyncio.Future[Any]]]] = {}
        self._busy: set[str | None] = set()  # routes with a call in flight (a task draining)
        self._tasks: set[asyncio.Task[None]] = set()

    async def call(self, method: str, req: Any, timeout_s: float, to: str | None = None) -> Any:
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        p = pending(method, req, timeout_s)
        q = self._queues.setdefault(to, deque())
        q.append((p, fut))
        if to not in self._busy:
            self._busy.add(to)
            task = asyncio.get_running_loop().create_task(self._drain(to))
            self._tasks.add(task)  # held until done (the loop keeps only a weak reference)
            task.add_done_callback(self._tasks.discard)
        try:
            out = await asyncio.wait_for(asyncio.shield(fut), max(0.0, p.deadline - world.monotonic()))
        except TimeoutError:
            if (p, fut) in q:  # still queued: it will not be sent
                q.remove((p, fut))
                raise not_sent(method) from None
            raise errors.DeadlineExceeded(f"{method}: no answer within the deadline") from None
        if out is RETRY:
            out = await self._alone(p, None)
        if isinstance(out, BaseException):
            raise out
        return out

    async def _drain(self, to: str | None) -> None:
        q = self._queues[to]
        try:
            while q:
                batch: list[tuple[_Pending, asyncio.Future[Any]]] = []
                size = 0
                while q and len(batch) < ITEMS_MAX and (not batch or size + q[0][0].size <= BYTES_MAX):
                    size += q[0][0].size
                    batch.append(q.popleft())
                try:
                    results = await self._send([p for p, _ in batch], to)
                except BaseException as e:  # every waiter hears of it; none hangs
                    results = [e] * len(batch)
                for (_, f), r in zip(batch, results):
                    if not f.done():
                        f.set_result(r)
                # Let the coroutines just answered run first: their next operations
                # join the next call instead of each finding the route free later.
                await asyncio.sleep(0)
        finally:
            self._busy.discard(to)

    async def _send(self, items: list[_Pending], to: str | None) -> list[Any]:
        """(The drain sends at most ITEMS_MAX items at a time: its callers await their own.)"""
        self._count(len(items))
        if len(items) == 1:
            return [await self._alone(items[0], to)]
        try:
            resp = await self._call("Many", many_request(items), call_timeout(items), to)
        except errors.MidtownError as e:
            return [retry_or(e, p) for p in items]
        return answers(items, resp)

    async def _alone(self, p: _Pending, to: str | None) -> Any:
        left = p.deadline - world.monotonic()
        if left <= 0:
            return errors.DeadlineExceeded(f"{p.method}: no answer within the deadline")
        try:
            return await self._call(p.method, p.req, left, to)
        except errors.MidtownError as e:
            return e


RETRY = object()  # an item to send again alone, marked as a retry
# Gathering (runtime.group_commit's `gather`): after a call that carried several operations,
# the next call waits for their threads to queue again (they were just answered), while the
# queue grows by the step, up to the last call's count, at most GATHER_MAX_S. Otherwise
# the threads split into cohorts that take turns, each waiting a whole call in the queue:
# 64 threads, put 3,223 -> 3,673 ops/s (host layout), 4 threads, put 412 -> 552 ops/s and
# CAS 342 -> 431 (split), p99 lower (docs/performance.md@71edb5a, "Calls over streams, and gathering").
GATHER_STEP_S = 0.0002
GATHER_MAX_S = 0.002


def gather(queued: Callable[[], int], last: int, sleep: Callable[[float], object] = world.sleep,
           clock: Callable[[], float] = world.monotonic) -> None:
    """Wait, in steps of GATHER_STEP_S, while the queue grows and holds fewer than `last`
    operations, at most GATHER_MAX_S: returns at once if `last` are queued already, after
    one step if nobody comes."""
    deadline = clock() + GATHER_MAX_S
    n = queued()
    while n < last and clock() < deadline:
        sleep(GATHER_STEP_S)
        m = queued()
        if m == n:
            return
        n = m


def pending(method: str, req: Any, timeout_s: float) -> _Pending:
    return _Pending(method, req, world.monotonic() + timeout_s, req.ByteSize() + 16)


def many_request(items: list[_Pending]) -> pb.ManyRequest:
    return pb.ManyRequest(items=[pb.ManyItem(**{FIELDS[p.method]: p.req}) for p in items])


def call_timeout(items: list[_Pending], until: float | None = None) -> float:
    """A coalesced call runs until the first of its items' deadlines (and `until`), at
    most: none of its callers waits for it past its own."""
    return max(0.001, min(min(p.deadline for p in items), until or float("inf")) - world.monotonic())


def not_sent(method: str) -> errors.DeadlineExceeded:
    return errors.DeadlineExceeded(f"{method}: the deadline passed while it waited behind a call in "
                                   "flight (it was not sent)")


def retry_or(err: errors.MidtownError, p: _Pending) -> Any:
    """RETRY if `err` is a failure a retry may cure (not a quota) and `p`'s deadline has
    not passed; `p` is then marked as a retry (its first attempt may have been applied).
    Else `err`."""
    if (err.code in errors.RETRYABLE and not isinstance(err, errors.QuotaExceeded)
            and p.deadline > world.monotonic()):
        p.req.header.first_attempt = False
        return RETRY
    return err


def answers(items: list[_Pending], resp: pb.ManyResponse) -> list[Any]:
    """Each item's response, or its error, or RETRY (retry_or)."""
    out: list[Any] = []
    for p, a in zip(items, resp.answers):
        if a.code == 0:
            out.append(getattr(a, FIELDS[p.method]))
        else:
            out.append(retry_or(errors.from_answer(a.code, a.message, a.refused), p))
    return out
