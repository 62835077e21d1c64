"""The read lease's pure parts (log/lease.py): the holder's expiry, the replicas' promises,
and the arithmetic that makes a new writer wait out an old writer's lease whatever the
clocks' rates within the bound. The protocol through crashes, partitions and takeovers is
tests/sim/test_log_sim.py's; a writer paused past its lease is tests/integration/test_lease.py."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from log import lease
from log.lease import DRIFT_MAX, Holder, Promise


def test_the_lease_runs_from_the_ack_quorums_older_send() -> None:
    h = Holder(lease_s=0.5, ack_quorum=2)
    h.open((1, 2, 3))
    h.acked(1, 10.0)
    assert not h.valid(10.1), "one replica is not an ack quorum"
    h.acked(2, 10.2)
    assert h.expiry == pytest.approx(10.5), "from the older of the two sends"
    h.acked(3, 10.4)
    assert h.expiry == pytest.approx(10.7), "the two latest sends now: 10.2 and 10.4"
    h.acked(1, 9.0)  # a late answer to an older message changes nothing
    assert h.expiry == pytest.approx(10.7)
    assert h.valid(10.69) and not h.valid(10.7)


def test_only_the_open_segments_replicas_count_and_a_move_drops_the_lease() -> None:
    h = Holder(lease_s=0.5, ack_quorum=2)
    h.open((1, 2, 3))
    h.acked(4, 10.0)
    h.acked(1, 10.0)
    assert not h.valid(10.0), "server 4 holds no copy of the segment"
    h.acked(2, 10.0)
    assert h.valid(10.0)
    h.drop()
    assert not h.valid(10.0)
    h.open((4, 5, 6))
    h.acked(1, 10.1)
    h.acked(2, 10.1)
    assert not h.valid(10.1), "acknowledgements from the old segment's replicas do not count"


def test_a_replica_promises_from_each_lease_acknowledgement_and_from_its_start() -> None:
    p = Promise(started_at=100.0, lease_s=0.5)
    assert p.wait_ms(0, 100.0) == math.ceil(lease.guard(0.5) * 1000), "it forgot what it promised before"
    assert p.wait_ms(0, 101.0) == 0
    p.acked(0, 101.0, lease_ms=0)
    assert p.wait_ms(0, 101.0) == 0, "a message without a lease promises nothing"
    p.acked(0, 101.0, lease_ms=500)
    assert p.wait_ms(0, 101.2) == math.ceil((lease.guard(0.5) - 0.2) * 1000)
    assert p.wait_ms(1, 101.2) == 0, "per log"
    assert Promise(started_at=100.0, lease_s=0.0).wait_ms(0, 100.0) == 0


rate = st.floats(1 - DRIFT_MAX, 1 + DRIFT_MAX)
gap = st.floats(0, 3)


@given(lease_s=st.floats(0.01, lease.LEASE_S_MAX), writer_rate=rate, replica_rate=rate, new_rate=rate,
       to_ack=gap, to_fence=gap, to_reply=gap, offset=st.floats(-1e6, 1e6))
def test_a_new_writer_waits_out_the_old_lease_whatever_the_rates(
        lease_s: float, writer_rate: float, replica_rate: float, new_rate: float, to_ack: float,
        to_fence: float, to_reply: float, offset: float) -> None:
    """Real time: the old writer reads its clock and sends (t=0), the replica acknowledges
    (to_ack later), is fenced (to_fence later) and the new writer has the reply (to_reply
    later). Each clock runs at its own rate within DRIFT_MAX. Whatever they are, the new
    writer's wait, counted on its clock, ends after the old lease, counted on the old
    writer's clock."""
    lease_end = lease_s / writer_rate  # real time at which the old writer's clock passes t0 + lease
    t_ack, t_fence = to_ack, to_ack + to_fence
    replica_clock = lambda t: offset + replica_rate * t  # noqa: E731
    p = Promise(started_at=-1e9, lease_s=lease_s)
    p.acked(0, replica_clock(t_ack), round(lease_s * 1000))
    # (The lease a message carries is whole milliseconds; the writer times with the same.)
    lease_end = (round(lease_s * 1000) / 1000) / writer_rate
    wait_s = p.wait_ms(0, replica_clock(t_fence)) / 1000
    visible = t_fence + to_reply + wait_s / new_rate
    assert visible >= lease_end - 1e-9


def test_the_lease_setting_is_checked() -> None:
    assert lease.lease_s_from_env({}) == lease.LEASE_S_DEFAULT
    assert lease.lease_s_from_env({"MIDTOWN_READ_LEASE_S": "0"}) == 0.0
    for bad in ("x", "-1", "3", "nan"):
        with pytest.raises(ValueError, match="MIDTOWN_READ_LEASE_S"):
            lease.lease_s_from_env({"MIDTOWN_READ_LEASE_S": bad})


def test_a_lease_or_a_wait_no_server_would_send_is_refused_naming_its_field() -> None:
    """A writer's lease_ms over the most a lease may be, and a fence reply asking a wait longer
    than any promise: both refused at the edge (log/codec.py), never taken as given."""
    from log import codec
    from log.messages import LEASE_MS_MAX, LEASE_WAIT_MS_MAX
    from midtown_pb import log_pb2 as pb
    from runtime.refusals import BadRequest

    top = pb.AddEntriesRequest(log_id=0, epoch=1, lease_ms=LEASE_MS_MAX)
    assert codec.add_from_pb(top).lease_ms == LEASE_MS_MAX
    with pytest.raises(BadRequest, match="lease_ms"):
        codec.add_from_pb(pb.AddEntriesRequest(log_id=0, epoch=1, lease_ms=LEASE_MS_MAX + 1))
    ok = pb.FenceResponse(result="OK", fenced_epoch=1, lease_wait_ms=LEASE_WAIT_MS_MAX)
    assert codec.fence_reply_from_pb(ok).lease_wait_ms == LEASE_WAIT_MS_MAX
    with pytest.raises(BadRequest, match="lease_wait_ms"):
        codec.fence_reply_from_pb(pb.FenceResponse(result="OK", fenced_epoch=1,
                                                   lease_wait_ms=LEASE_WAIT_MS_MAX + 1))
    # What a replica promises never reaches that bound.
    p = Promise(started_at=0.0, lease_s=lease.LEASE_S_MAX)
    p.acked(0, 0.0, LEASE_MS_MAX)
    assert p.wait_ms(0, 0.0) <= LEASE_WAIT_MS_MAX
