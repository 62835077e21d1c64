"""Unit tests of the pure log core against small reference implementations."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from log import fencing, limits, recovery
from log.entry import Entry, validate_batch
from log.messages import AddEntries, Fence, ReadRange, Result
from log.metadata import LogMetadata
from log.quorum import AckTracker
from log.replica import ReplicaCore
from log.store import MemStore


@given(
    st.integers(1, 3),
    st.lists(st.tuples(st.integers(0, 4), st.integers(0, 30)), max_size=120),
)
def test_ack_tracker_matches_reference(quorum: int, acks: list[tuple[int, int]]) -> None:
    t = AckTracker(quorum, -1)
    held: dict[int, set[int]] = {}
    for replica, pos in acks:
        t.ack(replica, [pos])
        held.setdefault(pos, set()).add(replica)
        # Reference: the longest prefix from 0 whose every position has a quorum.
        ref = -1
        while len(held.get(ref + 1, ())) >= quorum:
            ref += 1
        assert t.lac == ref


@given(st.integers(1, 50), st.integers(0, 50))
def test_fencing_rule(req: int, fenced: int) -> None:
    a = fencing.admit(req, fenced)
    assert a.admitted == (req >= fenced)
    assert a.fenced_epoch == max(req, fenced)


def test_fence_quorum_intersects_every_ack_quorum() -> None:
    for n in range(1, 8):
        for qa in range(1, n + 1):
            fq = limits.fence_quorum(n, qa)
            assert fq + qa > n  # any fenced set meets any ack quorum
            assert n - fq < qa  # the unfenced rest cannot form an ack quorum


def _e(p: int, ts: int = 1, epoch: int = 1) -> Entry:
    return Entry(p, epoch, ts, f"v{p}".encode())


def test_decide_end_stops_at_first_position_held_by_no_fenced_replica() -> None:
    views = [
        recovery.TailView(lac=1, last=5, entries={1: _e(1), 2: _e(2), 3: _e(3), 5: _e(5)}),
        recovery.TailView(lac=0, last=2, entries={1: _e(1), 2: _e(2)}),
    ]
    d = recovery.decide_end(views, first=0, base_ts=0)
    assert d.end == 3
    assert [e.position for e in d.to_replicate] == [2, 3]


def test_decide_end_of_empty_segment_keeps_base_timestamp() -> None:
    views = [recovery.TailView(-1, -1, {}), recovery.TailView(-1, -1, {})]
    d = recovery.decide_end(views, first=10, base_ts=777)
    assert (d.end, d.last_ts, d.to_replicate) == (9, 777, ())


def test_decide_end_counts_truncated_positions_as_committed() -> None:
    views = [
        recovery.TailView(-1, 7, {}, first=8, first_ts=99),
        recovery.TailView(-1, 7, {}, first=0, first_ts=0),
    ]
    d = recovery.decide_end(views, first=0, base_ts=0)
    assert (d.end, d.last_ts) == (7, 99)


def test_metadata_json_roundtrip_and_dense_segments() -> None:
    m = LogMetadata(3, epoch=0).bump(writer=1)
    m = m.seal_and_open(-1, 0, 1, (0, 1, 2))
    m = m.bump(writer=2).seal_and_open(41, 1000, 2, (0, 1, 2))
    assert LogMetadata.from_json(m.to_json()) == m
    assert m.segment_of(41).epoch == 1  # type: ignore[union-attr]
    assert m.segment_of(42).epoch == 2  # type: ignore[union-attr]
    assert m.segments[1].first == 42 and m.segments[1].base_ts == 1000


def test_replica_rejects_stale_epoch_and_persists_fence_before_reply() -> None:
    store = MemStore()
    r = ReplicaCore(0, store, log_count=4)
    assert r.on_fence(Fence(1, 5, 4)).result is Result.OK
    assert store.metas[1].fenced_epoch == 5  # durable before the reply
    assert r.on_add(AddEntries(1, 4, 4, (_e(0, epoch=4),))).result is Result.FENCED
    assert r.on_read_range(ReadRange(1, 3, 4, 0, 5)).result is Result.FENCED
    assert r.on_add(AddEntries(9, 5, 5, ())).result is Result.UNKNOWN_LOG
    # A restarted replica remembers its fence.
    r2 = ReplicaCore(0, store, log_count=4)
    assert r2.on_add(AddEntries(1, 4, 4, (_e(0, epoch=4),))).result is Result.FENCED


def test_entry_and_batch_limits_name_the_field() -> None:
    with pytest.raises(ValueError, match="payloads: an append needs"):
        validate_batch([])
    with pytest.raises(ValueError, match=r"payloads\[1\]"):
        validate_batch([b"x", b"y" * (limits.PAYLOAD_BYTES_MAX + 1)])
    with pytest.raises(ValueError, match="epoch"):
        Entry(0, 0, 0, b"")


def test_an_idle_writer_of_a_key_value_log_marks_the_time() -> None:
    from log.writer import State, Writer

    meta = LogMetadata(log_id=0, epoch=1, writer=0, segments=())
    w = Writer(0, 1, meta, 1, (0, 1, 2), time_marks=True)
    w.state = State.WRITING
    w.last_ts = 5_000
    assert not w.time_mark_due(5_000 + limits.TIME_MARK_IDLE_MS - 1), "not idle long enough"
    assert w.time_mark_due(5_000 + limits.TIME_MARK_IDLE_MS)
    w.next_position = 3  # entries in flight: the log is not idle
    assert not w.time_mark_due(10_000)
    plain = Writer(0, 1, meta, 1, (0, 1, 2))
    plain.state, plain.last_ts = State.WRITING, 0
    assert not plain.time_mark_due(10_000), "a log that carries no shards holds only its appends"


def test_an_ensemble_is_the_claimant_and_the_least_loaded_live_servers() -> None:
    from log.ensemble import NoEnsemble, choose, loads

    assert choose(4, [0, 1, 2, 3, 4], {0: 3, 1: 0, 2: 1, 3: 0}) == (4, 1, 3)
    assert choose(0, [0, 1, 2], {}) == (0, 1, 2)
    with pytest.raises(NoEnsemble):
        choose(0, [0, 1], {})
    assert choose(0, [0, 2], {}, pool=(0, 1, 2, 3)) == (0, 2, 1), "the pool fills it"
    assert loads([(0, 1, 2), (0, 3, 4)], writers=[0]) == {0: 4, 1: 1, 2: 1, 3: 1, 4: 1}


def test_the_preferred_writers_rings_spread_over_the_pool() -> None:
    """Each log's preferred writer (rank 0) opens its segment on itself and the live servers
    after it in the pool's order: ten logs over five servers put six copies on each."""
    from log.ensemble import NoEnsemble, ring
    from log.zk import Topology

    topo = Topology(10, (0, 1, 2, 3, 4))
    held = {s: 0 for s in range(5)}
    for log_id in range(10):
        first = next(s for s in topo.log_servers if topo.preferred_rank(log_id, s) == 0)
        for s in ring(first, range(5), topo.log_servers):
            held[s] += 1
    assert held == {s: 6 for s in range(5)}
    assert ring(3, [0, 1, 3], (0, 1, 2, 3, 4)) == (3, 0, 1), "dead servers are skipped"
    assert ring(3, [3, 4], (0, 1, 2, 3, 4)) == (3, 4, 0), "too few live: the next in order fill it"
    with pytest.raises(NoEnsemble):
        ring(0, [0, 1], (0, 1))


