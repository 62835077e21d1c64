"""drivers/handoffs.py: the position of the new log a hand-off record names, before which
no record of the shard stands there. Found by the whole-cluster simulation with hand-offs
and ZooKeeper's notices late (seed 78 of `make sim`): the driver took the new log's end
from a server behind, and a shard coming back to a log it had left was named a start
below its earlier stint's records there; a replica awaiting the shard's open record met
one and stopped."""

from __future__ import annotations

from typing import Any

from catalog.log_map import Handing, Handoff, LogMap
from drivers import handoffs


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
