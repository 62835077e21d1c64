"""When a follower takes a log over from a writer it has lost (log/takeover.py, pure; and
the probes of log/election.py, its shell)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from log.takeover import FORGET, PROBE_GAP_S, QUIET_S, SETTLE_S, WAIT, WATCH, Takeover, view


def _settled(t: Takeover, at: float = 0.0) -> float:
    t.writing(0, writer=2, now=at)
    return at + SETTLE_S


def test_a_quiet_writer_is_probed_and_taken_over_after_two_failed_probes() -> None:
    t = Takeover()
    now = _settled(t)
    t.heard(0, now)
    assert not t.probe_due(0, now + QUIET_S - 0.01)
    now += QUIET_S + 0.001
    assert t.probe_due(0, now)
    assert t.probed(0, answered=False, now=now) is False  # one failure is not enough
    assert not t.probe_due(0, now + PROBE_GAP_S / 2)
    now += PROBE_GAP_S
    assert t.probe_due(0, now)
    assert t.probed(0, answered=False, now=now) is True


def test_an_answer_or_a_message_clears_the_suspicion() -> None:
    t = Takeover()
    now = _settled(t) + QUIET_S + 0.001
    assert t.probed(0, answered=False, now=now) is False
    assert t.probed(0, answered=True, now=now + PROBE_GAP_S) is False
    assert not t.probe_due(0, now + PROBE_GAP_S)  # answered: heard from it just now
    now += QUIET_S + PROBE_GAP_S + 0.001
    assert t.probed(0, answered=False, now=now) is False  # the count starts again
    t.heard(0, now)
    assert not t.probe_due(0, now + PROBE_GAP_S)


def test_a_lost_stream_is_suspected_at_once() -> None:
    t = Takeover()
    now = _settled(t)
    t.heard(0, now)
    t.lost(0)
    assert t.probe_due(0, now)
    assert not t.probed(0, False, now) and t.probed(0, False, now + PROBE_GAP_S)


def test_a_writer_that_just_took_the_log_is_never_taken_over() -> None:
    """Damping: a network that flaps moves the log at most once per SETTLE_S."""
    t = Takeover()
    t.writing(0, writer=2, now=0.0)
    t.lost(0)
    assert not t.probe_due(0, SETTLE_S - 0.01)
    t.writing(0, writer=3, now=SETTLE_S - 0.01)  # a new writer: the clock starts again
    assert not t.probe_due(0, SETTLE_S + 1.0)
    assert t.probe_due(0, 2 * SETTLE_S)  # quiet since it took the log


def test_an_unknown_log_is_never_probed_or_taken() -> None:
    t = Takeover()
    assert not t.probe_due(5, 100.0) and not t.probed(5, False, 100.0)
    _settled(t)
    t.forget(0)
    assert not t.probe_due(0, 100.0)


@given(st.lists(st.tuples(st.sampled_from(["heard", "lost", "probe-ok", "probe-fail", "writer"]),
                          st.floats(0, 3)), max_size=40))
def test_a_takeover_needs_consecutive_failed_probes_of_a_settled_writer(
        events: list[tuple[str, float]]) -> None:
    """Whatever happens, a takeover comes only from the PROBES-th failed probe in a row
    (nothing heard in between), and no probe is due for a writer that has held the log
    for less than SETTLE_S."""
    t = Takeover()
    now, since, fails, writer = 0.0, 0.0, 0, 2
    t.writing(0, writer, now)
    for kind, dt in events:
        now += dt
        if kind == "heard":
            t.heard(0, now)
            fails = 0
        elif kind == "lost":
            t.lost(0)
        elif kind == "writer":
            writer += 1
            t.writing(0, writer, now)
            since, fails = now, 0
        else:
            ok = kind == "probe-ok"
            took = t.probed(0, ok, now)
            fails = 0 if ok else fails + 1
            assert took == (fails >= 2)
        if t.probe_due(0, now):  # the shell probes only when this says so
            assert now - since >= SETTLE_S


def test_a_follower_keeps_what_it_saw_of_a_writer_across_its_ensemble_changes() -> None:
    """An ensemble change gives the segment the next epoch while the writer node still
    names the last one: the follower waits (probes nothing) but does not forget the writer,
    so the writer's SETTLE_S does not start again; leaving the segment, it forgets."""
    w = {"server": 2, "state": "writing", "epoch": 4}
    assert view((1, 2, 3), 4, w, me=1, leaving=False) == WATCH
    assert view((1, 2, 5), 5, w, me=1, leaving=False) == WAIT  # moved: the node says 4 yet
    assert view((1, 2, 3), 4, {**w, "state": "recovering"}, me=1, leaving=False) == WAIT
    assert view((2, 3, 5), 5, w, me=1, leaving=False) == FORGET  # no longer a copy
    assert view(None, 4, w, me=1, leaving=False) == FORGET  # sealed
    assert view((1, 2, 3), 4, w, me=2, leaving=False) == FORGET  # the writer itself
    assert view((1, 2, 3), 4, None, me=1, leaving=False) == FORGET
    assert view((1, 2, 3), 4, w, me=1, leaving=True) == FORGET


