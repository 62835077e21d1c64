"""When the local cluster's supervisor starts a process again (cluster/supervisor.py)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from cluster.runner import Cluster, Proc, pid_alive
from cluster.supervisor import EXIT_BEHIND_TRUNCATION, RestartPolicy


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


def test_a_process_whose_threads_are_still_exiting_is_running_until_its_exit_code_is_known(
        tmp_path: Path) -> None:
    """The main thread of a process can be a zombie while its other threads still run (as
    after a SIGKILL, while a storage node's threads exit): the supervisor must not see it as
    ended before its exit code can be read, or it records no exit code (CI, stop 30)."""
    # The main thread exits on its own; another thread ends the process a moment later.
    code = ("import ctypes, os, threading, time\n"
            "threading.Thread(target=lambda: (time.sleep(1.0), os._exit(7))).start()\n"
            "time.sleep(0.1)\n"
            "ctypes.CDLL(None).pthread_exit(None)\n")
    proc = subprocess.Popen([sys.executable, "-c", code])
    c = Cluster(tmp_path)
    c.procs["p"] = Proc("p", "storage-node", 0, pid=proc.pid)
    c._popen["p"] = proc
    try:
        deadline = time.monotonic() + 10
        while pid_alive(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        # The main thread is gone, the process is not: it still runs, with no exit code yet.
        assert c.running("p") or c.exit_code("p") == 7
        while c.running("p") and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not c.running("p") and c.exit_code("p") == 7
    finally:
        proc.kill()
        proc.wait()
