"""A command stops on SIGINT, SIGTERM and SIGHUP even when it started with them ignored
(cli/interrupts.py): a shell starts background jobs with SIGINT ignored, and a
suite run in the background once left `bench log` running on SIGINT."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

CHILD = """
import os, signal, sys, time
from cli.interrupts import exit_code, interrupt_on_stop_signals
interrupt_on_stop_signals()
try:
    os.kill(os.getpid(), int(sys.argv[1]))
    time.sleep(30)
except KeyboardInterrupt as e:
    print(exit_code(e))
"""


def _ignoring_every_stop_signal() -> None:
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, signal.SIG_IGN)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_stop_signal_interrupts_a_command_that_inherited_it_ignored(sig: signal.Signals) -> None:
    out = subprocess.run([sys.executable, "-c", CHILD, str(int(sig))], cwd=ROOT, capture_output=True,
                         text=True, timeout=60, preexec_fn=_ignoring_every_stop_signal)
    assert out.returncode == 0 and out.stdout.strip() == str(128 + sig), out.stderr[-2000:]


STOPPED_UNDER_A_CALL = """
import argparse, os, signal
from kazoo.exceptions import ConnectionLoss
from cli.main import run

def command(a):
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        import time; time.sleep(30)
    except KeyboardInterrupt:  # its clean-up stopped ZooKeeper under a call: that call's error
        raise ConnectionLoss() from None  # takes the interrupt's place
    return 0

p = argparse.ArgumentParser(prog="midtown-bench")
p.add_argument("--verbose", action="store_true")
p.set_defaults(fn=command)
print(run(p, "bench", ["--verbose"]))
"""


def test_a_command_that_fails_as_it_stops_ends_as_the_signal_says() -> None:
    """Under load, `bench kv` SIGTERMed while its cluster started ended with exit 5 and
    "ZooKeeper's connection was lost": the cluster's clean-up had stopped ZooKeeper under a
    call of the start-up, whose error took the interrupt's place. It ends with 143."""
    out = subprocess.run([sys.executable, "-c", STOPPED_UNDER_A_CALL], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert out.stdout.strip() == str(128 + signal.SIGTERM), out.stdout + out.stderr[-2000:]
    assert "ZooKeeper" not in out.stderr
