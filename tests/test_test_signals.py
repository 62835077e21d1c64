"""A test run stopped by SIGTERM or SIGHUP stops what its fixtures started
(tests/conftest.py pytest_configure): the fixtures' teardowns run, as after Ctrl-C."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

MODULE = '''
import subprocess, time, pytest

@pytest.fixture(scope="module")
def child():
    p = subprocess.Popen(["sleep", "600"])
    try:  # a signal may land before the yield, while it says the pid
        print("CHILD", p.pid, flush=True)
        yield p
    finally:
        p.kill()
        p.wait()

def test_waits(child):
    time.sleep(120)
'''


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_signalled_test_run_tears_its_fixtures_down(tmp_path: Path, sig: signal.Signals) -> None:
    (tmp_path / "test_child.py").write_text(MODULE)
    run = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
                            "-p", "tests.conftest", str(tmp_path / "test_child.py")],
                           cwd=ROOT, stdout=subprocess.PIPE, text=True,
                           env={**os.environ, "PYTHONPATH": str(ROOT)})
    child = 0
    try:
        assert run.stdout is not None
        for line in run.stdout:  # the fixture's child started: its pid
            if line.startswith("CHILD"):
                child = int(line.split()[1])
                break
        assert child, "the fixture did not start its child"
        run.send_signal(sig)
        run.wait(60)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _alive(child):
            time.sleep(0.05)
        assert not _alive(child), f"the fixture's child {child} outlived the run stopped by {sig.name}"
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()


def _alive(pid: int) -> bool:
    """Whether `pid` is a live `sleep 600` (not a zombie, nor a pid reused since)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return stat.split(") ", 1)[1][0] != "Z" and cmd.split(b"\0")[:2] == [b"sleep", b"600"]
