"""Reclaiming the dedup table (storage_node/reclaim.py) on a real store: whatever the
records and wherever reclaims fall, every outcome equals that of a node that never
reclaims (hypothesis), and what stays is exactly what a retry can still match."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from storage_node import keys
from storage_node.apply import DEDUP_WINDOW_MS, apply
from storage_node.model import Incr, Put, Record
from storage_node.reclaim import cutoff
from storage_node.store import BatchView, NodeStore
from tests.test_apply import MemState

W = DEDUP_WINDOW_MS
# (request id number or None, increment or put, log time step, reclaim after this batch)
STEP = st.tuples(st.one_of(st.none(), st.integers(0, 2)), st.booleans(),
                 st.sampled_from([0, 1, W // 2, W - 1, W, W + 1, 2 * W]), st.booleans())


def _record(rid: int | None, incr: bool, pos: int) -> Record:
    op = Incr(b"n", 1) if incr else Put(b"k", b"v%d" % pos)
    return Record(b"" if rid is None else b"r%d" % rid, "", "ds#1", 3, b"pk", (op,))


def _entries(store: NodeStore, prefix: bytes) -> list[bytes]:
    return [bytes(k) for k in store.db.keys(from_key=prefix) if bytes(k).startswith(prefix)]


@settings(max_examples=300, deadline=None)
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
                for rid, incr, step, again in batch:
                    ts += step
                    rec = _record(rid, incr, pos)
                    a = apply(view, rec, 0, pos, ts, node_id=1)
                    view.add(a, rec.shard, ts, 0)
                    assert a.result == model.run(rec, pos, ts), f"record at {pos} differs"
                    pos += 1
                    reclaim_now = reclaim_now or again
                if reclaim_now:  # as the node does: after the batch's records, same write
                    view.reclaim(0, cutoff(ts), limit)
                view.commit({0: (pos, ts)})
            # A full reclaim leaves exactly the entries a retry could still match, each
            # with its one index entry.
            view = BatchView(store)
            view.reclaim(0, cutoff(ts), 10**9)
            view.commit({0: (pos, ts)})
            live = {(s, r): t for (s, r), (t, _) in model.dedups.items() if t >= cutoff(ts)}
            assert {(3, k[5:]) for k in _entries(store, b"R")} == set(live)
            index = [keys.decode_dedup_time_key(k) for k in _entries(store, b"T")]
            want = sorted((s, r, t) for (s, r), t in live.items())
            assert sorted((s, r, t) for _, t, s, r in index) == want
        finally:
            store.close()


def test_entries_within_the_window_stay_and_older_ones_go() -> None:
    with tempfile.TemporaryDirectory() as d:
        store = NodeStore(str(Path(d) / "db"))
        try:
            for i, t in enumerate([1_000, 2_000, 3_000]):
                view = BatchView(store)
                rec = _record(i, True, i)
                view.add(apply(view, rec, 0, i, t, node_id=1), rec.shard, t, 0)
                view.commit({0: (i + 1, t)})
            view = BatchView(store)
            # At log time 2,000 + W the first entry is out of the window, the second is
            # exactly at its edge (a retry then still matches it), the third inside.
            assert view.reclaim(0, cutoff(2_000 + W), 100) == 1
            view.commit({0: (3, 2_000 + W)})
            assert [k[5:] for k in _entries(store, b"R")] == [b"r1", b"r2"]
            assert store.dedup(3, b"r1") is not None
        finally:
            store.close()


def test_the_applier_reclaims_each_log_at_its_own_log_time_once_a_second() -> None:
    from types import SimpleNamespace

    from storage_node.node import StorageNode

    calls: list[tuple[int, int, int]] = []
    view = SimpleNamespace(reclaim=lambda log_id, before, limit: calls.append((log_id, before, limit)) or 2)
    node = SimpleNamespace(_next_reclaim=0.0, kv_logs=3, reclaimed=0,
                           positions={0: (5, 10 * W), 1: (7, 20 * W), 2: (0, 0)})
    StorageNode._reclaim(node, view, {1: (9, 30 * W)})  # type: ignore[arg-type]
    # Log 1 at the log time of this batch, log 0 at its last applied one; log 2 has
    # applied nothing yet.
    assert [(lg, b) for lg, b, _ in calls] == [(0, cutoff(10 * W)), (1, cutoff(30 * W))]
    assert node.reclaimed == 4
    StorageNode._reclaim(node, view, {1: (10, 31 * W)})  # type: ignore[arg-type]
    assert len(calls) == 2  # not again within RECLAIM_INTERVAL_S
