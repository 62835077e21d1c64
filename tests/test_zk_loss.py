"""A server starting up goes on through a ZooKeeper connection or session lost meanwhile
(runtime/process.py through_zk_loss): the whole-cluster simulation's nodes paused past their
session timeout in the middle of their start (tests/sim/test_nodes.py) used to end their
start there, and never served."""

from __future__ import annotations

import pytest
from kazoo.exceptions import ConnectionLoss, NoNodeError, SessionExpiredError

from runtime.process import through_zk_loss


def test_a_call_is_made_again_until_zookeeper_answers() -> None:
    fails = [SessionExpiredError(), ConnectionLoss()]
    calls = []

    def fn() -> str:
        calls.append(1)
        if fails:
            raise fails.pop(0)
        return "done"
    assert through_zk_loss(fn, "starting") == "done"
    assert len(calls) == 3


def test_zookeeper_gone_for_longer_than_the_timeout_ends_the_process_saying_what_waited() -> None:
    def fn() -> None:
        raise ConnectionLoss()
    with pytest.raises(SystemExit, match="registering: ZooKeeper did not answer for 0.6 s"):
        through_zk_loss(fn, "registering", timeout_s=0.6)


def test_other_errors_are_not_taken_for_a_lost_connection() -> None:
    calls = []

    def fn() -> None:
        calls.append(1)
        raise NoNodeError()
    with pytest.raises(NoNodeError):
        through_zk_loss(fn, "starting")
    assert calls == [1]