def test_the_next_probe_falls_due_when_the_writer_has_been_quiet_long_enough() -> None:
    t = Takeover()
    assert t.next_due() is None
    now = _settled(t)
    t.heard(0, now)
    assert t.next_due() == now + QUIET_S  # the loop wakes then, not at its next poll
    assert t.probe_due(0, now + QUIET_S)
    t.probed(0, answered=False, now=now + QUIET_S)
    assert t.next_due() == now + QUIET_S + PROBE_GAP_S
    t.lost(0)
    assert t.next_due() == now + QUIET_S + PROBE_GAP_S  # the gap still holds


def test_a_writer_found_lost_stays_condemned_until_heard_from_or_forgotten() -> None:
    """A follower whose ZooKeeper session is suspended probes all the same; a writer that
    failed its probes is taken over once ZooKeeper answers, with no probe again (issue 68),
    unless a message of it arrives first."""
    t = Takeover()
    now = _settled(t) + QUIET_S + 0.001
    assert not t.condemned(0)
    t.probed(0, answered=False, now=now)
    assert not t.condemned(0)
    t.probed(0, answered=False, now=now + PROBE_GAP_S)
    assert t.condemned(0)
    t.writing(0, writer=2, now=now + 1)  # seen again in the writer node: still condemned
    assert t.condemned(0)
    t.heard(0, now + 1)
    assert not t.condemned(0)
    assert not t.condemned(7)  # a log never followed


def test_one_probe_of_a_lost_server_serves_all_its_logs_through_a_slow_takeover() -> None:
    """log/election.py: a server that wrote two logs goes quiet; a follower of both probes
    it once per round for both, and the second log is taken over in the round the first
    is, with no probe again after the first takeover's ZooKeeper calls (0.15-0.3 s on a
    loaded cluster: the second log was taken over 0.46 s after the first, issue 68)."""
    import threading
    import time

    from log.election import Election
    from log.metadata import LogMetadata, Segment
    from log.replica_link import NoAnswer
    from log.zk import Topology

    probes: list[int] = []

    class Silent:
        def call(self, msg: object, timeout_s: float) -> None:
            probes.append(1)
            raise NoAnswer("paused")

    meta = {i: LogMetadata(i, 1, (Segment(1, 0, (0, 1, 2), base_ts=0),), writer=0) for i in (0, 1)}
    e = Election(1, "here", None, Topology(2, (0, 1, 2)), {}, meta, lambda: True,  # type: ignore[arg-type]
                 lambda core: None, threading.Event(), peer=lambda s: Silent())  # type: ignore[arg-type,return-value]
    e.takeover = Takeover(settle_s=0.0, quiet_s=0.0)
    taken: list[int] = []

    def take_over(log_id: int, w: object) -> None:  # its ZooKeeper calls, slow
        time.sleep(2 * PROBE_GAP_S)
        taken.append(log_id)

    e._take_over = take_over  # type: ignore[method-assign]
    for log_id in (0, 1):
        e.writer_cache[log_id] = {"server": 0, "state": "writing", "epoch": 1}

    def one_round() -> None:
        e._round_began = time.monotonic()
        for log_id in (0, 1):
            e._watch_writer(log_id, True)

    one_round()
    assert (len(probes), taken) == (1, [])  # one failed probe for both logs
    time.sleep(PROBE_GAP_S)
    one_round()
    assert (len(probes), taken) == (2, [0, 1])
