"""The coordinator's group commit toward a log (coordinator/appender.py) keeps each caller's
deadline: a group's Append runs within the earliest deadline among its callers (it once ran
every group for 20 s, whatever the request's deadline; the whole-cluster simulation saw
writes take 10 s against 5, tests/sim/nodes.py)."""

from __future__ import annotations

import threading
import time

import grpc
import pytest

from coordinator.appender import Appender, Sealed
from log.client import Appended
from log.seals import UNTAGGED, Tags
from runtime import refusals
from runtime.refusals import Refusal


class _Logs:
    """A log client that records the time each Append was given, and holds the first one
    until told to go (so that the callers behind it make one group)."""

    def __init__(self) -> None:
        self.timeouts: list[float] = []
        self.tags: list[Tags] = []
        self.go = threading.Event()

    def append(self, log_id: int, payloads: list[bytes], timeout_s: float = 30.0,
               tags: Tags = UNTAGGED) -> Appended:
        self.timeouts.append(timeout_s)
        self.tags.append(tags)
        if 7 in tags.shards:  # a shard this log handed over (log/seals.py)
            raise Refusal(grpc.StatusCode.FAILED_PRECONDITION, "shard 7 was handed over",
                          reason=refusals.SEALED)
        if len(self.timeouts) == 1:
            assert self.go.wait(10)
        return Appended(len(self.timeouts) * 100, len(payloads), 0, 1, 1)


def test_a_lone_append_runs_within_its_deadline() -> None:
    logs = _Logs()
    logs.go.set()
    Appender(logs, 0).append(b"x", 2.0)  # type: ignore[arg-type]
    assert 0 < logs.timeouts[0] <= 2.0


def test_a_group_runs_within_the_earliest_deadline_of_its_callers() -> None:
    logs = _Logs()
    a = Appender(logs, 0)  # type: ignore[arg-type]
    first = threading.Thread(target=a.append, args=(b"lead", 5.0))
    first.start()
    while not logs.timeouts:  # the first append is in flight: the next callers queue
        time.sleep(0.01)
    late = [threading.Thread(target=a.append, args=(b"p%d" % i, t)) for i, t in enumerate((3.0, 1.5, 4.0))]
    for t in late:
        t.start()
    deadline = time.monotonic() + 10
    while len(a._group._q) < 3 and time.monotonic() < deadline:  # all three queued behind it
        time.sleep(0.01)
    logs.go.set()
    for t in [first, *late]:
        t.join(10)
    assert len(logs.timeouts) == 2, "the three callers behind the first make one group"
    assert 0 < logs.timeouts[1] <= 1.5


def test_each_record_names_its_shard_and_generation_and_a_sealed_refusal_is_told_apart() -> None:
    """The log's writer admits a record only in its shard's stint of the generation the
    coordinator's map names (log/seals.py); a refusal for that is Sealed (nothing of the
    append is in the log: its records are sent again by the map read again), not Refusal."""
    logs = _Logs()
    logs.go.set()
    a = Appender(logs, 0)  # type: ignore[arg-type]
    a.append_many([(b"x", 0.0, 3, 1), (b"y", 0.0, 4, 0)], 2.0)
    assert logs.tags[-1] == Tags((3, 4), (1, 0))
    with pytest.raises(Sealed):
        a.append(b"z", 2.0, 7, 2)
    assert logs.tags[-1] == Tags((7,), (2,))


def test_an_append_of_a_shard_this_process_does_not_answer_hurries_the_logs_followers() -> None:
    """Tags.hurry (log/local.py: the in-process append then hurries the log's lingering
    Read streams, log/linger.py): set when a record's shard is not answered by this
    process's storage node, whose answer is then awaited from another host's replica
    (bench datacenters, three copies over five hosts: a local CAS 100 ms -> 7 ms)."""
    logs = _Logs()
    logs.go.set()
    beside = {3}  # the storage node of this process holds shard 3 only
    a = Appender(logs, 0, lambda log_id, shard: shard in beside)  # type: ignore[arg-type]
    a.append(b"x", 2.0, shard=3)
    a.append_many([(b"y", time.monotonic() + 2, 3, 0), (b"z", time.monotonic() + 2, 4, 0)], 2.0)
    a.append(b"t", 2.0)  # a record of no shard (a time mark's kind): nobody waits on a replica
    assert [t.hurry for t in logs.tags] == [False, True, False]
    assert not Appender(logs, 0).append(b"d", 2.0, shard=4).maybe_earlier_copy  # type: ignore[arg-type]
    assert logs.tags[-1].hurry is False  # by default: answered beside, as before
