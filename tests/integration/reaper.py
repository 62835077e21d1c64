"""Run a command as a child subreaper's child, stop it with a signal at a chosen point of its
output, and report every process of it that outlived it.

    python -m tests.integration.reaper --after TEXT --delay S --signal HUP -- midtown-bench kv ...

This process marks itself a child subreaper (prctl PR_SET_CHILD_SUBREAPER), so whatever the
command started and left behind (even started in a session of its own) becomes this
process's child when the command exits: a leak cannot hide. It prints one JSON object:
the command's exit code, its output, and the command lines of the processes left (which it
then kills, so a failing check leaves nothing behind either)."""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _children() -> dict[int, str]:
    """This process's live children: pid -> command line."""
    me = os.getpid()
    out = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            fields = stat.rsplit(")", 1)[1].split()
            if int(fields[1]) != me or fields[0] == "Z":
                continue
            out[int(d.name)] = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError, ValueError):
            continue
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--after", required=True, help="send the signal once a line holds this")
    ap.add_argument("--delay", type=float, default=0.0, help="seconds after that line")
    ap.add_argument("--signal", required=True, help="INT, TERM or HUP")
    ap.add_argument("--timeout", type=float, default=180.0)
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise SystemExit(f"prctl: errno {ctypes.get_errno()}")
    sig = signal.Signals[f"SIG{a.signal}"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert p.stdout is not None
    lines: list[str] = []
    seen = threading.Event()

    def read() -> None:
        for line in p.stdout:  # type: ignore[union-attr]
            lines.append(line)
            if a.after in line:
                seen.set()
        seen.set()  # the command ended without the line: reported below

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    sent = False
    if seen.wait(a.timeout) and p.poll() is None:
        time.sleep(a.delay)
        if p.poll() is None:
            p.send_signal(sig)
            sent = True
    try:
        code = p.wait(a.timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        code = p.wait()
    reader.join(10)
    time.sleep(0.2)  # the command's orphans are ours now; those that were exiting finish
    _reap()
    left = _children()
    for _ in range(5):  # the leftovers' own children come to us as they die
        now = _children()
        if not now:
            break
        left.update(now)
        for pid in now:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.2)
        _reap()
    print(json.dumps({"code": code, "sent": sent, "output": "".join(lines), "left": sorted(left.values())}))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
