"""Reclaiming dedup entries and expired values (storage_node/reclaim.py) on a real store:
whatever the records and wherever reclaims fall, every outcome equals that of a node that
never reclaims (hypothesis), and what stays is exactly what a retry can still match and a
read can still see."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from record.model import Cas, Delete, Drop, Get, Incr, Put, Record, Scan
from storage_node import keys
from storage_node.apply import DEDUP_WINDOW_MS, apply
from storage_node.reclaim import dedup_cutoff, expiry_cutoff
from storage_node.store import BatchView, NodeStore
from tests.sim.store import MemState

W = DEDUP_WINDOW_MS
KEYS = [b"a", b"b", b"c"]
OP = st.one_of(
    st.builds(Put, st.sampled_from(KEYS), st.just(b"v"), st.sampled_from([0, 0, 1, 5, 1_000])),
    st.builds(Incr, st.sampled_from(KEYS), st.just(1), st.sampled_from([0, 5, 1_000])),
    st.builds(Delete, st.sampled_from(KEYS)),
    st.builds(Get, st.sampled_from(KEYS)),
    st.builds(Cas, st.sampled_from(KEYS), st.just(None), st.just(True), st.just(0), st.just(b"w"),
              st.just(False), st.sampled_from([0, 5])),
    st.builds(Scan, st.just(b""), st.just(b""), st.integers(1, 3)),
)
# (request id number or None, operation, log time step, reclaim after this batch)
STEP = st.tuples(st.one_of(st.none(), st.integers(0, 2)), OP,
                 st.sampled_from([0, 1, 5, 1_000, W // 2, W - 1, W, W + 1, 2 * W]), st.booleans())


def _entries(store: NodeStore, prefix: bytes) -> list[bytes]:
    return [bytes(k) for k in store.db.keys(from_key=prefix) if bytes(k).startswith(prefix)]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(STEP, min_size=1, max_size=3), min_size=1, max_size=25),
       st.integers(1, 3))
def test_reclaiming_changes_no_outcome(batches: list[list], limit: int) -> None:  # type: ignore[type-arg]
    model = MemState()
    with tempfile.TemporaryDirectory() as d:
        store = NodeStore(str(Path(d) / "db"))
        try:
            pos, ts = 0, 1_000_000
            for batch in batches:
                view = BatchView(store)
                reclaim_now = False
                for rid, op, step, again in batch:
                    ts += step
                    rec = Record(b"" if rid is None else b"r%d" % rid, "", "ds#1", 3, b"pk", (op,))
                    a = apply(view, rec, 0, pos, ts, node_id=1)
                    view.add(a, rec.shard, ts, 0)
                    assert a.result == model.run(rec, pos, ts), f"record at {pos} differs"
                    pos += 1
                    reclaim_now = reclaim_now or again
                if reclaim_now:  # as the node does: after the batch's records, same write
                    view.reclaim(0, dedup_cutoff(ts), limit)
                    view.reclaim_expired(0, expiry_cutoff(ts), limit)
                view.commit({0: (pos, ts)})
            # A full reclaim leaves exactly the dedup entries a retry could still match and
            # the values a read can still see, each with its one index entry.
            view = BatchView(store)
            view.reclaim(0, dedup_cutoff(ts), 10**9)
            view.reclaim_expired(0, expiry_cutoff(ts), 10**9)
            view.commit({0: (pos, ts)})
            live = {(s, r): t for (s, r), (t, _) in model.dedups.items() if t >= dedup_cutoff(ts)}
            assert {(3, k[6:]) for k in _entries(store, b"R")} == set(live)  # R shard:4 0x00 id
            index = [keys.decode_dedup_time_key(k) for k in _entries(store, b"T")]
            want = sorted((s, r, t) for (s, r), t in live.items())
            assert sorted((s, r, t) for _, t, s, r in index) == want
            visible = {k: v for k, v in model.values.items() if v.live_at(ts)}
            assert {k for k in _entries(store, b"K")} == set(visible)
            # Every value with a TTL is indexed; what else the index holds (a value written
            # again since, without that expiry) is not due yet.
            expiring = {(v.expires_at_ms, k) for k, v in visible.items() if v.expires_at_ms}
            index_x = {(int.from_bytes(k[5:13], "big"), k[13:]) for k in _entries(store, b"X")}
            assert expiring <= index_x
            assert all(t >= expiry_cutoff(ts) for t, _ in index_x - expiring)
        finally:
            store.close()


def test_entries_within_the_window_stay_and_older_ones_go() -> None:
    with tempfile.TemporaryDirectory() as d:
        store = NodeStore(str(Path(d) / "db"))
        try:
            for i, t in enumerate([1_000, 2_000, 3_000]):
                view = BatchView(store)
                rec = Record(b"r%d" % i, "", "ds#1", 3, b"pk", (Incr(b"n", 1),))
                view.add(apply(view, rec, 0, i, t, node_id=1), rec.shard, t, 0)
                view.commit({0: (i + 1, t)})
            view = BatchView(store)
            # At log time 2,000 + W the first entry is out of the window, the second is
            # exactly at its edge (a retry then still matches it), the third inside.
            assert view.reclaim(0, dedup_cutoff(2_000 + W), 100) == 1
            view.commit({0: (3, 2_000 + W)})
            assert [k[6:] for k in _entries(store, b"R")] == [b"r1", b"r2"]
            assert store.dedup(3, b"r1") is not None
        finally:
            store.close()


def test_the_applier_reclaims_each_log_at_its_own_log_time_once_a_second() -> None:
    from types import SimpleNamespace

    from catalog import log_map
    from catalog.registry import KvTopology
    from catalog.replica_sets import everyone
    from runtime.inprocess import Local
    from storage_node.apply_loop import ApplyLoop
    from storage_node.callbacks import Callbacks
    from storage_node.settings import Settings
    from storage_node.state import NodeState

    calls: list[tuple[int, int, int]] = []
    expired: list[tuple[int, int, int]] = []
    cutoffs: list[Any] = []
    view = SimpleNamespace(reclaim=lambda log_id, before, limit: calls.append((log_id, before, limit)) or 2,
                           reclaim_expired=lambda *a: expired.append(a) or 1,
                           reclaim_changes=lambda cutoff, limit: cutoffs.append(cutoff) or 3)
    state = NodeState(0, Settings(), None, None, KvTopology(64, (0, 1, 2), 3), 3, log_map.first(64, 3),  # type: ignore[arg-type]
                      everyone(64, (0, 1, 2)),
                      positions={0: (5, 10 * W), 1: (7, 20 * W), 2: (0, 0)})
    loop = ApplyLoop(state, None, lambda code, why: None, Local(), Callbacks())  # type: ignore[arg-type]
    loop._reclaim(view, {1: (9, 30 * W)})  # type: ignore[arg-type]
    # Log 1 at the log time of this batch, log 0 at its last applied one; log 2 has
    # applied nothing yet.
    assert [(lg, b) for lg, b, _ in calls] == [(0, dedup_cutoff(10 * W)), (1, dedup_cutoff(30 * W))]
    assert [(lg, b) for lg, b, _ in expired] == [(0, 10 * W + 1), (1, 30 * W + 1)]
    assert state.reclaimed == 9
    # Changes: each shard's by its log's time, less the retention (shard 4 is on log 1).
    retention_ms = round(Settings().change_retention_s * 1000)
    assert [cutoffs[0](s) for s in (0, 4, 2)] == [10 * W - retention_ms, 30 * W - retention_ms, -retention_ms]
    loop._reclaim(view, {1: (10, 31 * W)})  # type: ignore[arg-type]
    assert len(calls) == 2  # not again within RECLAIM_INTERVAL_S


def test_a_drop_record_deletes_its_dataset_in_the_shards_it_names_only() -> None:
    def put(view: BatchView, dataset: str, shard: int, pkey: bytes, lkey: bytes, pos: int) -> None:
        rec = Record(b"", "", dataset, shard, pkey, (Put(lkey, b"v"),))
        view.add(apply(view, rec, 0, pos, 1_000, node_id=1), shard, 1_000, 0)

    with tempfile.TemporaryDirectory() as d:
        store = NodeStore(str(Path(d) / "db"))
        try:
            view = BatchView(store)
            put(view, "a#1", 3, b"p", b"old", 0)
            put(view, "a#1", 5, b"p", b"other-log", 1)
            put(view, "a#12", 3, b"p", b"longer-name", 2)  # a prefix of its name must not match
            put(view, "b#1", 3, b"p", b"kept", 3)
            view.commit({0: (4, 1_000)})
            eventual_key = keys.eventual(keys.partition_prefix(3, "a#1", b"p")) + b"e"
            store.db[eventual_key] = b"x"  # an eventual dataset's value, same shard
            view = BatchView(store)
            put(view, "a#1", 3, b"p", b"same-batch-before", 4)
            drop = Record(b"", "", "a#1", 3, b"", (Drop((3,)),))
            view.add(apply(view, drop, 0, 5, 1_000, node_id=1), 3, 1_000, 0)
            assert view.get(keys.value_key(3, "a#1", b"p", b"old")) is None
            assert view.scan(keys.partition_prefix(3, "a#1", b"p"), b"", b"", 10) == []
            put(view, "a#1", 3, b"p", b"after", 6)
            view.commit({0: (7, 1_000)})
            left = {bytes(k) for k in store.db.keys() if bytes(k)[:1] in (b"K", b"E")}
            assert left == {keys.value_key(3, "a#1", b"p", b"after"),
                            keys.value_key(5, "a#1", b"p", b"other-log"),
                            keys.value_key(3, "a#12", b"p", b"longer-name"),
                            keys.value_key(3, "b#1", b"p", b"kept")}
            assert store.drop_applied(0, "a#1") and not store.drop_applied(1, "a#1")
        finally:
            store.close()
