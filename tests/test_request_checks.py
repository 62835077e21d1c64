"""coordinator/checks.py's checks of a Watch and of a shard scan's token and shard: a bad
request is refused as INVALID_ARGUMENT naming its field, whatever it holds (hypothesis),
and a good one passes."""

from __future__ import annotations

import grpc
import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator import limits
from coordinator.checks import check_shard, check_watch, scan_cursor
from midtown_pb import kv_pb2 as pb
from runtime.refusals import BadRequest


def _refused(fn, *args) -> str:  # type: ignore[no-untyped-def]
    with pytest.raises(BadRequest) as e:
        fn(*args)
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
    return e.value.text


def test_a_watch_starts_at_positions_or_now_in_the_clusters_shards() -> None:
    assert _refused(check_watch, pb.WatchRequest(from_now=True), {0: 5}, 4, None).startswith("from: give")
    assert _refused(check_watch, pb.WatchRequest(), {}, 4, None).startswith("from: no positions")
    assert _refused(check_watch, pb.WatchRequest(), {4: 1}, 4, None) == (
        "from: shard 4, this cluster has shards 0..3")
    assert "in shard 2 alone" in _refused(check_watch, pb.WatchRequest(), {1: 1}, 4, 2)
    long = pb.WatchRequest(from_now=True, duration_ms=limits.WATCH_DURATION_MS_MAX + 1)
    assert _refused(check_watch, long, {}, 4, None).startswith("duration_ms: ")
    check_watch(pb.WatchRequest(from_now=True), {}, 4, None)
    check_watch(pb.WatchRequest(), {2: 7}, 4, 2)


@given(st.binary(max_size=64))
def test_any_bytes_as_a_scan_token_are_refused_or_name_this_scan(token: bytes) -> None:
    try:
        c = scan_cursor(token, "d#0", "d", 3)
    except BadRequest as e:
        assert e.text.startswith("token: ") and e.code == grpc.StatusCode.INVALID_ARGUMENT
    else:
        assert c.dataset == "d#0" and c.shard == 3 and c.view


def test_a_token_of_another_scan_is_refused_and_its_own_is_read() -> None:
    own = pb.ScanCursor(dataset="d#0", shard=3, view=b"v", node=2).SerializeToString()
    assert scan_cursor(own, "d#0", "d", 3).node == 2
    assert _refused(scan_cursor, own, "d#0", "d", 2) == "token: not a token of a scan of 'd' shard 2"
    assert _refused(scan_cursor, own, "e#0", "e", 3) == "token: not a token of a scan of 'e' shard 3"


def test_a_shard_past_the_clusters_is_refused() -> None:
    assert _refused(check_shard, 8, 8) == "shard: 8, this cluster has shards 0..7"
    check_shard(7, 8)
