"""bench/wan.py's own logic: when each held packet goes, the iptables rule, and its
arguments (the program itself runs between namespaces: tests/integration/test_wan.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench import wan


@given(st.lists(st.floats(0, 1000, allow_nan=False), min_size=1, max_size=50),
       st.floats(0.001, 1), st.floats(0, 1), st.randoms(use_true_random=False))
def test_each_packet_waits_the_delay_and_none_overtakes_another(came: list[float], delay: float,
                                                                  jitter: float, rnd: object) -> None:
    hold = wan.Hold(delay, jitter, rnd.random)  # type: ignore[attr-defined]
    came.sort()
    due = [hold.due(t) for t in came]
    assert all(d >= t + delay for d, t in zip(due, came))
    assert all(d <= max(t + delay + jitter, prev) for d, t, prev in zip(due, came, [0.0] + due))
    assert due == sorted(due)


def test_the_rule_and_bad_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    assert wan.rule("-I", 7, "10.1.2.0/26") == ["iptables", "-I", "OUTPUT", "-d", "10.1.2.0/26", "-j",
                                                "NFQUEUE", "--queue-num", "7"]
    for args, field in ((["--queue", "1", "--delay-ms", "0", "--to", "10.0.0.1"], "--delay-ms"),
                        (["--queue", "1", "--delay-ms", "soon", "--to", "10.0.0.1"], "--delay-ms"),
                        (["--queue", "1", "--delay-ms", "5", "--jitter-ms", "-1", "--to", "10.0.0.1"],
                         "--jitter-ms"),
                        (["--queue", "1", "--delay-ms", "5", "--to", "the east"], "--to"),
                        (["--queue", "70000", "--delay-ms", "5", "--to", "10.0.0.1"], "--queue")):
        with pytest.raises(SystemExit) as ei:
            wan.main(args)
        assert ei.value.code == 2 and field in capsys.readouterr().err.splitlines()[-1], (args, field)
