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
