"""Storage quotas, the pure parts: sizes as users write them, which requests add data,
what a dataset uses according to the nodes' counts, and the counting itself (in pieces,
over a real RocksDB)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from catalog import datasets
from catalog import usage as catalog_usage
from coordinator import limits, quotas
from midtown_pb import kv_pb2 as pb
from record import sizes
from record.model import Stored
from storage_node import keys, usage
from storage_node.store import NodeStore

UNITS = {"": 1, "B": 1, "KB": 1000, "MB": 10**6, "GB": 10**9, "TB": 10**12, "KiB": 1024,
         "MiB": 1024**2, "GiB": 1024**3, "TiB": 1024**4}


@given(st.integers(0, 10**6), st.sampled_from(sorted(UNITS)), st.sampled_from(["", " "]))
def test_sizes_in_every_unit(n: int, unit: str, space: str) -> None:
    assert datasets.parse_size(f"{n}{space}{unit}") == n * UNITS[unit]
    assert datasets.parse_size(f"{n}{unit.lower()}") == n * UNITS[unit]


def test_fractions_none_and_what_is_refused() -> None:
    assert datasets.parse_size("1.5GiB") == 3 * 1024**3 // 2
    assert datasets.parse_size("none") == datasets.parse_size("0") == 0
    for bad in ("", "lots", "-1GB", "10 parsecs", "GB", "1e9", str(limits.QUOTA_BYTES_MAX + 1)):
        with pytest.raises(ValueError, match="size|largest"):
            datasets.parse_size(bad)
    assert quotas.format_size(1536) == "1.5 KiB" and quotas.format_size(999) == "999 B"


@given(st.text(max_size=12))
def test_any_text_is_a_size_or_a_clear_error(text: str) -> None:
    try:
        n = datasets.parse_size(text)
    except ValueError as e:
        assert repr(text) in str(e)
    else:
        assert 0 <= n <= limits.QUOTA_BYTES_MAX


def test_the_count_of_the_furthest_member_counts() -> None:
    R = catalog_usage.Report
    reports = {0: R(100, {"a#1": 500, "b#2": 7}), 1: R(200, {"a#1": 900}), 2: R(300, {"a#1": 10_000})}
    assert catalog_usage.used((reports, (0, 1), 0), "a#1") == (900, 200)  # node 2 is no member
    assert catalog_usage.used((reports, (0, 1), 0), "b#2") == (7, 100)
    assert catalog_usage.used((reports, (0, 1), 0), "c#3") == (0, 200)
    assert catalog_usage.used(({}, (0, 1, 2), 0), "a#1") == (0, 0)
    # Replica sets, each shard on 2 of the 3 members: what they hold, counted twice,
    # as of the oldest count.
    assert catalog_usage.used((reports, (0, 1, 2), 2), "a#1") == ((500 + 900 + 10_000) // 2, 100)
    assert catalog_usage.used(({}, (0, 1, 2), 2), "a#1") == (0, 0)
    assert not quotas.over(0, 10**9)  # no quota
    assert not quotas.over(1000, 999) and quotas.over(1000, 1000)


@given(st.lists(st.tuples(st.sampled_from(["add", "since"]), st.sampled_from(["a", "b"]),
                          st.sampled_from([b"k1", b"k2", b"k3"]), st.integers(0, 50),
                          st.integers(0, 1000)), max_size=60))
def test_recent_writes_count_each_key_once_from_a_time_on(
        steps: list[tuple[str, str, bytes, int, int]]) -> None:
    recent = quotas.Recent(max_age_ms=100)
    latest: dict[tuple[str, bytes], tuple[int, int]] = {}  # the model: each key's last write
    now = floor = 0
    for kind, ds, key, dt, n in steps:
        now += dt
        if kind == "add":
            recent.add(ds, now, [((b"p", key), n)])
            latest[(ds, key)] = (now, n)
        else:
            # Counts come with times that do not go back; keys last written before the
            # count (or longer ago than max_age) no longer count.
            floor = max(floor, now - n)
            cutoff = max(floor, now - 100)
            want = sum(x for (d, _), (t, x) in latest.items() if d == ds and t >= cutoff)
            assert recent.since(ds, floor, now) == want


@given(st.binary(min_size=1, max_size=20), st.binary(max_size=20), st.binary(max_size=300),
       st.sampled_from(["a#1", "bb-c#123456"]))
def test_a_writes_size_is_what_the_nodes_will_count_or_a_byte_more(
        pkey: bytes, lkey: bytes, value: bytes, dataset: str) -> None:
    k = keys.value_key(7, dataset, pkey, lkey)
    stored = usage.tally([(k, keys.encode_stored(Stored(value, 1, 0)))])[0][dataset]
    key = pb.Key(partition=pkey, local=lkey)
    [(where, put)] = quotas.writes(pb.PutRequest(key=key, value=value), dataset)
    assert where == (pkey, lkey) and stored <= put <= stored + 1  # eventual values: a byte more
    assert quotas.writes(pb.CheckAndSetRequest(key=key, new_value=value), dataset) == [(where, put)]
    assert quotas.writes(pb.CheckAndSetRequest(key=key, delete=True), dataset) == []
    [(_, incr)] = quotas.writes(pb.IncrementRequest(key=key, delta=1), dataset)
    batch = pb.BatchRequest(partition_key=pkey, ops=[
        pb.Op(put=pb.PutOp(local_key=lkey, value=value)), pb.Op(delete=pb.DeleteOp(local_key=lkey)),
        pb.Op(incr=pb.IncrementOp(local_key=lkey + b"n", delta=1))])
    assert quotas.writes(batch, dataset) == [(where, put), ((pkey, lkey + b"n"), incr + 1)]
    assert quotas.writes(pb.DeleteRequest(key=key), dataset) == []


def _op(kind: str) -> pb.Op:
    return {"put": pb.Op(put=pb.PutOp(local_key=b"k")), "delete": pb.Op(delete=pb.DeleteOp(local_key=b"k")),
            "get": pb.Op(get=pb.GetOp(local_key=b"k")), "incr": pb.Op(incr=pb.IncrementOp(local_key=b"k")),
            "cas": pb.Op(cas=pb.CheckAndSetOp(local_key=b"k")),
            "cas-delete": pb.Op(cas=pb.CheckAndSetOp(local_key=b"k", delete=True))}[kind]


@given(st.lists(st.sampled_from(["put", "delete", "get", "incr", "cas", "cas-delete"]), max_size=6))
def test_a_batch_adds_data_when_any_of_its_operations_can(kinds: list[str]) -> None:
    req = pb.BatchRequest(ops=[_op(k) for k in kinds])
    assert bool(quotas.writes(req, "d#1")) == any(k in ("put", "incr", "cas") for k in kinds)


def test_a_bulk_write_counts_its_puts_sent_as_columns_as_single_puts_would() -> None:
    """The SDK sends a bulk write's single puts as columns: they add data like any put
    (without them a bulk ingestion went past a quota until the nodes' next count)."""
    rows = [(b"p1", b"a", b"x" * 10), (b"p2", b"", b"y" * 300), (b"p1", b"b", b"")]
    req = pb.WriteManyRequest(
        groups=[pb.WriteGroup(partition_key=b"g", ops=[pb.Op(incr=pb.IncrementOp(local_key=b"n"))])],
        puts=pb.PutColumns(partition_keys=[r[0] for r in rows], local_keys=[r[1] for r in rows],
                           values=[r[2] for r in rows]))
    singles = [w for p, lk, v in rows
               for w in quotas.writes(pb.PutRequest(key=pb.Key(partition=p, local=lk), value=v), "d#1")]
    incr = quotas.writes(pb.IncrementRequest(key=pb.Key(partition=b"g", local=b"n")), "d#1")
    assert quotas.writes(req, "d#1") == incr + singles


def test_which_requests_add_data() -> None:
    for req in (pb.PutRequest(), pb.IncrementRequest(), pb.CheckAndSetRequest()):
        assert quotas.writes(req, "d#1")
    for req in (pb.CheckAndSetRequest(delete=True), pb.DeleteRequest(), pb.GetRequest(), pb.ScanRequest()):
        assert not quotas.writes(req, "d#1")


@given(st.lists(st.tuples(st.sampled_from(["a#1", "bb#22", "c_d-e#3"]), st.integers(0, 63),
                          st.binary(max_size=8), st.binary(max_size=8), st.binary(max_size=50),
                          st.booleans()), max_size=30))
def test_counting_sums_keys_and_values_per_dataset_and_per_shard(
        rows: list[tuple[str, int, bytes, bytes, bytes, bool]]) -> None:
    items, want, want_shards = [], {}, {}
    for dataset, shard, pkey, lkey, value, eventual in rows:
        k = keys.value_key(shard, dataset, pkey, lkey)
        k = keys.eventual(k) if eventual else k
        v = keys.encode_stored(Stored(value, 1, 0))
        items.append((k, v))
        want[dataset] = want.get(dataset, 0) + len(k) + len(v)
        want_shards[shard] = want_shards.get(shard, 0) + len(k) + len(v)
    assert usage.tally(items) == (want, want_shards)


def test_a_count_reads_in_pieces_each_from_an_iterator_of_its_own(tmp_path: Path) -> None:
    """Every entry once, in pieces; and a piece after a rest sees what was written during it
    (a single iterator would pin the state, and the memtables, of the count's start)."""
    store = NodeStore(str(tmp_path / "db"))
    try:
        v = keys.encode_stored(Stored(b"value", 1, 0))
        written = [keys.value_key(s, "a#1", b"p%d" % i, b"l") for s in (0, 7) for i in range(9)]
        written += [keys.eventual(keys.value_key(3, "b#2", b"p%d" % i, b"")) for i in range(6)]
        for k in written:
            store.db.put(k, v)
        late = keys.value_key(63, "a#1", b"late", b"")  # after every key above
        pieces: list[float] = []

        def piece_done(took_s: float) -> None:
            pieces.append(took_s)
            if len(pieces) == 1:
                store.db.put(late, v)

        got = [k for k, _ in usage.data_items(store, piece_done, piece=4)]
        assert sorted(got) == sorted(written + [late])  # each once, the late one too
        assert len(pieces) == (19 // 4 + 1) + (6 // 4 + 1) and all(t >= 0 for t in pieces)
        whole = usage.tally(usage.data_items(store, piece=10**6))
        assert usage.tally(usage.data_items(store, piece=4)) == whole
    finally:
        store.close()


@given(st.integers(0, 2**32 - 1), st.text(min_size=1, max_size=40), st.binary(max_size=40),
       st.binary(max_size=40))
def test_the_record_contracts_key_size_is_the_storage_layouts(shard: int, dataset: str, pkey: bytes,
                                                               lkey: bytes) -> None:
    """The coordinator sizes a key by record/sizes.py, the storage node lays it out by
    storage_node/keys.py: one length."""
    assert len(keys.value_key(shard, dataset, pkey, lkey)) == sizes.value_key_len(dataset, pkey, lkey)
