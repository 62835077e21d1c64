"""Nothing signals a process it did not start (issue 48, 2): a pid recorded earlier (in
cluster.json, in a Cluster object whose child has gone) may belong to another program by
now. A process is signalled only if it is the one recorded, pid and start time
(runtime/children.py); here a live process that the cluster did not start takes the place
of a recorded one, as a reused pid would, and survives every way of stopping a cluster."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cluster.runner import Cluster, Proc
from runtime import children


@pytest.fixture
def stranger() -> Iterator[subprocess.Popen[bytes]]:
    """A process no cluster started (it holds the pid a cluster recorded, in the story)."""
    p = subprocess.Popen(["sleep", "300"])
    try:
        yield p
    finally:
        p.kill()
        p.wait()


def test_a_process_is_known_by_its_pid_and_start_time(stranger: subprocess.Popen[bytes]) -> None:
    ticks = children.start_ticks(stranger.pid)
    assert ticks is not None and ticks > 0
    assert children.is_recorded(stranger.pid, ticks)
    assert not children.is_recorded(stranger.pid, ticks + 1)  # the pid, another start: not it
    assert not children.is_recorded(stranger.pid, 0)  # nothing recorded: cannot be told apart
    assert not children.signal_recorded(stranger.pid, ticks - 7, signal.SIGTERM)
    assert stranger.poll() is None
    assert children.signal_recorded(stranger.pid, ticks, signal.SIGTERM)  # the one recorded: yes
    assert stranger.wait(10) == -signal.SIGTERM
    assert children.start_ticks(stranger.pid) is None


def _cluster_naming(tmp_path: Path, pid: int, started: int) -> Cluster:
    c = Cluster(tmp_path / "c")
    c.dir.mkdir(parents=True)
    c.procs = {"zookeeper": Proc("zookeeper", "zookeeper", 1, pid=pid, started=started),
               "host-0": Proc("host-0", "host", 2, pid=pid, started=started, server_id=0)}
    c.supervisor_pid, c.supervisor_started = pid, started
    c.save()
    return c


def test_a_cluster_never_signals_a_pid_someone_else_holds_now(tmp_path: Path,
                                                              stranger: subprocess.Popen[bytes]) -> None:
    ticks = children.start_ticks(stranger.pid)
    assert ticks is not None
    c = _cluster_naming(tmp_path, stranger.pid, ticks + 100)  # recorded: a process started later
    assert not c.procs["host-0"].alive() and not c.running("host-0") and not c.supervisor_alive()
    c.signal("host-0", signal.SIGKILL)
    c.kill("host-0")
    c.terminate("host-0", grace_s=0.2)
    c.stop()
    assert stranger.poll() is None, "a process the cluster did not start was signalled"
    # The command line, from cluster.json, as after a crash or a reboot.
    _cluster_naming(tmp_path / "again", stranger.pid, ticks + 100)
    p = subprocess.run([sys.executable, "-m", "cli", "cluster", "down", "--dir",
                        str(tmp_path / "again" / "c"), "--json"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert {r["state"] for r in json.loads(p.stdout)} == {"stopped"}
    assert stranger.poll() is None, "cluster down signalled a process it did not start"
    # The check is not vacuous: recorded with its own start time, it is stopped.
    c = _cluster_naming(tmp_path / "right", stranger.pid, ticks)
    assert c.procs["host-0"].alive() and c.supervisor_alive()
    c.signal("host-0", signal.SIGTERM)
    assert stranger.wait(10) == -signal.SIGTERM


def test_a_sigstop_returns_once_every_thread_is_stopped(tmp_path: Path) -> None:
    """Cluster.signal(SIGSTOP) returns with the process paused, not a few milliseconds
    later: a ZooKeeper 'paused' by a test once answered a request sent right after the kill
    on a loaded machine (issue 48, 5)."""
    import os
    import time

    code = ("import threading, time\n"
            "for _ in range(8): threading.Thread(target=time.sleep, args=(300,)).start()\n")
    p = subprocess.Popen([sys.executable, "-c", code + "time.sleep(300)"])
    try:
        ticks = children.start_ticks(p.pid)
        assert ticks is not None
        c = _cluster_naming(tmp_path, p.pid, ticks)
        deadline = time.monotonic() + 30
        while len(os.listdir(f"/proc/{p.pid}/task")) < 9 and time.monotonic() < deadline:
            time.sleep(0.01)  # its threads started
        for _ in range(20):
            c.signal("host-0", signal.SIGSTOP)
            states = [(Path(f"/proc/{p.pid}/task") / t / "stat").read_text().rsplit(")", 1)[1].split()[0]
                      for t in os.listdir(f"/proc/{p.pid}/task")]
            assert len(states) >= 9 and set(states) <= {"T", "t"}, states
            c.signal("host-0", signal.SIGCONT)
    finally:
        p.kill()
        p.wait()
