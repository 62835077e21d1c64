"""A supervisor for a local cluster, as systemd or Docker's `restart: on-failure` would be
in production: it starts the cluster's processes, restarts one that dies (with backoff,
logged, counted in `cluster status`), restarts one on request (`midtown cluster restart
NAME`), and stops them all on SIGTERM or SIGINT.

`midtown cluster up` runs it in the foreground; `cluster up --detach` runs it in a process
of its own (`python -m cluster.supervisor --dir DIR`), which `cluster down` stops.

What is not restarted: a storage node that exits with EXIT_BEHIND_TRUNCATION (the logs were
truncated past it: it was removed from the membership, and `node add` then a restart, or
`cluster restart NAME`, is the operator's call), a server that exits with EXIT_CONFIG (it
cannot start as configured: started on another machine than its data's, or under an id
another live process holds), and a process stopped by `cluster down`."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from runtime.process import EXIT_BEHIND_TRUNCATION, EXIT_CONFIG  # noqa: E402 (servers exit so)

RESTART_FIRST_S = 1.0
RESTART_MAX_S = 30.0
# A process that ran this long before it died starts again from the first backoff.
HEALTHY_S = 60.0
POLL_S = 0.25
REQUESTS = "requests"  # DIR/requests/restart-NAME: `cluster restart NAME`


@dataclass
class RestartPolicy:
    """When to start a process again after it exited: a pure function of its history."""

    first_s: float = RESTART_FIRST_S
    max_s: float = RESTART_MAX_S
    healthy_s: float = HEALTHY_S
    _next_s: dict[str, float] = field(default_factory=dict)
    _started: dict[str, float] = field(default_factory=dict)

    def started(self, name: str, now: float) -> None:
        self._started[name] = now

    def exited(self, name: str, code: int | None, now: float) -> float | None:
        """The time to start `name` again, or None to leave it stopped."""
        if code in (EXIT_BEHIND_TRUNCATION, EXIT_CONFIG):
            return None
        ran = now - self._started.get(name, now)
        wait = self.first_s if ran >= self.healthy_s else self._next_s.get(name, self.first_s)
        self._next_s[name] = min(wait * 2, self.max_s)
        return now + wait


def supervise(c: object, stop: threading.Event, say: Callable[[str], None]) -> None:
    """Keep the processes of the started cluster `c` (cluster.Cluster) running until
    `stop` is set. Every change is saved in DIR/cluster.json for `cluster status`."""
    from cluster import Cluster

    assert isinstance(c, Cluster)
    policy = RestartPolicy()
    now = time.monotonic()
    for name in c.procs:
        policy.started(name, now)
    due: dict[str, float] = {}
    requests = c.dir / REQUESTS
    requests.mkdir(exist_ok=True)
    while not stop.wait(POLL_S):
        now = time.monotonic()
        for req in sorted(requests.glob("restart-*")):
            name = req.name[len("restart-"):]
            req.unlink(missing_ok=True)
            if name in c.procs:
                say(f"{name}: restart requested")
                c.terminate(name)
                due[name] = now
                c.procs[name].restarts += 1
                c.save()
        for name, p in c.procs.items():
            if name in due or c.running(name):
                continue
            code = c.exit_code(name)
            when = policy.exited(name, code, now)
            p.last_exit = code
            if when is None:
                why = ("behind a log truncation" if code == EXIT_BEHIND_TRUNCATION else
                       "it cannot start as configured: its log says why")
                say(f"{name} (pid {p.pid}) exited with code {code}: not restarted ({why}; see "
                    f"docs/operations.md and {c.dir / 'logs' / (name + '.log')})")
                p.state = "exited"
                p.pid = 0
                c.save()
                continue
            say(f"{name} (pid {p.pid}) exited with code {code}; restarting in {when - now:.1f}s "
                f"(see {c.dir / 'logs' / (name + '.log')})")
            due[name] = when
            p.restarts += 1
            p.state = "restarting"
            c.save()
        for name, when in list(due.items()):
            if when <= now and not c.running(name):
                del due[name]
                c.start_process(name)
                c.procs[name].state = "running"
                policy.started(name, now)
                c.save()
                say(f"{name} started again (pid {c.procs[name].pid})")


def request_restart(dir: Path, name: str) -> None:
    """Ask the running supervisor of the cluster in `dir` to restart `name`."""
    d = dir / REQUESTS
    d.mkdir(exist_ok=True)
    (d / f"restart-{name}").touch()


def main(argv: list[str] | None = None) -> int:
    """Start (or resume) the cluster in --dir and supervise it until SIGTERM."""
    from cluster import Cluster, ClusterError

    ap = argparse.ArgumentParser(prog="python -m cluster.supervisor")
    ap.add_argument("--dir", required=True)
    a = ap.parse_args(argv)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: stop.set())

    def say(msg: str) -> None:
        print(f"{time.strftime('%H:%M:%S')} {msg}", flush=True)

    try:
        c = Cluster.load(Path(a.dir))
        c.supervisor_pid, c.supervisor_started = 0, 0
        c.start()
    except ClusterError as e:
        say(f"cannot start: {e}")
        try:
            c.stop()
        except Exception:
            pass
        return 1
    import os

    from runtime import children

    c.supervisor_pid, c.supervisor_started = os.getpid(), children.start_ticks(os.getpid()) or 0
    c.save()
    say("cluster ready; supervising")
    supervise(c, stop, say)
    say("stopping")
    c.supervisor_pid, c.supervisor_started = 0, 0
    c.stop()
    say("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
