"""The pure parts of eventually consistent datasets (coordinator/eventual.py,
storage_node/lww.py): the hybrid clock, the last-writer-wins rule, and scans merged from
several replicas, paged to the end (hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator import eventual
from midtown_pb import kv_pb2 as pb
from storage_node import keys, lww
from storage_node.settings import Settings
from storage_node.store import NodeStore

DAY_MS = int(Settings().tombstone_grace_s * 1000)  # the default grace


def test_the_clock_increases_when_the_wall_clock_steps_back_and_ids_never_collide() -> None:
    t = [1_000]
    a, b = eventual.HybridClock(1, lambda: t[0]), eventual.HybridClock(2, lambda: t[0])
    v1 = a.next()
    t[0] = 900  # stepped back
    v2, v3 = a.next(), a.next()
    assert v1 < v2 < v3
    assert eventual.HybridClock.millis(v1) == 1_000
    assert a.next() != b.next()
    t[0] = 2_000
    assert eventual.HybridClock.millis(a.next()) == 2_000


def test_last_writer_wins_and_values_round_trip() -> None:
    assert lww.wins(5, None) and lww.wins(5, 4) and not lww.wins(5, 5) and not lww.wins(4, 5)
    v = pb.LwwValue(value=b"x", version=7, expires_at_ms=9, deleted=True)
    assert lww.decode(lww.encode(v)) == v
    assert eventual.quorum(3) == 2 and eventual.quorum(1) == 1 and eventual.quorum(4) == 3


@given(st.integers(0, 10**7), st.integers(0, 10**7), st.integers(0, 10**6), st.booleans(),
       st.integers(0, 10**7))
def test_tombstones_and_expired_values_are_purged_only_past_the_grace(
        at_ms: int, now_ms: int, grace_ms: int, deleted: bool, expires: int) -> None:
    version = (at_ms << 22) | 5  # written at at_ms (coordinator 5)
    held = lww.encode(pb.LwwValue(value=b"x", version=version, deleted=deleted,
                                  expires_at_ms=0 if deleted else expires))
    if deleted:
        want = at_ms < now_ms - grace_ms
    else:
        want = expires != 0 and expires < now_ms - grace_ms
    assert lww.purgeable(held, now_ms, grace_ms) == want
    live = lww.encode(pb.LwwValue(value=b"x", version=version))
    assert not lww.purgeable(live, now_ms, grace_ms)  # no expiry, no tombstone: kept for ever


def test_a_node_down_for_longer_than_the_grace_is_outlived() -> None:
    assert lww.outlived(last_up_ms=1_000, peers_up_ms=5_001, grace_ms=4_000)
    assert not lww.outlived(1_000, 5_000, 4_000)
    assert not lww.outlived(0, 10**9, 4_000)  # never said when it was up
    assert not lww.outlived(1_000, 0, 4_000)  # no peer has said either


def _answer(replica: dict[bytes, pb.LwwValue], start: bytes, limit: int) -> pb.LwwReadResponse:
    keys = sorted(k for k in replica if k >= start)[:limit]
    return pb.LwwReadResponse(items=[pb.LwwItem(local_key=k, value=replica[k]) for k in keys])


KEY = st.sampled_from([b"a", b"b", b"c", b"d", b"e", b"f", b"g", b"h"])
VALUE = st.builds(lambda v, d, e: pb.LwwValue(value=b"v%d" % v, version=v, deleted=d, expires_at_ms=e),
                  st.integers(1, 50), st.booleans(), st.sampled_from([0, 0, 100, 10_000]))
REPLICA = st.dictionaries(KEY, VALUE, max_size=8)


@settings(max_examples=300, deadline=None)
@given(st.lists(REPLICA, min_size=1, max_size=3), st.integers(1, 4), st.integers(1, 5))
def test_paging_a_merged_scan_gives_every_live_winner_once_in_order(
        replicas: list[dict[bytes, pb.LwwValue]], limit: int, extra: int) -> None:
    now = 1_000
    best: dict[bytes, pb.LwwValue] = {}
    for r in replicas:
        for k, v in r.items():
            if k not in best or v.version > best[k].version:
                best[k] = v
    want = [(k, v.value) for k, v in sorted(best.items()) if eventual.live(v, now)]
    got: list[tuple[bytes, bytes]] = []
    start = b""
    for _ in range(100):
        asked = limit + extra
        page, nxt = eventual.scan_page([_answer(r, start, asked) for r in replicas], asked, limit, now)
        assert len(page) <= limit
        got += [(it.local_key, it.value.value) for it in page]
        if not nxt:
            break
        assert nxt > start
        start = nxt
    assert got == want


def test_the_winner_and_who_needs_repair() -> None:
    old = pb.LwwValue(value=b"old", version=1)
    new = pb.LwwValue(value=b"new", version=2)
    answers = [pb.LwwReadResponse(items=[pb.LwwItem(local_key=b"k", value=old)]),
               pb.LwwReadResponse(items=[pb.LwwItem(local_key=b"k", value=new)]),
               pb.LwwReadResponse()]
    best = eventual.winner(answers)
    assert best == new
    assert [eventual.needs_repair(a, new) for a in answers] == [True, False, True]
    assert eventual.winner([pb.LwwReadResponse()]) is None
    assert not eventual.live(pb.LwwValue(version=3, deleted=True), 0)
    assert not eventual.live(pb.LwwValue(version=3, expires_at_ms=10), 10)
    assert eventual.live(pb.LwwValue(version=3, expires_at_ms=11), 10)


def test_a_replica_pages_through_a_peer_and_keeps_only_newer_values() -> None:
    import tempfile
    from pathlib import Path

    from storage_node.store import NodeStore

    def write(r: lww.LwwReplica, lkey: bytes, version: int, shard: int = 3) -> None:
        r.write(pb.LwwWriteRequest(dataset="e#1", shard=shard, partition_key=b"p", local_key=lkey,
                                   value=pb.LwwValue(value=b"v%d" % version, version=version)))

    with tempfile.TemporaryDirectory() as d:
        a, b = NodeStore(str(Path(d) / "a")), NodeStore(str(Path(d) / "b"))
        try:
            ra, rb = lww.LwwReplica(a, DAY_MS), lww.LwwReplica(b, DAY_MS)
            for i, (va, vb) in enumerate([(5, 0), (5, 7), (5, 5), (2, 0), (9, 1)]):
                write(ra, b"k%d" % i, va)
                if vb:
                    write(rb, b"k%d" % i, vb)
            write(ra, b"other-shard", 4, shard=4)
            taken, after = 0, b""
            while True:  # pages of two
                page = ra.range(pb.LwwRangeRequest(shard=3, after=after, limit=2))
                assert len(page.keys) <= 2
                taken += rb.merge(page)
                if not page.more:
                    break
                after = page.keys[-1]
            assert taken == 3  # k0, k3 (missing) and k4 (older); k1 is newer, k2 equal
            got = rb.read(pb.LwwReadRequest(dataset="e#1", shard=3, partition_key=b"p", scan=True,
                                            limit=100))
            assert [(i.local_key, i.value.version) for i in got.items] == \
                [(b"k0", 5), (b"k1", 7), (b"k2", 5), (b"k3", 2), (b"k4", 9)]
            assert not rb.read(pb.LwwReadRequest(dataset="e#1", shard=4, partition_key=b"p",
                                                 local_key=b"other-shard")).items
        finally:
            a.close()
            b.close()


def test_quorum_decisions_and_stamps() -> None:
    assert eventual.write_shortfall(2, 3) is None and eventual.read_shortfall(2, 3) is None
    assert eventual.write_shortfall(1, 3).startswith("partial: the write reached 1 of 3")  # type: ignore[union-attr]
    assert eventual.write_shortfall(0, 3) == "no storage replica took the write; retry"
    assert "read from 1 of 3 replicas, fewer than a majority (2)" in eventual.read_shortfall(1, 3)  # type: ignore[operator]
    v = eventual.HybridClock(0, lambda: 5_000).next()
    assert eventual.stamp(b"x", v, 100, False).expires_at_ms == 5_100
    assert eventual.stamp(b"x", v, 0, False).expires_at_ms == 0
    assert eventual.stamp(b"", v, 100, True).expires_at_ms == 0  # tombstones never expire


def _expected_hashes(store: NodeStore, shards: int) -> list[int]:
    out = [0] * shards
    for key, v in store.db.items(from_key=b"E"):
        if not key.startswith(b"E"):
            break
        out[keys.shard_of_key(key)] ^= lww.item_hash(key, lww.decode(v).version)
    return out


STEP = st.tuples(st.sampled_from(["write", "merge", "purge", "drop_all", "reopen"]),
                 st.integers(0, 3), st.sampled_from([b"a", b"b", b"c"]), st.integers(1, 50),
                 st.booleans())


@settings(max_examples=40, deadline=None)
@given(st.lists(STEP, max_size=25))
def test_shard_hashes_follow_every_change(steps: list[tuple[str, int, bytes, int, bool]]) -> None:
    """The hashes kept in the write batches always equal the hashes computed from what the
    replica holds, through writes, merges, purges, drops and restarts."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        store = NodeStore(d + "/db")
        replica = lww.LwwReplica(store, grace_ms=0)
        for kind, shard, lkey, version, deleted in steps:
            k = lww.key(shard, "ds#1", b"p", lkey)
            v = pb.LwwValue(value=b"x" * version, version=version << 22, deleted=deleted)
            if kind == "write":
                replica.write(pb.LwwWriteRequest(dataset="ds#1", shard=shard, partition_key=b"p",
                                                 local_key=lkey, value=v))
            elif kind == "merge":
                replica.merge(pb.LwwRangeResponse(keys=[k], values=[v]))
            elif kind == "purge":
                held = store._get(k)
                if held is not None:
                    replica.purge([(k, held)])
            elif kind == "drop_all":
                replica.drop_all()
            else:
                store.close()
                store = NodeStore(d + "/db")
                replica = lww.LwwReplica(store, grace_ms=0)
            assert replica.hashes(4) == _expected_hashes(store, 4)
        store.close()


