"""The Spark connector's read planning without Spark: whole shards packed into partitions
(spark_connector/source.py pack_shards), and the pages' rows filtered and decoded as
Arrow columns."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from spark_connector import options as opt
from spark_connector.source import _decoded, _ours, pack_shards


@given(sizes=st.dictionaries(st.integers(0, 255), st.integers(0, 10**9), max_size=64),
       split=st.integers(1, 2**30), least=st.integers(1, 16))
def test_every_shard_is_read_once_in_about_split_sized_groups(sizes: dict[int, int], split: int,
                                                              least: int) -> None:
    groups = pack_shards(sizes, split, least)
    assert sorted(s for g in groups for s in g) == sorted(sizes), "each shard in exactly one group"
    assert all(list(g) == sorted(g) for g in groups)
    if sizes:
        total = sum(sizes.values())
        want = min(len(sizes), max(least, -(-total // split)))
        assert len(groups) == want
        # largest first into the emptiest group: no group exceeds the mean by more than a shard
        biggest = max(sizes.values())
        assert max(sum(sizes[s] for s in g) for g in groups) <= total / want + biggest


def test_small_shards_share_a_task_and_a_dataset_still_gets_several() -> None:
    assert len(pack_shards({s: 1000 for s in range(64)}, 64 << 20, 4)) == 4
    assert len(pack_shards({s: 10 << 20 for s in range(64)}, 64 << 20, 4)) == 10
    assert pack_shards({3: 5}, 64 << 20, 4) == [(3,)]


def test_bookkeeping_rows_are_left_out_and_values_decoded() -> None:
    batch = pa.RecordBatch.from_arrays(
        [pa.array([b"a", opt.INTERNAL_PARTITION_PREFIX + b"q", b"\xff"], pa.binary()),
         pa.array([b"k1", b"k2", b"k3"], pa.binary()), pa.array([b"v1", b"v2", b"v3"], pa.binary()),
         pa.array([1, 2, 3], pa.int64()), pa.array([None, 5, None], pa.int64())],
        names=["partition_key", "local_key", "value", "version", "expires_at"])
    ours = _ours(batch)
    assert ours.column(0).to_pylist() == [b"a", b"\xff"]
    text = _decoded(ours)  # one key is not UTF-8: replaced, as row by row
    assert text.column(0).to_pylist() == ["a", "\ufffd"] and text.column(2).to_pylist() == ["v1", "v3"]
    assert _decoded(_ours(batch.slice(0, 1))).column(1).type == pa.string()
