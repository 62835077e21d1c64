"""The apply loop runs storage_node/handoff.py's rule (docs/log.md, "Adding logs and handing
shards over", step 4): a shard handed from log 0 to log 1 is applied from log 1 once, and
only once, this node has applied the hand-off in log 0, whichever tail comes first; its
versions go on above log 0's; its place is written with the positions, and read back."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import grpc
import pytest

from catalog import log_map
from catalog.registry import KvTopology
from catalog.replica_sets import everyone
from log.entry import Entry
from record import codec
from record.model import HandOff, Open, Put, Record
from runtime.inprocess import Local
from runtime.refusals import BadRequest, Refusal
from storage_node import keys
from storage_node.apply_loop import ApplyLoop
from storage_node.callbacks import Callbacks
from storage_node.handoff import Impossible, Place
from storage_node.settings import Settings
from storage_node.state import NodeState
from storage_node.store import NodeStore
from storage_node.truncation import handed_holders
from storage_node.watch import ChangeFeed


def _put(shard: int, key: bytes, value: bytes, ttl_ms: int = 0) -> bytes:
    return codec.record_to_bytes(Record(b"", "", "d", shard, b"p", (Put(key, value, ttl_ms),)))


def _entries(log: list[bytes], ts0: int) -> list[Entry]:
    return [Entry(p, 1, ts0 + p, payload) for p, payload in enumerate(log)]


# Shard 0 starts in log 0, shard 1 in log 1 (shard mod 2). Log 1's clock is behind log 0's.
LOG0 = _entries([_put(0, b"a", b"1", ttl_ms=10**9),
                 codec.record_to_bytes(Record(b"", "", "", 0, b"", (HandOff(1, 1),)))], 5000)
LOG1 = _entries([_put(1, b"z", b"1"),
                 codec.record_to_bytes(Record(b"", "", "", 0, b"", (Open(1),))),
                 _put(0, b"a", b"2")], 1000)
# Cannot exist: a record of shard 0 in log 1 after its hand-off names it, before its open record
LOG1_EARLY = _entries([_put(1, b"z", b"1"), _put(0, b"early", b"x")], 1000)


class _Loop:
    def __init__(self, path: Path) -> None:
        self.followed: list[int] = []
        logs = SimpleNamespace(follow=lambda log_id, *a: self.followed.append(log_id) or SimpleNamespace(
            in_process=False))
        self.store = NodeStore(str(path / "state.db"))
        self.state = NodeState(0, Settings(), logs, self.store, KvTopology(2, (0,), 2), 2,  # type: ignore[arg-type]
                               log_map.first(2, 2), everyone(2, (0,)))
        self.state.reload_positions()
        self.loop = ApplyLoop(self.state, None, self.fatal, Local(), Callbacks())  # type: ignore[arg-type]
        self.loop._follows[0] = SimpleNamespace(in_process=False)  # type: ignore[assignment]
        self.fatal_why: list[str] = []

    def fatal(self, code: int, why: str) -> None:
        self.fatal_why.append(why)

    def value(self, key: bytes) -> Any:
        return self.store.get(keys.value_key(0, "d", b"p", key))


@pytest.fixture
def node(tmp_path: Path) -> Any:
    n = _Loop(tmp_path)
    yield n
    n.store.close()


def test_the_new_logs_tail_waits_for_the_hand_off_then_takes_the_shard(node: _Loop) -> None:
    node.loop.apply([(1, LOG1)])  # log 1 first: its open record of shard 0 must wait
    assert node.state.positions[1][0] == 1 and node.state.log_of(0) == 0
    node.loop.apply([(0, LOG0)])  # the hand-off: shard 0 now awaits its open record in log 1
    assert node.state.place_of(0) == Place(1, since=1, opened=False, version_base=1 + 1 - 1, ts_floor=5001,
                                           generation=1)
    assert node.value(b"a").value == b"1"
    node.loop.apply([(1, LOG1[1:])])
    a = node.value(b"a")
    assert a.value == b"2" and a.version > 1  # above the version log 0 gave it (1)
    assert a.version == 2 + 1 + node.state.place_of(0).version_base
    # the shard's expiry index went with it: its values expire by log 1's time now
    assert node.store.index_entries_of(0, 0) == [] and len(node.store.index_entries_of(1, 0)) == 1
    assert node.followed == [1]  # and this node now tails log 1 (it held no shard there before)
    # written with the positions: read back as a restarted node reads it
    node.state.places.clear()
    node.state.reload_positions()
    assert node.state.place_of(0) == Place(1, since=1, opened=True, version_base=1, ts_floor=5001,
                                           generation=1)


def test_both_tails_in_one_batch_apply_whatever_their_order(node: _Loop) -> None:
    node.loop.apply([(1, LOG1), (0, LOG0)])
    assert node.state.positions[1][0] == 3 and node.value(b"a").value == b"2"


def test_a_record_the_seals_rule_out_stops_the_node(node: _Loop) -> None:
    node.loop.apply([(0, LOG0)])
    with pytest.raises(Impossible, match="shard 0"):
        node.loop.apply([(1, LOG1_EARLY)])
    assert node.state.positions[1][0] == 1  # at the hand-off's start: nothing of that batch written


def test_a_tail_thread_that_waits_goes_on_once_the_other_tail_applies_the_hand_off(node: _Loop) -> None:
    t = threading.Thread(target=node.loop._apply_entries, args=(1, LOG1))
    t.start()
    deadline = time.monotonic() + 10
    while node.state.positions[1][0] < 1 and time.monotonic() < deadline:  # it waits at the open record
        time.sleep(0.01)
    assert t.is_alive() and node.state.positions[1][0] == 1
    node.loop._apply_entries(0, LOG0)
    t.join(10)
    assert not t.is_alive() and node.fatal_why == []
    assert node.state.positions[1][0] == 3 and node.value(b"a").value == b"2"


def test_a_copys_mark_does_not_pass_over_the_open_record_in_the_new_log(node: _Loop) -> None:
    """A node holding shard 0 by a copy taken at log 0 position 2 (its mark) tails log 1
    past the shard's open record before it applies the hand-off in log 0: the mark is a
    position of log 0 and says nothing of log 1's, so log 1's tail waits at the open
    record all the same (the hand-off simulation's seed 140 stopped a node: the mark
    passed the open record over, and the shard's next record came "before" it)."""
    log0 = _entries([_put(0, b"a", b"1"), b"",
                     codec.record_to_bytes(Record(b"", "", "", 0, b"", (HandOff(1, 1),)))], 5000)
    node.state.marks[0] = 2
    node.loop.apply([(1, LOG1)])
    assert node.state.positions[1][0] == 1 and node.fatal_why == []
    node.loop.apply([(0, log0)])
    node.loop.apply([(1, LOG1[1:])])
    assert node.state.place_of(0).opened and node.value(b"a").value == b"2"


def test_a_strong_scan_by_a_map_of_the_other_side_of_the_hand_off_is_refused(node: _Loop,
                                                                            tmp_path: Path) -> None:
    """storage_node/reads.py: a strong scan or split names the log its min_position is of
    (the one the asker's map names for the shard); a replica that takes the shard's
    records from another log refuses it (UNAVAILABLE: the asker reads the map again),
    whichever side of the hand-off either is on; asked of its own log, it answers."""
    from midtown_pb import kv_pb2 as pb
    from storage_node.reads import Reads

    s = node.state
    reads = Reads(0, node.store, str(tmp_path), s.commit_lock, s.cond, s.positions,
                  lambda: s.kv, lambda: s.log_map, s.holds, s.place_of)

    def keys_at(log_id: int, min_position: int) -> list[bytes]:
        req = pb.StorageScanShardRequest(dataset="d", shard=0, page=10, min_position=min_position, wait_ms=0,
                                         log_id=log_id)
        return [it.local_key for page in reads.scan_shard(req) for it in page.items]

    node.loop.apply([(0, LOG0[:1]), (1, LOG1[:1])])
    assert keys_at(0, 1) == [b"a"]
    with pytest.raises(Refusal) as e:  # the asker's map already names log 1; not here yet
        keys_at(1, 1)
    assert e.value.code == grpc.StatusCode.UNAVAILABLE and "come from log 0 here, not 1" in str(e.value)
    node.loop.apply([(0, LOG0[1:]), (1, LOG1[1:])])
    with pytest.raises(Refusal) as e:  # handed over here; the asker's map still names log 0
        keys_at(0, 2)
    assert e.value.code == grpc.StatusCode.UNAVAILABLE and "come from log 1 here, not 0" in str(e.value)
    assert keys_at(1, 3) == [b"a"]
    with pytest.raises(Refusal):
        reads.shard_splits(pb.StorageShardSplitsRequest(dataset="d", shard=0, split_bytes=100, log_id=0))
    # a watch from now names the log each start was read from (storage_node/watch.py)
    feed = ChangeFeed(0, node.store, s.cond, s.positions, lambda: s.log_map, s.holds, threading.Event(),
                      s.place_of)
    ask = pb.StorageWatchRequest(dataset="d", duration_ms=1)
    getattr(ask, "from")[0] = s.place_of(0).version(2) - 1  # log 1 position 2 (the put), in shard order
    ask.logs[0] = 0
    with pytest.raises(Refusal) as e:
        feed.watch(ask)
    assert e.value.code == grpc.StatusCode.UNAVAILABLE and "come from log 1 here, not 0" in str(e.value)
    ask.logs[0] = 1
    assert [c.local_key for r in feed.watch(ask) for c in r.changes] == [b"a"]
    # bad input names its field: a log no key-value data travels in, a log of a shard not watched
    with pytest.raises(BadRequest, match="log_id: log 7"):
        keys_at(7, 0)
    ask.logs[1] = 1
    with pytest.raises(BadRequest, match="logs: shard 1 is not watched"):
        feed.watch(ask)
    assert len(reads.shard_splits(pb.StorageShardSplitsRequest(dataset="d", shard=0, split_bytes=100,
                                                               log_id=1)).splits) == 1


def test_the_old_logs_truncation_waits_for_the_shards_holders_until_each_passed_the_hand_off() -> None:
    """docs/log.md step 6: shard 5 handed from log 0 at position 40 to log 1; its holders
    are nodes 1 and 2, which hold no other shard of log 0."""
    h = log_map.Handoff(5, old=0, at=40, new=1, start=7)
    holders = {5: (1, 2)}.get
    assert handed_holders(0, [h], holders, {(0, 1): 41, (0, 2): 40}) == {1, 2}  # node 2 not past it
    assert handed_holders(0, [h], holders, {(0, 1): 41}) == {1, 2}  # node 2 never published
    assert handed_holders(0, [h], holders, {(0, 1): 41, (0, 2): 45}) == set()  # both past it
    assert handed_holders(1, [h], holders, {}) == set()  # the new log: they hold a shard of it anyway
