"""`machine up` waits for its workers to register (cluster/machine.py wait_workers): a
ZooKeeper connection lost a moment while it asks (an ensemble on a loaded machine) is
asked through, not the end of the command (the suite beside a busy process per core saw
`machine up` end there, and test_netns.py's machines with it)."""

from __future__ import annotations

from typing import Any

import pytest
from kazoo.exceptions import ConnectionLoss

from cluster import Cluster, ClusterError, machine


class _Zk:
    def stop(self) -> None:
        pass

    def close(self) -> None:
        pass


def test_a_connection_lost_while_waiting_is_asked_through(monkeypatch: pytest.MonkeyPatch,
                                                          tmp_path: Any) -> None:
    answers: list[Any] = [ConnectionLoss(), ConnectionLoss(), ("workers up: 1/2", False),
                          ("workers up: 2/2", True)]

    def registered(c: Cluster, zk: Any) -> tuple[str, bool]:
        got = answers.pop(0)
        if isinstance(got, Exception):
            raise got
        return got  # type: ignore[no-any-return]
    monkeypatch.setattr(machine.zkpaths, "connect", lambda hosts: _Zk())
    monkeypatch.setattr(machine, "_registered", registered)
    said: list[str] = []
    machine.wait_workers(Cluster(tmp_path, zk_external="zk:1"), 30, said.append)
    assert said == ["workers up: 1/2", "workers up: 2/2"] and not answers


def test_workers_not_ready_by_the_deadline_say_what_was_last_known(monkeypatch: pytest.MonkeyPatch,
                                                                    tmp_path: Any) -> None:
    def lost(c: Cluster, zk: Any) -> tuple[str, bool]:
        raise ConnectionLoss()
    monkeypatch.setattr(machine.zkpaths, "connect", lambda hosts: _Zk())
    monkeypatch.setattr(machine, "_registered", lost)
    with pytest.raises(ClusterError, match="workers not ready after 0.3s: workers up: not known yet"):
        machine.wait_workers(Cluster(tmp_path, zk_external="zk:1"), 0.3)
