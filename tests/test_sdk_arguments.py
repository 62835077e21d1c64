"""Bad arguments to the SDK are InvalidArgument naming the field, before any call is made
(no cluster here: the address refuses connections)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from midtown import Client, InvalidArgument, MidtownError, Op, Write

CASES: list[tuple[str, Any, str]] = [
    ("put ttl", lambda c: c.put("d", "p", "l", b"v", ttl_ms=-5), "ttl_ms"),
    ("put value", lambda c: c.put("d", "p", "l", "text"), "value"),
    ("put key", lambda c: c.put("d", 42, "l", b"v"), "partition"),
    ("local key", lambda c: c.get("d", "p", 3.5), "local"),
    ("incr delta", lambda c: c.incr("d", "p", "l", 2**64), "delta"),
    ("incr ttl", lambda c: c.incr("d", "p", "l", 1, ttl_ms=-1), "ttl_ms"),
    ("cas version", lambda c: c.cas("d", "p", "l", b"v", expected_version=-1), "expected_version"),
    ("cas expected", lambda c: c.cas("d", "p", "l", b"v", expected="x"), "expected"),
    ("scan limit", lambda c: c.scan("d", "p", limit=0), "limit"),
    ("consistency", lambda c: c.get("d", "p", "l", consistency="weak"), "consistency"),
    ("timeout", lambda c: c.get("d", "p", "l", timeout=-1), "timeout"),
    ("dataset", lambda c: c.get(7, "p", "l"), "dataset"),
    ("request id", lambda c: c.put("d", "p", "l", b"v", request_id="x"), "request_id"),
    ("event id", lambda c: c.put("d", "p", "l", b"v", event_id=5), "event_id"),
    ("batch op", lambda c: c.batch("d", [Op.put("p", "l", b"v", ttl_ms=-2)]), "ttl_ms"),
    ("bulk write", lambda c: c.write_many("d", [Write.incr("p", "l", "one")]), "delta"),
    ("bulk empty", lambda c: c.write_many("d", []), "writes"),
    ("shard", lambda c: c.scan_shard("d", -1), "shard"),
    ("scan page", lambda c: c.scan_shard("d", 0, page=0), "page"),
    ("scan bytes", lambda c: c.scan_shard("d", 0, max_bytes=-1), "max_bytes"),
    ("scan token", lambda c: c.scan_shard("d", 0, token=5), "token"),  # type: ignore[arg-type]
    ("scan key", lambda c: c.scan_shard("d", 0, partition_key=1.5), "partition_key"),  # type: ignore[arg-type]
    ("scan arrow", lambda c: c.scan_shard("d", 0, arrow="yes"), "arrow"),  # type: ignore[arg-type]
    ("split bytes", lambda c: c.shard_splits("d", 0, split_bytes=-1), "split_bytes"),
    ("split shard", lambda c: c.shard_splits("d", 2**32), "shard"),
    ("bounded, no bound", lambda c: c.get("d", "p", "l", consistency="bounded"), "max_staleness_ms"),
    ("bounded, 0", lambda c: c.get("d", "p", "l", consistency="bounded", max_staleness_ms=0),
     "max_staleness_ms"),
    ("bounded, a week", lambda c: c.scan("d", "p", consistency="bounded", max_staleness_ms=7 * 86_400_000),
     "max_staleness_ms"),
    ("a bound unasked", lambda c: c.scan("d", "p", max_staleness_ms=1000), "max_staleness_ms"),
    ("bounded shard scan", lambda c: c.scan_shard("d", 0, consistency="bounded"), "consistency"),
]


@pytest.mark.parametrize("name,call,field", CASES, ids=[c[0] for c in CASES])
def test_bad_arguments_name_their_field(name: str, call: Any, field: str) -> None:
    with Client("127.0.0.1:1", timeout=1, retries=0) as c, pytest.raises(InvalidArgument) as ei:
        call(c)
    assert ei.value.message.startswith(field), ei.value.message


ANY = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=5),
                st.binary(max_size=5), st.lists(st.integers(), max_size=2))


@settings(max_examples=60, deadline=None)
@given(partition=ANY, local=ANY, value=ANY, ttl=ANY, delta=ANY)
def test_any_argument_is_a_clear_error_or_a_call(partition: Any, local: Any, value: Any, ttl: Any,
                                                 delta: Any) -> None:
    """Whatever is passed, the SDK raises one of its own errors (a bad argument names its
    field), never a TypeError or a protobuf ValueError from deep inside."""
    with Client("127.0.0.1:1", timeout=0.5, retries=0) as c:
        for call in (lambda: c.put("d", partition, local, value, ttl_ms=ttl),
                     lambda: c.incr("d", partition, local, delta, ttl_ms=ttl)):
            try:
                call()
            except InvalidArgument as e:
                assert e.message.split(":")[0] in ("partition", "local", "value", "ttl_ms", "delta")
            except MidtownError:
                pass  # a well-formed call to an address where nothing listens


@settings(max_examples=80, deadline=None)
@given(consistency=st.sampled_from(["strong", "eventual", "bounded", "weak", ""]),
       bound=st.one_of(st.none(), ANY), dc=st.one_of(st.none(), ANY))
def test_any_bound_and_data_center_is_a_clear_error_or_a_read(consistency: str, bound: Any, dc: Any) -> None:
    """A bounded read's arguments: a bound (whole ms, 1 ms to a day) with consistency
    "bounded" and only then; a data center's name. Anything else is InvalidArgument naming
    the field, before any call."""
    try:
        c = Client("127.0.0.1:1", timeout=0.3, retries=0, dc=dc)
    except InvalidArgument as e:
        assert e.message.startswith("dc: ")
        return
    with c:
        try:
            c.get("d", "p", "l", consistency=consistency, max_staleness_ms=bound)
        except InvalidArgument as e:
            assert e.message.split(":")[0] in ("consistency", "max_staleness_ms"), e.message
            ok = (consistency in ("strong", "eventual") and bound is None) or (
                consistency == "bounded" and isinstance(bound, int) and not isinstance(bound, bool)
                and 1 <= bound <= 86_400_000)
            assert not ok, e.message
        except MidtownError:  # a well-formed call to an address where nothing listens
            assert (consistency in ("strong", "eventual") and bound is None) or consistency == "bounded"


# Client's operations that AsyncClient has as coroutines with the same parameters.
OPERATIONS = ["get", "put", "delete", "cas", "incr", "batch", "write_many", "shards", "shard_splits", "scan"]


def test_the_async_client_has_each_operation_typed_with_clients_parameters() -> None:
    import inspect

    from midtown import AsyncClient
    assert "__getattr__" not in vars(AsyncClient)  # no dispatch by name: each is written out
    for name in OPERATIONS:
        sync, coro = getattr(Client, name), getattr(AsyncClient, name)
        assert inspect.iscoroutinefunction(coro), name
        assert inspect.signature(coro).parameters == inspect.signature(sync).parameters, name
        assert inspect.signature(coro).return_annotation == inspect.signature(sync).return_annotation, name


ASYNC_CASES = [c for c in CASES if c[0] not in ("shard", "scan page", "scan bytes", "scan token", "scan key",
                                                 "scan arrow", "bounded shard scan")]


@pytest.mark.parametrize("name,call,field", ASYNC_CASES, ids=[c[0] for c in ASYNC_CASES])
def test_bad_arguments_to_the_async_client_name_their_field(name: str, call: Any, field: str) -> None:
    import asyncio

    from midtown import AsyncClient

    async def run() -> None:
        async with AsyncClient("127.0.0.1:1", timeout=1, retries=0) as c:
            with pytest.raises(InvalidArgument) as ei:
                await call(c)
            assert ei.value.message.startswith(field), ei.value.message
    asyncio.run(run())


def test_arrow_pages_without_pyarrow_say_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "pyarrow" else real(name, *a))
    with Client("127.0.0.1:1", timeout=1) as c, \
            pytest.raises(InvalidArgument, match="arrow: .*pip install pyarrow"):
        c.scan_shard("d", 0, arrow=True)
