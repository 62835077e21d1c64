"""A coordinator notices replicas whose digests differ at the same log position: a metric
and a log line naming the shard and positions."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from coordinator.answers import DIVERGENCES, Answers
from record.model import RecordResult


def _bare() -> Answers:
    """A coordinator's answers, with three registered storage nodes (0, 1, 2)."""
    return Answers(lambda: {0, 1, 2})


def _r(node: int, digest: int, position: int = 10, shard: int = 5) -> RecordResult:
    return RecordResult(b"rid", 3, position, shard, digest, node, True)


def test_same_digests_are_quiet_and_different_ones_are_reported(caplog: pytest.LogCaptureFixture) -> None:
    c = _bare()
    before = DIVERGENCES.labels(shard="5")._value.get()
    c.check_digest(_r(0, 0xAA))
    c.check_digest(_r(1, 0xAA))
    assert c.divergences == 0
    with caplog.at_level(logging.ERROR, logger="midtown.coordinator"):
        c.check_digest(_r(2, 0xBB))
    assert c.divergences == 1
    assert DIVERGENCES.labels(shard="5")._value.get() == before + 1
    assert "shard 5 at log 3 position 10" in caplog.text
    # Duplicates (first outcomes replayed) are not compared.
    c.check_digest(RecordResult(b"rid", 3, 10, 5, 0xCC, 2, True, duplicate=True))
    assert c.divergences == 1


def test_deliver_wakes_the_waiter_once_and_checks_every_answer() -> None:

    from midtown_pb import kv_pb2 as pb
    from record import codec

    c = _bare()
    [waiter] = c.expect([(3, 6, b"rid")])  # the record it appended
    first = codec.result_to_pb(RecordResult(b"rid", 3, 11, 6, 0xAA, 0, True))
    first.answer_secret = c.secret(b"rid")  # as the storage node echoes it from the record
    second = pb.RecordResult()
    second.CopyFrom(first)
    second.node_id, second.digest = 1, 0xBB  # the other replica, diverged
    c.deliver([first])
    got = waiter.result(0)
    assert (got.request_id, got.position, got.node_id) == (b"rid", 11, 0)
    c.deliver([second])  # nobody waits any more: checked, not decoded, no error
    assert c.divergences == 1
    assert waiter.result(0) is got


def test_answers_for_records_it_never_sent_are_dropped() -> None:
    """A forged Deliver (an unknown request id, a wrong shard, a node that is not a
    registered storage node, or without the record's answer secret) neither wakes a waiter
    nor raises a divergence alarm. (The log may differ from the one the record was sent to:
    a record sent again after its shard was handed to another log is answered there with
    its first outcome, from its old log.)"""

    from record import codec

    c = _bare()
    [waiter] = c.expect([(3, 6, b"rid")])
    honest = RecordResult(b"rid", 3, 11, 6, 0xAA, 0, True)
    forged = [RecordResult(b"other", 3, 11, 6, 0xBB, 1, True),  # never sent
              RecordResult(b"rid", 3, 11, 7, 0xBB, 1, True),    # another shard
              RecordResult(b"rid", 3, 11, 6, 0xBB, 9, True)]    # no such storage node
    def over_network(r: RecordResult, secret: int) -> Any:
        m = codec.result_to_pb(r)
        m.answer_secret = secret
        return m

    right = c.secret(b"rid")
    # The right request id, log, shard and node, but not the record's answer secret: a
    # process that was never sent the record (a wrong guess, or none at all).
    c.deliver([over_network(r, right) for r in forged] + [over_network(honest, right ^ 1),
                                                          over_network(honest, 0)])
    assert not waiter.done() and c.divergences == 0 and c.refused == 5
    assert c.secret(b"rid") == right and c.secret(b"other") != right
    assert Answers(lambda: {0}).secret(b"rid") != right, "each coordinator has a key of its own"
    c.deliver([over_network(honest, right)])
    assert waiter.result(0).digest == 0xAA
    c.deliver([over_network(forged[1], right), over_network(forged[2], right)])
    assert c.divergences == 0
    # The storage node in the coordinator's own process hands over model objects: no secret.
    [w2] = c.expect([(3, 6, b"rid2")])
    c.deliver([RecordResult(b"rid2", 3, 12, 6, 0xAA, 0, True)])
    assert w2.done()
    # The first outcome of a record sent again to the shard's new log, from its old one.
    [w3] = c.expect([(3, 6, b"rid3")])
    c.deliver([over_network(RecordResult(b"rid3", 2, 40, 6, 0xCC, 0, True, True), c.secret(b"rid3"))])
    assert w3.result(0).log_id == 2


def test_too_many_waiting_requests_are_refused_and_forgetting_frees_room() -> None:
    from coordinator import limits
    from runtime.refusals import Refusal

    c = _bare()
    many = [(0, 0, b"r%d" % i) for i in range(limits.PENDING_MAX)]
    waiters = c.expect(many)
    with pytest.raises(Refusal) as ei:
        c.expect([(0, 0, b"one-more")])
    assert ei.value.code.name == "RESOURCE_EXHAUSTED"
    c.forget([rid for _, _, rid in many], waiters)
    assert len(c.expect([(0, 0, b"one-more")])) == 1
