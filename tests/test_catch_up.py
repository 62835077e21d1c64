"""log/catch_up.py: a read of what a log has committed, fetched from a segment's replicas
where this server does not hold it."""

from __future__ import annotations

import threading
from typing import Any

from log.catch_up import CatchUp
from log.entry import Entry
from log.messages import ReadRange, ReadRangeReply, Result
from log.metadata import LogMetadata, Segment
from log.replica_link import NoAnswer


class _Holds:
    """A replica that holds positions 1..10 of segment 1 (or is silent)."""

    def __init__(self, silent: bool = False) -> None:
        self.silent = silent
        self.asked = 0

    def call(self, msg: Any, timeout_s: float) -> Any:
        assert isinstance(msg, ReadRange)
        self.asked += 1
        if self.silent:
            raise NoAnswer(f"no answer in {timeout_s}s")
        held = tuple(Entry(p, 1, p, b"x") for p in range(msg.first, msg.last + 1))
        return ReadRangeReply(Result.OK, 1, held, answered_last=msg.last)


class _Empty:
    def range(self, log_id: int, epoch: int, lo: int, hi: int) -> list[Entry]:
        return []


def _reader(links: dict[int, _Holds], segments: tuple[Segment, ...]) -> CatchUp:
    meta = {0: LogMetadata(0, 2, segments, writer=3)}
    return CatchUp(3, 1, _Empty(), None, threading.Lock(), meta, {},  # type: ignore[arg-type]
                   links.get, threading.Event())  # type: ignore[arg-type]


def test_a_sealed_segment_is_read_from_its_writer_last() -> None:
    """A log taken over from a writer that went quiet: its sealed segment's entries are read
    from the other replicas, and the old writer (the segment's first replica, silent here)
    is not asked at all. Asked first, it held such a read for REPLICA_RPC_TIMEOUT_S (2 s):
    a storage node's follow of a log just taken over waited so (issue 68)."""
    links = {0: _Holds(silent=True), 1: _Holds(), 2: _Holds()}
    reader = _reader(links, (Segment(1, 1, (0, 1, 2), base_ts=0, end=10, last_ts=10),
                             Segment(2, 11, (3, 1, 2), base_ts=10)))
    got = reader.read_committed(0, 1, 10)
    assert [e.position for e in got] == list(range(1, 11))
    assert (links[0].asked, links[1].asked, links[2].asked) == (0, 1, 0)


def test_an_open_segment_is_read_from_its_writer_first() -> None:
    """The open segment's writer holds every entry it acknowledged: it is asked first."""
    links = {0: _Holds(), 1: _Holds(), 2: _Holds()}
    reader = _reader(links, (Segment(1, 1, (0, 1, 2), base_ts=0),))
    assert len(reader.read_committed(0, 1, 10)) == 10
    assert (links[0].asked, links[1].asked, links[2].asked) == (1, 0, 0)
