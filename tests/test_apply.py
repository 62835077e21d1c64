"""The pure apply step against a plain dictionary model (hypothesis), and its promises:
all or nothing, request-id dedup, expiry by log time, equal digests for equal histories."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from record.model import (
    Cas,
    Delete,
    Get,
    Incr,
    OpStatus,
    Put,
    Record,
    Scan,
)
from storage_node import keys
from storage_node.apply import DEDUP_WINDOW_MS
from tests.sim.store import MemState


def rec(*ops, rid: bytes = b"", ttl: int = 0) -> Record:  # type: ignore[no-untyped-def]
    return Record(rid, "", "ds#1", 3, b"pk", tuple(ops), ttl)


LKEYS = st.sampled_from([b"a", b"b", b"c"])
VALS = st.sampled_from([b"1", b"2", b"x"])
OPS = st.one_of(
    st.builds(Put, LKEYS, VALS), st.builds(Delete, LKEYS), st.builds(Get, LKEYS),
    st.builds(lambda k, e, n: Cas(k, expected_value=e, new_value=n), LKEYS, VALS, VALS),
    st.builds(lambda k, n: Cas(k, expect_absent=True, new_value=n), LKEYS, VALS),
    st.builds(Incr, LKEYS, st.integers(-5, 5)),
)


@settings(max_examples=300)
@given(st.lists(st.lists(OPS, min_size=1, max_size=4), max_size=25))
def test_apply_matches_a_dictionary_model(batches: list[list]) -> None:  # type: ignore[type-arg]
    s = MemState()
    model: dict[bytes, bytes] = {}
    for pos, ops in enumerate(batches):
        r = s.run(rec(*ops), pos, 1000 + pos)
        trial = dict(model)
        ok = True
        for op, res in zip(ops, r.results, strict=True):
            if isinstance(op, Put):
                trial[op.local_key] = op.value
            elif isinstance(op, Delete):
                assert res.found == (op.local_key in trial)
                trial.pop(op.local_key, None)
            elif isinstance(op, Get):
                assert (res.value.value if res.value else None) == trial.get(op.local_key)
            elif isinstance(op, Cas):
                cur = trial.get(op.local_key)
                holds = cur is None if op.expect_absent else cur == op.expected_value
                assert (res.status is OpStatus.DONE) == holds
                if holds:
                    trial[op.local_key] = op.new_value
                else:
                    ok = False
            elif isinstance(op, Incr):
                cur = trial.get(op.local_key)
                try:
                    n = int(cur) + op.delta if cur is not None else op.delta
                except ValueError:
                    assert res.status is OpStatus.NOT_AN_INTEGER
                    ok = False
                    continue
                trial[op.local_key] = str(n).encode()
        assert r.applied == ok
        if ok:  # all or nothing
            model = trial
        stored = {k[len(keys.partition_prefix(3, "ds#1", b"pk")):]: v.value for k, v in s.values.items()}
        assert stored == model


@given(st.lists(st.lists(OPS, min_size=1, max_size=3), max_size=15))
def test_equal_histories_give_equal_digests(batches: list[list]) -> None:  # type: ignore[type-arg]
    a, b = MemState(), MemState()
    for pos, ops in enumerate(batches):
        a.run(rec(*ops), pos, pos)
        b.run(rec(*ops), pos, pos)
    assert a.digest(3) == b.digest(3)
    if batches:
        c = MemState()
        for pos, ops in enumerate(batches):
            c.run(rec(*ops), pos + 1, pos)  # the same operations at other positions
        assert c.digest(3) != a.digest(3)


def test_retry_returns_first_outcome_within_the_window() -> None:
    s = MemState()
    first = s.run(rec(Incr(b"n", 1), rid=b"r1"), 0, 1000)
    again = s.run(rec(Incr(b"n", 1), rid=b"r1"), 1, 2000)
    assert again.duplicate and again.results == first.results
    assert s.run(rec(Get(b"n")), 2, 2000).results[0].value.value == b"1"  # type: ignore[union-attr]
    late = s.run(rec(Incr(b"n", 1), rid=b"r1"), 3, 1000 + DEDUP_WINDOW_MS + 1)
    assert not late.duplicate and late.results[0].value.value == b"2"  # type: ignore[union-attr]


def test_expiry_is_judged_by_log_time() -> None:
    s = MemState()
    s.run(rec(Put(b"t", b"v", ttl_ms=100)), 0, 1000)
    assert s.run(rec(Get(b"t")), 1, 1099).results[0].found
    assert not s.run(rec(Get(b"t")), 2, 1100).results[0].found
    assert s.run(rec(Cas(b"t", expect_absent=True, new_value=b"w")), 3, 1100).applied
    s.run(rec(Put(b"d", b"v")), 4, 2000)  # the dataset's default TTL applies when none is given
    s.run(rec(Put(b"e", b"v"), ttl=50), 5, 2000)
    r = s.run(rec(Scan()), 6, 2060)
    assert [k for k, _ in r.results[0].items] == [b"d", b"t"]


def test_versions_are_positions_plus_one_and_increment_bounds() -> None:
    s = MemState()
    assert s.run(rec(Put(b"k", b"v")), 0, 0).results[0].value.version == 1  # type: ignore[union-attr]
    s.run(rec(Put(b"n", str(2**63 - 1).encode())), 1, 0)
    r = s.run(rec(Incr(b"n", 1)), 2, 0)
    assert r.results[0].status is OpStatus.OVERFLOW and not r.applied
