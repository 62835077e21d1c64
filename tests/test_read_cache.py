"""Read streams share one encoding of each committed entry (log/read_cache.py)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from log.entry import Entry
from log.read_cache import ReadCache, encode
from midtown_pb import log_pb2 as pb


def _entries(lo: int, hi: int) -> list[Entry]:
    return [Entry(p, 3, 1000 + p, b"payload-%d" % p) for p in range(lo, hi + 1)]


@given(st.lists(st.tuples(st.integers(0, 2**62), st.integers(1, 2**40), st.integers(0, 2**50),
                          st.binary(max_size=300)), max_size=20))
def test_joined_chunks_are_a_read_response(rows: list[tuple[int, int, int, bytes]]) -> None:
    entries = [Entry(*r) for r in rows]
    msg = pb.ReadResponse.FromString(b"".join(encode(e) for e in entries))
    assert [(m.position, m.epoch, m.timestamp_ms, m.payload) for m in msg.entries] == rows


def test_streams_share_the_encoding_and_only_missing_entries_are_read() -> None:
    reads: list[tuple[int, int]] = []

    def read(lo: int, hi: int) -> list[Entry]:
        reads.append((lo, hi))
        return _entries(lo, hi)

    cache = ReadCache()
    first = cache.chunks(0, 0, 9, read)
    assert cache.chunks(0, 0, 9, read) == first  # a second stream: no read at all
    assert reads == [(0, 9)]
    more = cache.chunks(0, 5, 14, read)  # half cached: only the rest is read
    assert reads == [(0, 9), (10, 14)]
    got = pb.ReadResponse.FromString(b"".join(more))
    assert [e.position for e in got.entries] == list(range(5, 15))
    assert got.entries[0].payload == b"payload-5"
    cache.chunks(1, 0, 2, read)  # logs are apart
    assert reads[-1] == (0, 2)


def test_the_cache_is_bounded_per_log() -> None:
    cache = ReadCache(per_log=100)
    for lo in range(0, 1000, 50):
        cache.chunks(0, lo, lo + 49, _entries)
    assert len(cache._logs[0]) == 100
    calls: list[tuple[int, int]] = []

    def read(lo: int, hi: int) -> list[Entry]:
        calls.append((lo, hi))
        return _entries(lo, hi)

    cache.chunks(0, 0, 9, read)
    assert calls == [(0, 9)]  # evicted long ago, read again
