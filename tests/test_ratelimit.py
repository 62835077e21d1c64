from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from coordinator.ratelimit import RateLimiter


def test_burst_then_steady_rate() -> None:
    r = RateLimiter()
    assert sum(r.allow("d", 10, 0.0) for _ in range(30)) == 10  # the burst
    assert not r.allow("d", 10, 0.05)
    assert r.allow("d", 10, 0.1)  # one token per 0.1 s
    assert r.allow("other", 10, 0.1), "keys are independent"
    assert all(r.allow("free", 0, 0.0) for _ in range(1000)), "0 means no limit"


@given(st.floats(1, 1000), st.lists(st.floats(0, 0.01), min_size=1, max_size=300))
def test_never_more_than_burst_plus_rate_times_time(rate: float, gaps: list[float]) -> None:
    r = RateLimiter()
    now, allowed = 0.0, 0
    for g in gaps:
        now += g
        allowed += r.allow("k", rate, now)
    assert allowed <= max(rate, 1.0) + rate * now + 1e-6
