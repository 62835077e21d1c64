"""The SDK's coalescing (midtown/coalescing.py) around a stand-in for the client's call
(pure logic): a lone caller's operation goes alone and at once; operations issued while a
call is in flight go together in the next call, each with its own answer or error; an
item a retry may cure is retried alone, marked as a retry."""

from __future__ import annotations

import threading
import time
from typing import Any

import grpc
import pytest

from midtown import errors
from midtown.coalescing import ITEMS_MAX, Coalescer
from midtown_pb import kv_pb2 as pb

OK = 0
NOT_FOUND = grpc.StatusCode.NOT_FOUND.value[0]
UNAVAILABLE = grpc.StatusCode.UNAVAILABLE.value[0]


def put(i: int) -> pb.PutRequest:
    return pb.PutRequest(header=pb.RequestHeader(dataset="d", request_id=b"r%d" % i, first_attempt=True),
                         key=pb.Key(partition=b"p%d" % i), value=b"v%d" % i)


class Server:
    """Answers each put with version = its index, refuses dataset "gone" (NOT_FOUND) and
    answers UNAVAILABLE the first time it sees a request id in `flaky`. The first call
    waits until `hold` is set."""

    def __init__(self, flaky: set[bytes] = frozenset()) -> None:  # type: ignore[assignment]
        self.calls: list[tuple[str, Any]] = []
        self.to: list[str | None] = []  # each call's route
        self.hold = threading.Event()
        self.hold.set()
        self.flaky = set(flaky)
        self.started = threading.Event()

    def version(self, req: pb.PutRequest) -> int:
        return int(req.value[1:])

    def __call__(self, method: str, req: Any, timeout_s: float, to: str | None = None) -> Any:
        self.calls.append((method, pb.ManyRequest.FromString(req.SerializeToString())
                           if method == "Many" else req))
        self.to.append(to)
        self.started.set()
        self.hold.wait(5)
        if method == "Put":
            if req.header.dataset == "gone":
                raise errors.NotFound("header.dataset: unknown dataset 'gone'")
            return pb.PutResponse(version=self.version(req))
        assert method == "Many"
        out = pb.ManyResponse()
        for item in req.items:
            p = item.put
            if p.header.dataset == "gone":
                out.answers.add(code=NOT_FOUND, message="header.dataset: unknown dataset 'gone'")
            elif p.header.request_id in self.flaky:
                self.flaky.discard(p.header.request_id)
                out.answers.add(code=UNAVAILABLE, message="the log is unavailable; retry")
            else:
                out.answers.add(put=pb.PutResponse(version=self.version(p)))
        return out


def test_a_lone_caller_goes_alone_and_at_once() -> None:
    s = Server()
    c = Coalescer(s)
    assert c.call("Put", put(7), 5).version == 7
    assert [m for m, _ in s.calls] == ["Put"] and (c.calls, c.operations) == (1, 1)


def test_operations_issued_during_a_call_go_together_each_with_its_own_answer() -> None:
    s = Server(flaky={b"r5"})
    s.hold.clear()
    c = Coalescer(s)
    results: dict[int, Any] = {}

    def run(i: int) -> None:
        req = put(i)
        if i == 3:
            req.header.dataset = "gone"
        try:
            results[i] = c.call("Put", req, 5).version
        except errors.MidtownError as e:
            results[i] = e

    first = threading.Thread(target=run, args=(0,))
    first.start()
    assert s.started.wait(5)  # the first call is in flight
    others = [threading.Thread(target=run, args=(i,)) for i in range(1, 11)]
    for t in others:
        t.start()
    deadline = time.monotonic() + 5
    while len(c._routes[None]._q) < 10 and time.monotonic() < deadline:
        time.sleep(0.005)
    s.hold.set()
    for t in [first, *others]:
        t.join(10)
    methods = [m for m, _ in s.calls]
    # The first alone; the ten queued behind it in one call; the flaky one again alone.
    assert methods == ["Put", "Many", "Put"]
    assert len(s.calls[1][1].items) == 10
    assert isinstance(results[3], errors.NotFound) and "gone" in str(results[3])
    assert {i: v for i, v in results.items() if i != 3} == {i: i for i in range(11) if i != 3}
    retried = s.calls[2][1]
    assert retried.header.request_id == b"r5" and retried.header.first_attempt is False
    assert (c.calls, c.operations) == (2, 11)  # the retry goes through the client's own call


