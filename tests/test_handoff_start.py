"""drivers/handoffs.py: the hand-off record a driver looks for in the old log, and the
position of the new log that record names, before which no record of the shard stands
there.

The position: Found by the whole-cluster simulation with hand-offs
and ZooKeeper's notices late (seed 78 of `make sim`): the driver took the new log's end
from a server behind, and a shard coming back to a log it had left was named a start
below its earlier stint's records there; a replica awaiting the shard's open record met
one and stopped."""

from __future__ import annotations

from typing import Any

from catalog.log_map import Handing, Handoff, LogMap
from drivers import handoffs
from log.entry import Entry
from record import codec
from record.model import HandOff, Open, Record


class Logs:
    """A log client whose servers report log 1's end as `end` (perhaps behind)."""

    def __init__(self, end: int) -> None:
        self.end = end

    def status(self) -> list[dict[str, Any]]:
        return [{"log": 0, "last": 90}, {"log": 1, "last": self.end}]


# Shard 1 came from log 1 (its hand-off record there at 40) to log 0; it goes back now.
BACK = LogMap(logs=2, of=(0, 0), version=2, handoffs=(Handoff(shard=1, old=1, at=40, new=0, start=55,
                                                                generation=1),),
              handing=(Handing(shard=1, old=0, new=1, scan_from=91),))


def test_a_shard_coming_back_starts_past_its_last_hand_off_record_there_whatever_a_server_says() -> None:
    h = BACK.handing[0]
    assert handoffs._start(Logs(end=15), BACK, h) == 41  # a server behind: the map bounds it
    assert handoffs._start(Logs(end=70), BACK, h) == 71  # the log's end past it
    # a shard the new log never carried: its end, as reported
    first = LogMap(logs=2, of=(0, 0), version=1, handing=(Handing(shard=0, old=0, new=1, scan_from=91),))
    assert handoffs._start(Logs(end=15), first, first.handing[0]) == 16


class Read:
    """A log client reading log 1 from `since`: `records` at positions 10, 11, ..."""

    def __init__(self, records: list[Record]) -> None:
        self.entries = [Entry(10 + i, 1, 1000 + i, codec.record_to_bytes(r)) for i, r in enumerate(records)]

    def read(self, log_id: int, since: int, timeout_s: float) -> list[Entry]:
        assert log_id == 1
        return [e for e in self.entries if e.position >= since]


def _rec(op: Any) -> Record:
    return Record(b"", "", "", 1, b"", (op,))


def test_the_driver_takes_the_hand_off_record_of_the_stint_it_ends_not_an_earlier_ones() -> None:
    """Every fault drawn, seed 101535: shard 1 went from log 1 to log 0 (its hand-off record
    at 6 of log 1, generation 0), back to log 1 (generation 2 from 19), and was handed to
    log 0 again. That hand-off began with log 1's end read from a server behind (0), and
    its driver, scanning log 1 from there, took the first stint's record at 6 for its own:
    the map named it, no record ended the stint of generation 2, and every replica waited
    at the shard's new open record in log 0 for good."""
    h = Handing(shard=1, old=1, new=0, scan_from=0)
    logs = Read([_rec(HandOff(0, 0, 0)), _rec(Open(2)), _rec(HandOff(0, 30, 2))])
    assert handoffs._scan(logs, h, 0, 2, 1.0) == (12, 1002, 30)  # type: ignore[arg-type]
    assert handoffs._scan(logs, h, 0, 0, 1.0) == (10, 1000, 0)  # type: ignore[arg-type]
    assert handoffs._scan(Read([_rec(HandOff(0, 0, 0))]), h, 0, 2, 1.0) is None  # type: ignore[arg-type]
    # a record written before hand-off records said their generation: taken as the one
    assert handoffs._scan(Read([_rec(HandOff(0, 5))]), h, 0, 2, 1.0) == (10, 1000, 5)  # type: ignore[arg-type]
    # another shard's, or one to another log: not it
    other = Record(b"", "", "", 2, b"", (HandOff(0, 0, 2),))
    assert handoffs._scan(Read([other, _rec(HandOff(2, 0, 2))]), h, 0, 2, 1.0) is None  # type: ignore[arg-type]
