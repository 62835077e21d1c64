"""A single-key request and its dataset to one record (coordinator/records.py), pure."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from catalog.datasets import Dataset
from catalog.routing import shard_of
from coordinator.records import record_for
from record.model import Group, Incr, Put
from runtime.refusals import Refusal

D = Dataset(name="events", incarnation=3, ttl_ms=5000, dedup_window_ms=60_000, dedup_max_ids=10)


@given(st.binary(min_size=1, max_size=40), st.binary(max_size=20), st.integers(1, 512))
def test_the_record_carries_the_dataset_and_the_shard(pkey: bytes, eid: bytes, shards: int) -> None:
    ops = (Put(b"l", b"v"), Incr(b"n", 2))
    r = record_for(D, b"rid", "cb:1", pkey, ops, eid, shards)
    assert (r.request_id, r.callback, r.dataset, r.default_ttl_ms) == (b"rid", "cb:1", D.id, D.ttl_ms)
    assert r.shard == shard_of(D.id, pkey, shards) < shards
    if eid:  # at most once per event id: one group, with the dataset's window and cap
        assert r.groups == (Group(pkey, ops, eid),) and not r.ops and not r.partition_key
        assert (r.dedup_window_ms, r.dedup_max_ids) == (D.dedup_window_ms, D.dedup_max_ids)
    else:
        assert (r.partition_key, r.ops, r.groups) == (pkey, ops, ())


@pytest.mark.parametrize("pkey,eid,field", [(b"", b"", "key.partition"), (b"x" * 2000, b"", "key.partition"),
                                            (b"p", b"e" * 300, "header.event_id")])
def test_a_bad_key_or_id_is_refused_naming_it(pkey: bytes, eid: bytes, field: str) -> None:
    with pytest.raises(Refusal) as ei:
        record_for(D, b"rid", "", pkey, (Put(b"l", b"v"),), eid, 64)
    assert ei.value.text.startswith(field + ":")
