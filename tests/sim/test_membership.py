"""runtime/membership.py on the simulated ZooKeeper: a process whose session expired while
it was cut off registers again as soon as its new session is up, not at its next periodic
check (a broken variant that ignores the new session is caught)."""

from __future__ import annotations

from typing import Any

from runtime import membership, world
from tests.sim.scheduler import Scheduler
from tests.sim.zookeeper import Ensemble


class _IgnoresNewSessions(membership.Membership):
    def _on_state(self, state: str) -> None:
        pass  # broken: waits for the periodic check


def _back_by(seed: int, kind: type[membership.Membership]) -> tuple[bool, int]:
    """Whether the node is there again half a second after a partition past the session
    timeout heals, and how many times it was registered."""
    s = Scheduler(seed)
    ens = Ensemble(session_timeout_s=4.0)

    def body() -> tuple[bool, int]:
        c, other = ens.client(), ens.client()
        c.start()
        other.start()
        m = kind(c, "/midtown/servers/7", lambda: {"addr": "sim:7"})
        m.start()
        world.sleep(1)
        ens.partition(c, 7.0)  # expires at 5 s; heals at 8 s; the periodic check is at 10 s
        world.sleep(4.5)
        assert other.exists("/midtown/servers/7") is None
        world.sleep(3)
        stat: Any = other.exists("/midtown/servers/7")
        back = stat is not None and stat.ephemeralOwner == c.client_id[0]
        m.stop()
        return back, m.registrations

    out = s.run(body)
    assert s.failures == [] and ens.errors == [] and ens.expired == 1
    return out


def test_a_lost_session_is_registered_again_when_the_new_one_is_up() -> None:
    for seed in range(5):
        assert _back_by(seed, membership.Membership) == (True, 2)


def test_the_check_catches_a_member_that_waits_for_its_periodic_check() -> None:
    assert _back_by(0, _IgnoresNewSessions) == (False, 1)