def test_operations_travel_only_with_operations_of_the_same_route() -> None:
    """A call goes to one coordinator: operations routed to different coordinators (the
    host layout, midtown/routes.py) never share one; each call carries its route."""
    s = Server()
    s.hold.clear()
    c = Coalescer(s)
    routes = {i: ("a" if i % 2 else "b") for i in range(12)}
    results: dict[int, Any] = {}

    def run(i: int) -> None:
        results[i] = c.call("Put", put(i), 5, routes[i]).version

    threads = [threading.Thread(target=run, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 5
    while (sum(len(r._q) for r in c._routes.values()) < 10 and time.monotonic() < deadline):
        time.sleep(0.005)
    s.hold.set()
    for t in threads:
        t.join(10)
    assert results == {i: i for i in range(12)}
    for (method, req), to in zip(s.calls, s.to):
        items = [it.put for it in req.items] if method == "Many" else [req]
        assert {routes[int(p.value[1:])] for p in items} == {to}
    assert "Many" in [m for m, _ in s.calls]


def test_a_call_carries_at_most_items_max_operations() -> None:
    s = Server()
    c = Coalescer(s)
    out = c._run([c_pending(i) for i in range(ITEMS_MAX + 3)], None)
    assert [r.version for r in out] == list(range(ITEMS_MAX + 3))
    assert [len(r.items) for m, r in s.calls] == [ITEMS_MAX, 3]


def test_a_whole_call_failing_hands_each_operation_back_to_retry_or_fail() -> None:
    """A coalesced call that fails in a way a retry may cure hands each operation with time
    left back to its own caller to retry alone, marked as a retry; one out of time, or
    refused for good, gets the error."""
    from midtown.coalescing import RETRY, _Pending

    def down(method: str, req: Any, timeout_s: float, to: str | None = None) -> Any:
        raise errors.Unavailable("no coordinator answered")

    c = Coalescer(down)
    late = _Pending("Put", put(3), time.monotonic() - 1, 10)
    out = c._run([c_pending(1), c_pending(2), late], None)
    assert out[:2] == [RETRY, RETRY] and isinstance(out[2], errors.Unavailable)
    assert late.req.header.first_attempt is True
    with pytest.raises(errors.Unavailable):
        c.call("Put", put(1), 1)

    def quota(method: str, req: Any, timeout_s: float, to: str | None = None) -> Any:
        raise errors.QuotaExceeded("the dataset's quota is used up")
    out = Coalescer(quota)._run([c_pending(1), c_pending(2)], None)
    assert all(isinstance(r, errors.QuotaExceeded) for r in out)


def c_pending(i: int) -> Any:
    from midtown.coalescing import _Pending

    return _Pending("Put", put(i), time.monotonic() + 5, 10)


# ---------------------------------------------------------------- the asyncio coalescer
def test_async_coroutines_share_calls_each_with_its_own_answer_and_a_lone_one_goes_alone() -> None:
    """AsyncCoalescer (AsyncClient's): the same rules for an event loop's coroutines."""
    import asyncio

    from midtown.coalescing import AsyncCoalescer

    s = Server(flaky={b"r5"})

    async def call(method: str, req: Any, timeout_s: float, to: str | None = None) -> Any:
        await asyncio.sleep(0.01)  # in flight for a while: others queue meanwhile
        return s(method, req, timeout_s)

    async def main() -> dict[int, Any]:
        c = AsyncCoalescer(call)
        assert (await c.call("Put", put(99), 5)).version == 99  # alone, at once
        assert [m for m, _ in s.calls] == ["Put"]

        async def one(i: int) -> Any:
            req = put(i)
            if i == 3:
                req.header.dataset = "gone"
            try:
                return (await c.call("Put", req, 5)).version
            except errors.MidtownError as e:
                return e

        out = await asyncio.gather(*[one(i) for i in range(40)])
        assert c.operations == 41 and c.calls <= 3  # 40 in one or two calls (one in flight)
        return dict(enumerate(out))

    results = asyncio.run(main())
    assert isinstance(results[3], errors.NotFound)
    assert {i: v for i, v in results.items() if i != 3} == {i: i for i in range(40) if i != 3}
    retried = [r for m, r in s.calls if m == "Put" and r.header.request_id == b"r5"]
    assert len(retried) == 1 and retried[0].header.first_attempt is False  # retried alone


class _Clock:
    """A fake clock for `gather`: sleeping advances it, and callers queue as it goes."""

    def __init__(self, arrivals: list[int]) -> None:
        self.now = 0.0
        self.arrivals = arrivals  # the queue's length after each step
        self.steps = 0

    def sleep(self, s: float) -> None:
        self.now += s
        self.steps += 1

    def queued(self) -> int:
        return self.arrivals[min(self.steps, len(self.arrivals) - 1)]


def test_gather_waits_while_callers_return_and_no_longer() -> None:
    from midtown.coalescing import GATHER_MAX_S, GATHER_STEP_S, gather

    def run(arrivals: list[int], last: int) -> int:
        c = _Clock(arrivals)
        gather(c.queued, last, c.sleep, lambda: c.now)
        assert c.now <= GATHER_MAX_S + GATHER_STEP_S  # never longer than its bound
        return c.steps

    assert run([8], 8) == 0  # all queued already: no wait at all
    assert run([1, 1], 8) == 1  # nobody comes: one step
    assert run([1, 3, 6, 8, 8], 8) == 3  # waits while they come, up to the last call's count
    assert run([1, 3, 5, 6, 6], 8) == 4  # ... or until they stop coming
    assert run(list(range(1, 1000)), 10_000) == int(GATHER_MAX_S / GATHER_STEP_S)  # bounded


def test_a_clients_routes_gather() -> None:
    from midtown.coalescing import gather

    assert Coalescer(Server())._route(None)._gather is gather


# ---------------------------------------------------------------- deadlines (issue 33)
SLACK_S = 0.5  # far below the slow calls' 3 s: a caller that waited for them fails the test


class Slow:
    """A stand-in for the client's call that honours the call's timeout as gRPC does: a
    call that would take longer than its timeout raises DeadlineExceeded when it runs
    out. The first call takes `first_s`; Many calls take `many_s`; others answer at once."""

    def __init__(self, first_s: float = 0.0, many_s: float = 0.0) -> None:
        self.first_s, self.many_s = first_s, many_s
        self.calls: list[tuple[str, float, Any]] = []  # method, timeout, request
        self.started = threading.Event()

    def __call__(self, method: str, req: Any, timeout_s: float, to: str | None = None) -> Any:
        took = self.first_s if not self.calls else self.many_s if method == "Many" else 0.0
        self.calls.append((method, timeout_s, req))
        self.started.set()
        if took > timeout_s:
            time.sleep(timeout_s)
            raise errors.DeadlineExceeded(f"{method}: no answer within the deadline")
        time.sleep(took)
        if method == "Many":
            return pb.ManyResponse(answers=[pb.ManyAnswer(put=pb.PutResponse(version=int(it.put.value[1:])))
                                            for it in req.items])
        return pb.PutResponse(version=int(req.value[1:]))


def _timed(c: Any, i: int, timeout_s: float, out: dict[int, Any]) -> None:
    t0 = time.monotonic()
    try:
        r: Any = c.call("Put", put(i), timeout_s).version
    except errors.MidtownError as e:
        r = e
    out[i] = (r, time.monotonic() - t0)


def test_an_operation_queued_behind_a_slow_call_ends_by_its_deadline_unsent() -> None:
    s = Slow(first_s=3.0)
    c = Coalescer(s)
    out: dict[int, Any] = {}
    first = threading.Thread(target=_timed, args=(c, 0, 5.0, out))
    first.start()
    assert s.started.wait(5)
    _timed(c, 1, 0.3, out)
    r, took = out[1]
    assert isinstance(r, errors.DeadlineExceeded) and "not sent" in str(r)
    assert took < 0.3 + SLACK_S
    first.join(10)
    assert out[0][0] == 0 and [m for m, _, _ in s.calls] == ["Put"]  # the late one never went


def test_a_coalesced_call_ends_by_its_earliest_deadline_and_the_others_retry_alone() -> None:
    """Two operations queued behind a call, deadlines 0.6 s and 4 s: their call gets the
    earlier deadline as its timeout, so the first ends by its own deadline; the second is
    retried alone, marked as a retry, by its own caller within its own deadline."""
    s = Slow(first_s=0.2, many_s=3.0)
    c = Coalescer(s)
    out: dict[int, Any] = {}
    first = threading.Thread(target=_timed, args=(c, 0, 5.0, out))
    first.start()
    assert s.started.wait(5)
    ts = [threading.Thread(target=_timed, args=(c, i, t, out)) for i, t in ((1, 0.6), (2, 4.0))]
    for t in ts:
        t.start()
    for t in [first, *ts]:
        t.join(10)
    assert [m for m, _, _ in s.calls] == ["Put", "Many", "Put"]
    assert s.calls[1][1] <= 0.6  # the coalesced call's timeout: the earliest deadline
    r1, took1 = out[1]
    assert isinstance(r1, errors.DeadlineExceeded) and took1 < 0.6 + SLACK_S
    r2, took2 = out[2]
    assert r2 == 2 and took2 < 4.0
    retried = s.calls[2][2]
    assert retried.header.request_id == b"r2" and retried.header.first_attempt is False


def test_async_an_operation_queued_behind_a_slow_call_ends_by_its_deadline() -> None:
    import asyncio

    from midtown.coalescing import AsyncCoalescer

    sent: list[int] = []

    async def call(method: str, req: Any, timeout_s: float, to: str | None = None) -> Any:
        sent.append(int(req.value[1:]))
        await asyncio.sleep(min(timeout_s, 3.0))
        return pb.PutResponse(version=int(req.value[1:]))

    async def main() -> tuple[Any, float]:
        c = AsyncCoalescer(call)
        slow = asyncio.ensure_future(c.call("Put", put(0), 5.0))
        await asyncio.sleep(0.05)
        t0 = time.monotonic()
        try:
            r: Any = await c.call("Put", put(1), 0.3)
        except errors.MidtownError as e:
            r = e
        took = time.monotonic() - t0
        slow.cancel()
        return r, took

    r, took = asyncio.run(main())
    assert isinstance(r, errors.DeadlineExceeded) and "not sent" in str(r)
    assert took < 0.3 + SLACK_S and sent == [0]
