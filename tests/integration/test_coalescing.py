"""Coalesced calls on a real cluster: KV.Many handles each item as its own call would (its
own checks, outcome and refusal), and a Client's threads that issue operations while a
call is in flight get each their own, correct answer from one coalesced call."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from cluster import Cluster
from midtown import Client, Op, errors
from midtown_pb import kv_pb2 as pb
from midtown_pb import kv_pb2_grpc
from tests.integration.conftest import metric, started

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with started(Path(tmp_path_factory.mktemp("coalescing")) / "c") as c:
        c.create_dataset("d")
        yield c


def _h(dataset: str = "d", rid: bytes = b"") -> pb.RequestHeader:
    return pb.RequestHeader(dataset=dataset, request_id=rid, first_attempt=bool(rid))


def _key(p: bytes, lk: bytes = b"k") -> pb.Key:
    return pb.Key(partition=p, local=lk)


def test_many_answers_each_item_as_its_own_call_would(cc: Cluster) -> None:
    stub = kv_pb2_grpc.KVStub(grpc.insecure_channel(cc.coordinator_addrs[0]))
    with Client(cc.coordinator_addrs, coalesce=False) as c:
        c.put("d", "a", "k", b"old")
    req = pb.ManyRequest(items=[
        pb.ManyItem(put=pb.PutRequest(header=_h(rid=b"m1"), key=_key(b"b"), value=b"vb")),
        pb.ManyItem(check_and_set=pb.CheckAndSetRequest(header=_h(rid=b"m2"), key=_key(b"a"),
                                                        expected_value=b"old", new_value=b"new")),
        pb.ManyItem(check_and_set=pb.CheckAndSetRequest(header=_h(rid=b"m3"), key=_key(b"c"),
                                                        expected_value=b"x", new_value=b"y")),
        pb.ManyItem(increment=pb.IncrementRequest(header=_h(rid=b"m4"), key=_key(b"n"), delta=5)),
        pb.ManyItem(put=pb.PutRequest(header=_h("nope", b"m5"), key=_key(b"b"), value=b"v")),
        pb.ManyItem(),
        pb.ManyItem(put=pb.PutRequest(header=_h(rid=b"m7"), key=_key(b""), value=b"v")),
    ])
    a = stub.Many(req, timeout=20).answers
    assert len(a) == 7
    assert a[0].code == 0 and a[0].put.version > 0
    assert a[1].code == 0 and a[1].check_and_set.succeeded
    assert a[2].code == 0 and not a[2].check_and_set.succeeded  # a failed condition is an outcome
    assert a[3].code == 0 and a[3].increment.value == 5
    assert a[4].code == grpc.StatusCode.NOT_FOUND.value[0] and "header.dataset" in a[4].message
    assert a[5].code == grpc.StatusCode.INVALID_ARGUMENT.value[0] and a[5].message.startswith("items[5]")
    assert a[6].code == grpc.StatusCode.INVALID_ARGUMENT.value[0] and "key.partition" in a[6].message
    # The items applied, each once: sent again with the same request ids (marked as
    # retries, as the SDK does), they return the first outcomes.
    retry = pb.ManyRequest(items=req.items[:4])
    for item in retry.items:
        getattr(item, item.WhichOneof("call")).header.first_attempt = False
    again = stub.Many(retry, timeout=20).answers
    assert again[0].put.version == a[0].put.version and again[3].increment.value == 5
    with Client(cc.coordinator_addrs, coalesce=False) as c:
        assert c.get("d", "a", "k").value == b"new"  # type: ignore[union-attr]
        assert c.get("d", "b", "k").value == b"vb"  # type: ignore[union-attr]
    with pytest.raises(grpc.RpcError) as e:
        stub.Many(pb.ManyRequest(), timeout=5)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "items" in (e.value.details() or "")


def test_threads_of_one_client_share_calls_and_each_get_their_own_answer(cc: Cluster) -> None:
    with Client(cc.coordinator_addrs, timeout=20) as c:
        co = c._coalescer
        assert co is not None
        real = co._call
        first = threading.Event()

        def held(method: str, req: Any, timeout_s: float, to: str | None = None) -> Any:
            # The first call waits (before it is sent) until 23 more operations queue.
            if not first.is_set():
                first.set()
                deadline = time.monotonic() + 10
                while len(co._routes[None]._q) < 23 and time.monotonic() < deadline:
                    time.sleep(0.005)
            return real(method, req, timeout_s, to)

        co._call = held
        out: dict[int, Any] = {}

        def work(i: int) -> None:
            try:
                if i % 3 == 0:
                    out[i] = c.put("d", f"t{i}", "k", b"v%d" % i)
                elif i % 3 == 1:
                    out[i] = c.incr("d", f"t{i}", "n", i)
                elif i == 23:
                    out[i] = c.put("nope", "x", "k", b"v")
                else:
                    out[i] = c.cas("d", f"t{i}", "k", b"c%d" % i, expect_absent=True)
            except errors.MidtownError as e:
                out[i] = e

        threads = [threading.Thread(target=work, args=(i,)) for i in range(24)]
        threads[0].start()
        assert first.wait(10)
        for t in threads[1:]:
            t.start()
        for t in threads:
            t.join(30)
        assert c.coalescing == (2, 24)  # the first alone, the 23 queued behind it together
        for i in range(23):
            if i % 3 == 0:
                assert isinstance(out[i], int) and out[i] > 0
                assert c.get("d", f"t{i}", "k").value == b"v%d" % i  # type: ignore[union-attr]
            elif i % 3 == 1:
                assert out[i] == i
            else:
                assert out[i].succeeded
                assert c.get("d", f"t{i}", "k").value == b"c%d" % i  # type: ignore[union-attr]
        assert isinstance(out[23], errors.NotFound)  # failed alone


def test_a_coalesced_call_over_the_item_limit_is_refused_whole(cc: Cluster) -> None:
    from coordinator.limits import MANY_ITEMS_MAX

    stub = kv_pb2_grpc.KVStub(grpc.insecure_channel(cc.coordinator_addrs[0]))
    item = pb.ManyItem(get=pb.GetRequest(header=_h(), key=_key(b"a")))
    with pytest.raises(grpc.RpcError) as e:
        stub.Many(pb.ManyRequest(items=[item] * (MANY_ITEMS_MAX + 1)), timeout=10)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert f"items: {MANY_ITEMS_MAX + 1} items, the limit is {MANY_ITEMS_MAX}" in (e.value.details() or "")


def _counter(c: Cluster, name: str) -> float:
    """The sum of a coordinator-0 counter over its labels (its /metrics page)."""
    return metric(c, "coordinator-0", name)


def test_a_coalesced_call_takes_one_append_and_one_read_round_per_log(cc: Cluster) -> None:
    """Behind the coordinator a coalesced call costs calls per log, not per item: its
    writes go in one Append per log, its strong reads in one ReadIndex round per log, and
    each item still gets its own outcome (reads see the writes acknowledged before them)."""
    from catalog import registry
    from log.client import LogClient

    logs = LogClient(cc.zk_hosts)
    try:
        kv = registry.read_kv(logs.zk)
        assert kv is not None
        n_logs = min(kv.logs, logs.topology().logs)
    finally:
        logs.close()
    stub = kv_pb2_grpc.KVStub(grpc.insecure_channel(cc.coordinator_addrs[0]))
    parts = [b"w%d" % i for i in range(30)]
    writes = []
    for i, p in enumerate(parts):
        h = _h(rid=b"one-append-%d" % i)
        if i % 3 == 0:
            writes.append(pb.ManyItem(put=pb.PutRequest(header=h, key=_key(p), value=b"v%d" % i)))
        elif i % 3 == 1:
            writes.append(pb.ManyItem(increment=pb.IncrementRequest(header=h, key=_key(p), delta=i)))
        else:
            writes.append(pb.ManyItem(check_and_set=pb.CheckAndSetRequest(
                header=h, key=_key(p), expect_absent=True, new_value=b"c%d" % i)))
    before = _counter(cc, "midtown_coordinator_log_appends_total")
    a = stub.Many(pb.ManyRequest(items=writes), timeout=30).answers
    appends = _counter(cc, "midtown_coordinator_log_appends_total") - before
    assert 1 <= appends <= n_logs
    assert all(x.code == 0 for x in a), [x.message for x in a if x.code]
    assert [a[i].increment.value for i in range(1, 30, 3)] == list(range(1, 30, 3))
    assert all(a[i].check_and_set.succeeded for i in range(2, 30, 3))

    reads = [pb.ManyItem(get=pb.GetRequest(header=_h(), key=_key(p))) for p in parts]
    before = _counter(cc, "midtown_read_index_rounds_total")
    got = stub.Many(pb.ManyRequest(items=reads), timeout=30).answers
    rounds = _counter(cc, "midtown_read_index_rounds_total") - before
    assert 1 <= rounds <= n_logs
    for i, g in enumerate(got):
        assert g.code == 0 and g.get.found
        want = b"v%d" % i if i % 3 == 0 else b"%d" % i if i % 3 == 1 else b"c%d" % i
        assert g.get.value.value == want


class _NoThreads(concurrent.futures.ThreadPoolExecutor):
    def submit(self, *a: Any, **k: Any) -> Any:  # type: ignore[override]
        raise AssertionError("AsyncClient used a thread for an operation")


def test_async_client_runs_on_grpc_aio_and_coalesces_coroutines(cc: Cluster) -> None:
    """AsyncClient's operations run on the event loop (no thread: the loop's executor
    refuses work) and coroutines' single-key operations travel together, each answered
    correctly; a bad one fails alone with its own error."""
    from midtown import AsyncClient

    async def main() -> None:
        asyncio.get_running_loop().set_default_executor(_NoThreads(max_workers=1))
        async with AsyncClient(cc.coordinator_addrs, timeout=20) as ac:
            assert await ac.put("d", "async", "k", b"v") > 0
            got = await ac.get("d", "async", "k")
            assert got is not None and got.value == b"v"
            calls0, ops0 = ac.coalescing
            n = await asyncio.gather(*[ac.incr("d", "async-n", "c") for _ in range(50)])
            calls, ops = ac.coalescing[0] - calls0, ac.coalescing[1] - ops0
            assert sorted(n) == list(range(1, 51))  # each counted once, each its own answer
            assert ops == 50 and calls < ops  # they travelled together
            out = await asyncio.gather(ac.put("nope", "x", "k", b"v"), ac.put("d", "x", "k", b"v"),
                                       return_exceptions=True)
            assert isinstance(out[0], errors.NotFound) and isinstance(out[1], int)
            with pytest.raises(errors.InvalidArgument, match="value"):
                await ac.put("d", "x", "k", "not bytes")
            with pytest.raises(errors.InvalidArgument, match="timeout"):
                await ac.get("d", "x", "k", timeout=-1)  # a coalesced operation
            with pytest.raises(errors.InvalidArgument, match="timeout"):
                await ac.shards("d", timeout=0)  # one of its own call
            r = await ac.batch("d", [Op.put("ab", "1", b"x"), Op.incr("ab", "n", 2)])
            assert r.applied and r.results[1].value is not None and r.results[1].value.value == b"2"
            assert [i.local_key async for i in ac.scan_all("d", "ab")] == [b"1", b"n"]
            shards = await ac.shards("d")
            found = []
            for s in range(shards):
                async for page in ac.scan_shard("d", s):
                    found += [(i.partition_key, i.local_key) for i in page.items]
            assert (b"async", b"k") in found and (b"ab", b"n") in found

    asyncio.run(main())
