"""Event ids (exactly-once ingestion): each group of a record is applied at most once per
event id within the dataset's window (log time); past the dataset's cap per shard the
oldest ids go first, by log position. Checked against a small reference model, on the
in-memory state and on real RocksDB split into batches at random (replicas batch
differently, and must agree), with hypothesis."""

from __future__ import annotations

import tempfile
from collections import OrderedDict
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from midtown_pb import kv_pb2 as pb
from record import codec
from record.model import Cas, Group, Incr, Put, Record, put_group
from storage_node.apply import apply
from storage_node.store import BatchView, NodeStore
from tests.sim.store import MemState

DS = "events#1"
SHARD = 2
EIDS = st.sampled_from([b"e1", b"e2", b"e3", b"e4", b"e5", b"e6", b""])
KEYS = st.sampled_from([b"a", b"b"])
OPS = st.one_of(st.builds(Put, KEYS, st.sampled_from([b"x", b"y"])),
                st.builds(Incr, KEYS, st.integers(1, 3)),
                st.builds(lambda k: Cas(k, expect_absent=True, new_value=b"first"), KEYS))
GROUP = st.builds(lambda pk, op, eid: Group(pk, (op,), eid), st.sampled_from([b"p", b"q"]), OPS, EIDS)
RECORD = st.tuples(st.lists(GROUP, min_size=1, max_size=5), st.integers(0, 40))  # groups, time step


class Reference:
    """The specification, literally: ids held in log-position order; a repeat within the
    window is a duplicate; after each record, the oldest go while more than `cap` are held."""

    def __init__(self, window_ms: int, cap: int) -> None:
        self.window_ms, self.cap = window_ms, cap
        self.held: OrderedDict[bytes, int] = OrderedDict()  # id -> log time applied

    def group(self, ts: int, eid: bytes, holds: bool) -> str:
        """One group, in record order: 'dup', or 'run' (its operations ran; `holds` says
        whether they held, and only then is its id recorded)."""
        t = self.held.get(eid) if eid else None
        if t is not None and ts - t <= self.window_ms:
            return "dup"
        if eid and holds:
            self.held.pop(eid, None)
            self.held[eid] = ts
        return "run"

    def end_of_record(self) -> None:
        while len(self.held) > self.cap:
            self.held.popitem(last=False)


@settings(max_examples=200, deadline=None)
@given(st.lists(RECORD, min_size=1, max_size=30), st.integers(1, 5), st.integers(5, 60),
       st.lists(st.integers(1, 6), min_size=1, max_size=10))
def test_event_ids_match_the_specification_everywhere(records: list, cap: int, window: int,  # type: ignore[type-arg]
                                                      splits: list[int]) -> None:
    mem = MemState()
    ref = Reference(window, cap)
    ts = 1000
    outcomes_mem = []
    recs = []
    for pos, (groups, step) in enumerate(records):
        ts += step
        r = Record(b"", "", DS, SHARD, b"", (), 0, tuple(groups), window, cap)
        recs.append((r, pos, ts))
        res = mem.run(r, pos, ts)
        got = ["dup" if g.duplicate else "run" for g in res.groups]
        # Duplicates are exactly those the specification says (whether a group's operations
        # held is the operations' business, tested in test_apply.py).
        expected = [ref.group(ts, g.event_id, gr.applied) for g, gr in zip(groups, res.groups)]
        ref.end_of_record()
        assert got == expected, (pos, got, expected)
        assert mem.event_count(SHARD, DS) <= cap
        # Ids past the window may be aged out early (they no longer count), live ones never.
        held = {k[2] for k in mem.events}
        live = {e for e, t in ref.held.items() if ts - t <= window}
        assert live <= held <= set(ref.held), (held, ref.held)
        outcomes_mem.append(res)
    # Real RocksDB, the same records in batches of random sizes: the same outcomes and state.
    with tempfile.TemporaryDirectory() as d:
        store = NodeStore(str(Path(d) / "db"))
        try:
            i = 0
            k = 0
            while i < len(recs):
                n = splits[k % len(splits)]
                k += 1
                view = BatchView(store)
                for r, pos, t in recs[i:i + n]:
                    a = apply(view, r, 0, pos, t, 1)
                    view.add(a, r.shard, t, 0)
                    assert a.result is not None
                    assert a.result.groups == outcomes_mem[pos].groups
                    assert a.result.digest == outcomes_mem[pos].digest
                view.commit({0: (recs[min(i + n, len(recs)) - 1][1] + 1, 0)})
                i += n
            # Every replica holds the same ids, whatever its batches.
            held = {eid for _, _, eid, _ in store.oldest_events(SHARD, DS, 10_000)}
            assert held == {k[2] for k in mem.events}
            assert store.event_count(SHARD, DS) == len(held)
            for eid in held:
                e = store.event(SHARD, DS, eid)
                assert e is not None and e == mem.events[(SHARD, DS, eid)]
        finally:
            store.close()


