"""The stall probe (tests/stalls.py) sees a time the process could not run: here the
interpreter held by one thread for 0.3 s (a long switch interval and a busy loop), as a
loaded machine holds the whole process."""

from __future__ import annotations

import sys
import time

from tests.stalls import Stalls


def test_a_stall_of_the_process_is_seen_in_the_window_it_overlapped() -> None:
    with Stalls() as stalls:
        time.sleep(0.1)  # the probe runs
        before = sys.getswitchinterval()
        sys.setswitchinterval(5.0)
        try:
            t0 = time.monotonic()
            while time.monotonic() - t0 < 0.3:  # the probe cannot take the interpreter
                pass
            t1 = time.monotonic()
        finally:
            sys.setswitchinterval(before)
        seen = stalls.during(t0, t1)
        assert seen >= 0.2, seen
        assert stalls.worst() >= seen
