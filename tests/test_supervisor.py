"""When the local cluster's supervisor starts a process again (midtown/cluster/supervisor.py)."""

from __future__ import annotations

from midtown.cluster.supervisor import EXIT_BEHIND_TRUNCATION, RestartPolicy


def test_restarts_back_off_and_reset_after_a_healthy_run() -> None:
    p = RestartPolicy(first_s=1, max_s=8, healthy_s=60)
    p.started("s", 0)
    waits = []
    now = 0.0
    for _ in range(6):  # dies at once, again and again
        when = p.exited("s", 1, now)
        assert when is not None
        waits.append(when - now)
        now = when
        p.started("s", now)
    assert waits == [1, 2, 4, 8, 8, 8]
    # It then runs for longer than healthy_s: the next restart is quick again.
    assert p.exited("s", 1, now + 61) == now + 61 + 1


def test_a_node_behind_a_truncation_is_left_stopped() -> None:
    p = RestartPolicy()
    p.started("storage-1", 0)
    assert p.exited("storage-1", EXIT_BEHIND_TRUNCATION, 5) is None
    assert p.exited("storage-1", -9, 5) is not None  # killed: restarted
