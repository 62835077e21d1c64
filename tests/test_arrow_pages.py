"""A shard scan's Arrow page holds what decoding each stored entry alone gives: the same
keys, values, versions and expiries, the expired entries left out (storage_node/arrow_pages.py
cuts the page into columns with array operations)."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from record.model import Stored
from storage_node import arrow_pages, keys

LOG_TIME = 1_000_000

entries = st.lists(st.tuples(st.binary(min_size=0, max_size=40), st.binary(min_size=0, max_size=40),
                             st.binary(max_size=300), st.integers(0, 2**63 - 1),
                             st.sampled_from([0, 1, LOG_TIME - 1, LOG_TIME, LOG_TIME + 1, 2**63 - 1])),
                   max_size=60)


@settings(max_examples=200, deadline=None)
@given(entries, st.integers(0, 500), st.text(min_size=1, max_size=12))
def test_columns_hold_what_each_entry_decoded_alone_holds(items: list, shard: int, dataset: str) -> None:
    prefix = keys.dataset_shard_prefix(shard, dataset)
    ks = [keys.value_key_under(prefix, pk, lk) for pk, lk, _, _, _ in items]
    vs = [keys.encode_stored(Stored(v, ver, exp)) for _, _, v, ver, exp in items]
    batch = pa.ipc.open_stream(arrow_pages.ipc(ks, vs, len(prefix), LOG_TIME)).read_next_batch()
    want = []
    for k, v in zip(ks, vs, strict=True):
        s = keys.decode_stored(v)
        if s.live_at(LOG_TIME):
            pk, lk = keys.split_value_key(k, len(prefix))
            want.append({"partition_key": pk, "local_key": lk, "value": s.value, "version": s.version,
                         "expires_at": s.expires_at_ms or None})
    assert batch.schema.names == list(arrow_pages.NAMES)
    assert batch.to_pylist() == want