def test_increments_with_repeated_events_sum_exactly() -> None:
    """Counters, where duplicates hurt most: every event once, however often it is sent."""
    mem = MemState()
    events = [f"ev{i}".encode() for i in range(50)]
    sent = events + events[::3] + events[::7]  # repeats within the window
    pos = 0
    for i in range(0, len(sent), 8):
        groups = tuple(Group(b"user", (Incr(b"n", 1),), e) for e in sent[i:i + 8])
        mem.run(Record(b"", "", DS, SHARD, b"", (), 0, groups, 10_000, 1000), pos, 1000 + pos)
        pos += 1
    from storage_node import keys

    assert mem.values[keys.value_key(SHARD, DS, b"user", b"n")].value == b"50"


def test_a_repeat_after_the_window_is_applied_again() -> None:
    mem = MemState()
    g = (Group(b"u", (Incr(b"n", 1),), b"e"),)
    r = Record(b"", "", DS, SHARD, b"", (), 0, g, 100, 10)
    assert not mem.run(r, 0, 1000).groups[0].duplicate
    assert mem.run(r, 1, 1100).groups[0].duplicate  # within 100 ms of log time
    again = mem.run(r, 2, 1101)
    assert not again.groups[0].duplicate and again.groups[0].applied
    from storage_node import keys

    assert mem.values[keys.value_key(SHARD, DS, b"u", b"n")].value == b"2"


PUT_ROW = st.tuples(st.sampled_from([b"p", b"q"]), KEYS, st.sampled_from([b"x", b"y"]),
                    st.sampled_from([0, 0, 30]), EIDS)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.lists(PUT_ROW, min_size=1, max_size=6), st.integers(0, 40)),
                min_size=1, max_size=20), st.integers(1, 5))
def test_a_record_of_puts_applies_as_its_groups_would(records: list, cap: int) -> None:  # type: ignore[type-arg]
    """A bulk write's single puts travel as columns (Record.puts): each row must apply
    exactly as the group of one put it stands for: same outcomes, digests, values, ids."""
    as_rows, as_groups = MemState(), MemState()
    ts = 1000
    for pos, (rows, step) in enumerate(records):
        ts += step
        r = as_rows.run(Record(b"", "", DS, SHARD, b"", (), 0, (), 40, cap, tuple(rows)), pos, ts)
        g = as_groups.run(Record(b"", "", DS, SHARD, b"", (), 0, tuple(map(put_group, rows)), 40, cap),
                          pos, ts)
        assert r.groups == g.groups and r.digest == g.digest
    assert as_rows.values == as_groups.values and as_rows.events == as_groups.events


@given(st.lists(PUT_ROW, min_size=1, max_size=8))
def test_put_columns_round_trip(rows: list) -> None:  # type: ignore[type-arg]
    r = Record(b"rid", "cb", DS, SHARD, b"", (), 0, (), 0, 0, tuple(rows))
    assert codec.record_from_bytes(codec.record_to_bytes(r)) == r


def test_columns_of_different_lengths_do_not_decode() -> None:
    bad = pb.Record(dataset=DS, shard=SHARD, puts=pb.PutColumns(
        partition_keys=[b"p", b"q"], local_keys=[b"a"], values=[b"x", b"y"])).SerializeToString()
    with pytest.raises(ValueError):
        codec.record_from_bytes(bad)
