"""Every process a command starts (a cluster's processes, ZooKeeper, etcd, the echo floor,
a detached supervisor), recorded the moment it starts, so that the command stops whatever
it started when it ends, wherever a stop signal landed: in a constructor before its object
was bound to a name, between two starts, or in a wait for readiness.

A process is started and recorded with stop signals held: the command's signal handler
(cli/interrupts.py) asks `hold` first, and a signal that lands inside `held()` is
sent again on the way out, so no signal falls between the start and the record. The record
is the `Popen` object itself: until it is reaped its pid cannot be reused, so signalling it
can never reach another program. `release` hands a process over for good (a detached
cluster's supervisor, once it is up)."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_lock = threading.Lock()
_started: list[subprocess.Popen[Any]] = []
_depth = 0  # held() blocks the main thread is in (signal handlers run in the main thread)
_pending: list[int] = []  # stop signals that landed in one


def hold(signum: int) -> bool:
    """For a stop signal's handler: True if the signal is to wait (inside `held()`, which
    sends it again on the way out), and the handler is to return at once."""
    if _depth:
        _pending.append(signum)
        return True
    return False


@contextmanager
def held() -> Iterator[None]:
    """Stop signals that land inside wait until its end, then take effect."""
    global _depth
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if not _depth and _pending:
            signum = _pending[0]
            _pending.clear()
            signal.raise_signal(signum)


def start(cmd: list[str], **popen: Any) -> subprocess.Popen[Any]:
    """`subprocess.Popen(cmd, **popen)`, recorded before any stop signal can act."""
    with held():
        p: subprocess.Popen[Any] = subprocess.Popen(cmd, **popen)
        with _lock:
            _started.append(p)
    return p


def release(p: subprocess.Popen[Any]) -> None:
    """`p` is to outlive the command: `stop_all` leaves it."""
    with _lock:
        if p in _started:
            _started.remove(p)


def running() -> list[subprocess.Popen[Any]]:
    """The recorded processes that have not exited."""
    with _lock:
        return [p for p in _started if p.poll() is None]


def stop_all(grace_s: float = 10.0) -> list[int]:
    """SIGCONT and SIGTERM to every recorded process still running, SIGKILL to those not
    gone after `grace_s`, each reaped. The pids it had to stop (normally none: the command's
    own clean-up stopped them)."""
    left = running()
    for p in left:
        p.send_signal(signal.SIGCONT)
        p.terminate()
    deadline = time.monotonic() + grace_s
    for p in left:
        try:
            p.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    return [p.pid for p in left]


# ---------------------------------------------------------------- a process from a record
# A pid written down earlier (cluster.json, a supervisor's) may belong to another program by
# now: pid_max is 32768 here and a busy machine wraps it in minutes (PITFALLS.md). A process
# is the one recorded only if its start time (/proc/PID/stat field 22, clock ticks since
# boot) is the one recorded with it; it is signalled through a pidfd opened before that
# check, so that it cannot be replaced between the check and the signal.

def start_ticks(pid: int) -> int | None:
    """When process `pid` started (clock ticks since boot), or None if there is none (or
    it is a zombie: it has exited)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] == "Z":
        return None
    return int(fields[19])  # field 22 of the line; fields[0] is field 3


def is_recorded(pid: int, started: int) -> bool:
    """Whether `pid` is still the process recorded with start time `started` (0: none was
    recorded, so it cannot be told apart from another: no)."""
    return pid > 0 and started > 0 and start_ticks(pid) == started


def signal_recorded(pid: int, started: int, sig: int) -> bool:
    """Send `sig` to the process recorded as (`pid`, `started`) if it is still that one;
    False (and nothing sent) if it has gone, whatever holds its pid now."""
    if pid <= 0 or started <= 0:
        return False
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return False
    try:
        if start_ticks(pid) != started:
            return False
        signal.pidfd_send_signal(fd, sig)
        return True
    except ProcessLookupError:
        return False
    finally:
        os.close(fd)


def pause(proc: subprocess.Popen[Any], paused: bool) -> None:
    """SIGSTOP `proc` (started here: its Popen, which signals nothing once it is reaped),
    returning once it is stopped (wait_stopped), or, `paused` False, SIGCONT it."""
    proc.send_signal(signal.SIGSTOP if paused else signal.SIGCONT)
    if paused:
        wait_stopped(proc.pid)


def wait_stopped(pid: int, timeout_s: float = 5.0) -> bool:
    """Whether every thread of `pid` is stopped (SIGSTOP has taken effect) within
    `timeout_s`. kill() returns once the signal is sent; each thread stops when it next runs
    in the kernel, a few milliseconds later on a loaded machine, and meanwhile it can still
    answer a request sent right after the kill (a ZooKeeper 'paused' by a test once answered
    a lookup so: issue 48)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            states = []
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/stat") as f:
                    states.append(f.read().rsplit(")", 1)[1].split()[0])
        except OSError:
            return False  # gone
        if states and all(s in ("T", "t") for s in states):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.002)
