"""A shard's copy brought forward to the destination's tail (storage_node/apply_loop.py
_bring_forward) applies every record of the shard between the copy and the tail, bulk
writes included. A bulk write's record has groups or put rows and no ops, and the step
took it for a published position (all() of no ops is true) and skipped it: the
destination of a move lost the bulk writes that came while its copy was in transit (found
by the whole-cluster simulation's ingestion workload, `make sim SIM_ARGS="--faults ingest"`, seed 2)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from catalog import log_map
from catalog.registry import KvTopology
from catalog.replica_sets import everyone
from cli.logs import describe_entry
from log.entry import Entry
from record import codec
from record.model import Group, HandOff, Incr, Open, Position, Record
from runtime.inprocess import Local
from storage_node import keys
from storage_node.apply_loop import ApplyLoop
from storage_node.callbacks import Callbacks
from storage_node.settings import Settings
from storage_node.state import NodeState
from storage_node.store import BatchView, NodeStore
from tests.sim.store import MemState

RECORDS = {
    5: Record(b"g", "", "d", 0, b"", (), groups=(Group(b"p", (Incr(b"n", 2),), b"ev1"),)),
    6: Record(b"u", "", "d", 0, b"", (), puts=((b"q", b"l", b"v", 0, b"ev2"),)),
    7: Record(b"", "", "", 0, b"", (Position(1, 4),)),  # a published position: not the copy's
    8: Record(b"o", "", "d", 1, b"", (), puts=((b"q", b"l", b"w", 0, b""),)),  # another shard's
}


def test_a_copy_brought_forward_applies_the_bulk_writes_between_it_and_the_tail(tmp_path: Path) -> None:
    entries = [Entry(p, 1, 1000 + p, codec.record_to_bytes(r)) for p, r in sorted(RECORDS.items())]
    logs = SimpleNamespace(read=lambda log_id, start, max_entries, timeout_s: [
        e for e in entries if start <= e.position < start + max_entries])
    store = NodeStore(str(tmp_path / "state.db"))
    try:
        state = NodeState(0, Settings(), logs, store, KvTopology(2, (0,), 1), 1,  # type: ignore[arg-type]
                          log_map.first(2, 1), everyone(2, (0,)))
        loop = ApplyLoop(state, None, lambda code, why: None, Local(), Callbacks())  # type: ignore[arg-type]
        view = BatchView(store)
        loop._bring_forward(view, 0, 0, range(5, 9), 1000)
        view.commit({})
        model = MemState()  # the shard's records applied in order, as every replica does
        for p in (5, 6):
            model.run(RECORDS[p], p, 1000 + p)
        for pk, lk in ((b"p", b"n"), (b"q", b"l")):
            k = keys.value_key(0, "d", pk, lk)
            assert store.get(k) == model.get(k) and store.get(k) is not None
        assert store.digest(0) == model.digest(0)
        assert store.get(keys.value_key(1, "d", b"q", b"l")) is None
    finally:
        store.close()


def test_the_log_command_names_a_bulk_writes_puts() -> None:
    said = describe_entry(codec.record_to_bytes(RECORDS[6]))
    assert said["operation"] == "bulk write, 1 puts" and said["keys"] == "q"
    assert describe_entry(codec.record_to_bytes(RECORDS[5]))["operation"] == "bulk write, 1 groups"
    assert describe_entry(codec.record_to_bytes(RECORDS[7]))["operation"] == "position"
    # a shard's hand-off to another log, and its opening there (storage_node/handoff.py)
    hand_off = describe_entry(codec.record_to_bytes(Record(b"", "", "", 3, b"", (HandOff(2, 40),))))
    assert (hand_off["operation"], hand_off["keys"]) == ("hand-off", "shard 3 to log 2 from 40")
    assert describe_entry(codec.record_to_bytes(Record(b"", "", "", 3, b"", (Open(),))))["keys"] == "shard 3"
