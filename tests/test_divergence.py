"""A coordinator notices replicas whose digests differ at the same log position: a metric
and a log line naming the shard and positions."""

from __future__ import annotations

import logging

import pytest

from coordinator.server import DIVERGENCES, Coordinator
from storage_node.model import RecordResult


def _bare() -> Coordinator:
    c = Coordinator.__new__(Coordinator)  # no ZooKeeper needed for the digest check
    import threading
    from collections import OrderedDict

    c._lock = threading.Lock()
    c._digests = OrderedDict()
    c.divergences = 0
    return c


def _r(node: int, digest: int, position: int = 10, shard: int = 5) -> RecordResult:
    return RecordResult(b"rid", 3, position, shard, digest, node, True)


def test_same_digests_are_quiet_and_different_ones_are_reported(caplog: pytest.LogCaptureFixture) -> None:
    c = _bare()
    before = DIVERGENCES.labels(shard="5")._value.get()
    c._check_digest(_r(0, 0xAA))
    c._check_digest(_r(1, 0xAA))
    assert c.divergences == 0
    with caplog.at_level(logging.ERROR, logger="midtown.coordinator"):
        c._check_digest(_r(2, 0xBB))
    assert c.divergences == 1
    assert DIVERGENCES.labels(shard="5")._value.get() == before + 1
    assert "shard 5 at log 3 position 10" in caplog.text
    # Duplicates (first outcomes replayed) are not compared.
    c._check_digest(RecordResult(b"rid", 3, 10, 5, 0xCC, 2, True, duplicate=True))
    assert c.divergences == 1


def test_deliver_wakes_the_waiter_once_and_checks_every_answer() -> None:
    from concurrent.futures import Future

    from midtown_pb import kv_pb2 as pb
    from storage_node import codec

    c = _bare()
    c._waiters = {}
    waiter: Future[RecordResult] = Future()
    c._waiters[b"rid"] = [waiter]
    first = codec.result_to_pb(RecordResult(b"rid", 3, 11, 6, 0xAA, 0, True))
    second = pb.RecordResult()
    second.CopyFrom(first)
    second.node_id, second.digest = 1, 0xBB  # the other replica, diverged
    c.deliver([first])
    got = waiter.result(0)
    assert (got.request_id, got.position, got.node_id) == (b"rid", 11, 0)
    c.deliver([second])  # nobody waits any more: checked, not decoded, no error
    assert c.divergences == 1
    assert waiter.result(0) is got