def test_hashes_are_computed_for_values_stored_before_there_were_hashes() -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        store = NodeStore(d + "/db")
        for shard in (1, 3):  # as an older version stored them: values, no hashes
            v = pb.LwwValue(value=b"x", version=9 << 22)
            store.db.put(lww.key(shard, "ds#1", b"p", b"k"), lww.encode(v))
        assert lww.LwwReplica(store, DAY_MS).hashes(4) == _expected_hashes(store, 4) != [0, 0, 0, 0]
        store.close()


def test_settings_come_from_the_environment_and_refuse_bad_values() -> None:
    import pytest

    s = Settings.from_env({"MIDTOWN_POSITION_INTERVAL_S": "0.5", "MIDTOWN_TOMBSTONE_GRACE_S": "3"})
    assert s.position_interval_s == 0.5 and s.tombstone_grace_s == 3 and s.anti_entropy_s == 60
    for bad in ("0", "-1", "soon", "nan"):
        with pytest.raises(ValueError, match="MIDTOWN_DROP_DELAY_S"):
            Settings.from_env({"MIDTOWN_DROP_DELAY_S": bad})


@given(st.lists(st.sampled_from(["east", "west", "north", ""]), min_size=1, max_size=9),
       st.sampled_from(["east", "west", "", "mars"]), st.data())
def test_a_local_quorum_is_a_majority_of_the_callers_data_center_and_meets_any_other_there(
        where: list[str], dc: str, data: st.DataObject) -> None:
    """coordinator/eventual.py local_quorum: from a data center holding some of the shard's
    replicas, a majority of those alone (any two such majorities share a replica: a read
    there sees a write acknowledged there); from one holding none, or none named, a
    majority of all of them, as before."""
    replicas = list(range(len(where)))
    dc_of = dict(enumerate(where))
    counted, n = eventual.local_quorum(replicas, dc_of, dc)
    there = [r for r in replicas if dc and dc_of[r] == dc]
    assert (list(counted), n) == ((there, len(there)) if there else (replicas, len(replicas)))
    need = eventual.quorum(n)
    w = data.draw(st.sets(st.sampled_from(counted), min_size=need, max_size=need))
    r = data.draw(st.sets(st.sampled_from(counted), min_size=need, max_size=need))
    assert w & r