def test_logs_claimed_at_once_with_nothing_known_spread_over_the_pool() -> None:
    """Five servers each claiming two of ten logs while no load is known yet (a cluster
    starting): every server holds six of the thirty copies, none all the logs."""
    from log.ensemble import choose

    held = {s: 0 for s in range(5)}
    for log_id in range(10):
        for s in choose(log_id % 5, range(5), {}):
            held[s] += 1
    assert held == {s: 6 for s in range(5)}


@given(claimant=st.integers(0, 9), live=st.sets(st.integers(0, 9), min_size=3),
       load=st.dictionaries(st.integers(0, 9), st.integers(0, 50)))
def test_ensembles_are_distinct_live_servers_led_by_the_claimant(claimant: int, live: set[int],
                                                                 load: dict[int, int]) -> None:
    from log.ensemble import choose

    live = live | {claimant}
    ens = choose(claimant, live, load)
    assert ens[0] == claimant and len(set(ens)) == len(ens) == limits.ENSEMBLE_SIZE
    assert set(ens) <= live
    left_out = live - set(ens)
    assert all(load.get(s, 0) >= max(load.get(x, 0) for x in ens[1:]) for s in left_out)


def test_the_read_index_asks_the_last_segments_replicas_and_checks_their_epochs() -> None:
    from log.metadata import Segment
    from log.read_index import Stale, TailReply, read_index

    seg = Segment(epoch=3, first=10, replicas=(1, 3, 4), base_ts=0)
    meta = LogMetadata(log_id=0, epoch=3, writer=1, segments=(seg,))
    r = TailReply
    assert read_index(meta, {1: r(14, 3), 4: r(12, 3)}, fresh=False) == 14
    assert read_index(meta, {1: r(-1, 3), 3: r(-1, 3)}, fresh=False) == 9, "the sealed segments before"
    assert read_index(meta, {1: r(14, 3), 0: r(99, 3)}, fresh=False) is None, "0 holds no copy"
    with pytest.raises(Stale):
        read_index(meta, {1: r(14, 3), 3: r(15, 4)}, fresh=False)
    assert read_index(meta, {1: r(14, 3), 3: r(15, 4)}, fresh=True) == 15
    assert read_index(LogMetadata(log_id=0, epoch=1), {0: r(-1, 1), 1: r(-1, 1)}, fresh=True) is None


def test_a_move_copies_committed_entries_only_and_is_recorded_when_complete() -> None:
    from log import rereplicate as rr
    from log.metadata import Segment

    sealed = Segment(epoch=2, first=5, replicas=(0, 1, 2), base_ts=0, end=8, last_ts=1)
    open_ = Segment(epoch=3, first=9, replicas=(0, 1, 3), base_ts=1)
    meta = LogMetadata(log_id=0, epoch=3, writer=0, segments=(sealed, open_))
    assert rr.plan(meta, live=[0, 1, 3, 4], load={3: 5}) == [rr.Move(2, 2, 4)], "sealed ones only"
    assert rr.plan(meta, live=[0, 1, 2], load={}) == []
    # a move begun to 3 is taken again though 4 is less loaded now; not if 3 is gone
    assert rr.plan(meta, live=[0, 1, 3, 4], load={3: 5}, started={2: 3}) == [rr.Move(2, 2, 3)]
    assert rr.plan(meta, live=[0, 1, 4], load={3: 5}, started={2: 3}) == [rr.Move(2, 2, 4)]
    held = {p: _e(p, epoch=2) for p in range(5, 11)}  # 9, 10: past the recorded end
    assert [e.position for e in rr.to_copy(sealed, 6, held)] == [6, 7, 8]
    assert not rr.complete(sealed, 6, [6, 8]) and rr.complete(sealed, 6, [6, 7, 8])
    moved = rr.recorded(meta, rr.Move(2, 2, 4))
    assert moved.segments[0].replicas == (0, 1, 4) and moved.segments[1] == open_
