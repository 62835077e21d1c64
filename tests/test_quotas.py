"""Storage quotas, the pure parts: sizes as users write them, which requests add data,
what a dataset uses according to the nodes' counts, and the counting itself."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator import limits, quotas
from midtown_pb import kv_pb2 as pb
from storage_node import keys, usage
from storage_node.model import Stored

UNITS = {"": 1, "B": 1, "KB": 1000, "MB": 10**6, "GB": 10**9, "TB": 10**12, "KiB": 1024,
         "MiB": 1024**2, "GiB": 1024**3, "TiB": 1024**4}


@given(st.integers(0, 10**6), st.sampled_from(sorted(UNITS)), st.sampled_from(["", " "]))
def test_sizes_in_every_unit(n: int, unit: str, space: str) -> None:
    assert quotas.parse_size(f"{n}{space}{unit}") == n * UNITS[unit]
    assert quotas.parse_size(f"{n}{unit.lower()}") == n * UNITS[unit]


def test_fractions_none_and_what_is_refused() -> None:
    assert quotas.parse_size("1.5GiB") == 3 * 1024**3 // 2
    assert quotas.parse_size("none") == quotas.parse_size("0") == 0
    for bad in ("", "lots", "-1GB", "10 parsecs", "GB", "1e9", str(limits.QUOTA_BYTES_MAX + 1)):
        with pytest.raises(ValueError, match="size|largest"):
            quotas.parse_size(bad)
    assert quotas.format_size(1536) == "1.5 KiB" and quotas.format_size(999) == "999 B"


@given(st.text(max_size=12))
def test_any_text_is_a_size_or_a_clear_error(text: str) -> None:
    try:
        n = quotas.parse_size(text)
    except ValueError as e:
        assert repr(text) in str(e)
    else:
        assert 0 <= n <= limits.QUOTA_BYTES_MAX


def test_the_count_of_the_furthest_member_counts() -> None:
    reports = {0: {"a#1": 500, "b#2": 7}, 1: {"a#1": 900}, 2: {"a#1": 10_000}}
    assert quotas.used(reports, [0, 1], "a#1") == 900  # node 2 is no member
    assert quotas.used(reports, [0, 1], "b#2") == 7
    assert quotas.used(reports, [0, 1], "c#3") == 0
    assert quotas.used({}, [0, 1, 2], "a#1") == 0
    assert not quotas.over(0, 10**9)  # no quota
    assert not quotas.over(1000, 999) and quotas.over(1000, 1000)


def _op(kind: str) -> pb.Op:
    return {"put": pb.Op(put=pb.PutOp(local_key=b"k")), "delete": pb.Op(delete=pb.DeleteOp(local_key=b"k")),
            "get": pb.Op(get=pb.GetOp(local_key=b"k")), "incr": pb.Op(incr=pb.IncrementOp(local_key=b"k")),
            "cas": pb.Op(cas=pb.CheckAndSetOp(local_key=b"k")),
            "cas-delete": pb.Op(cas=pb.CheckAndSetOp(local_key=b"k", delete=True))}[kind]


@given(st.lists(st.sampled_from(["put", "delete", "get", "incr", "cas", "cas-delete"]), max_size=6))
def test_a_batch_adds_data_when_any_of_its_operations_can(kinds: list[str]) -> None:
    req = pb.BatchRequest(ops=[_op(k) for k in kinds])
    assert quotas.adds_data(req) == any(k in ("put", "incr", "cas") for k in kinds)


def test_which_requests_add_data() -> None:
    assert quotas.adds_data(pb.PutRequest()) and quotas.adds_data(pb.IncrementRequest())
    assert quotas.adds_data(pb.CheckAndSetRequest())
    assert not quotas.adds_data(pb.CheckAndSetRequest(delete=True))
    for req in (pb.DeleteRequest(), pb.GetRequest(), pb.ScanRequest()):
        assert not quotas.adds_data(req)


@given(st.lists(st.tuples(st.sampled_from(["a#1", "bb#22", "c_d-e#3"]), st.integers(0, 63),
                          st.binary(max_size=8), st.binary(max_size=8), st.binary(max_size=50),
                          st.booleans()), max_size=30))
def test_counting_sums_keys_and_values_per_dataset(
        rows: list[tuple[str, int, bytes, bytes, bytes, bool]]) -> None:
    items, want = [], {}
    for dataset, shard, pkey, lkey, value, eventual in rows:
        k = keys.value_key(shard, dataset, pkey, lkey)
        k = keys.eventual(k) if eventual else k
        v = keys.encode_stored(Stored(value, 1, 0))
        items.append((k, v))
        want[dataset] = want.get(dataset, 0) + len(k) + len(v)
    assert usage.tally(items) == want
