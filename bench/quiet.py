"""Whether this machine is quiet enough to benchmark on.

The benchmarks start their own cluster and compare it with etcd on the same cores, so
anything else running lowers Midtown's figures more than etcd's (Python spends CPU where etcd
waits on the disk). A cluster left behind is the usual culprit: with one left running by a
killed test run, a single client's CAS measured 2.65x etcd's p50, and 1.65x once it was
stopped (docs/performance.md).
Before a benchmark starts its cluster, `check` names the processes of other clusters, and
says how busy the CPU was for a second; it warns, and the run goes on."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

# `python -m MODULE` of the processes a Midtown cluster runs (cluster/runner.py).
CLUSTER_MODULES = frozenset({"log.server", "storage_node.server", "coordinator.server",
                             "coordinator.host", "cluster.supervisor"})
BUSY_WARN = 0.2  # of the machine's CPU, in the second before the run


def kind(argv: list[str]) -> str | None:
    """What a process is, by its command line: "midtown", "zookeeper", "etcd" or None."""
    if "-m" in argv[:-1] and argv[argv.index("-m") + 1] in CLUSTER_MODULES:
        return "midtown"
    if any(a.endswith("zookeeper.server.quorum.QuorumPeerMain") for a in argv):
        return "zookeeper"
    if argv and os.path.basename(argv[0]) == "etcd":
        return "etcd"
    return None


def others(proc: Path = Path("/proc")) -> dict[int, str]:
    """The processes of clusters on this machine (this one excluded), by pid: their kind."""
    found: dict[int, str] = {}
    for d in proc.iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            argv = (d / "cmdline").read_bytes().rstrip(b"\0").decode(errors="replace").split("\0")
        except OSError:
            continue  # gone meanwhile, or not ours to read
        k = kind(argv)
        if k is not None:
            found[int(d.name)] = k
    return found


def cpu_times(stat: str) -> tuple[int, int]:
    """(busy, total) clock ticks of all CPUs, from the text of /proc/stat."""
    fields = [int(x) for x in stat.splitlines()[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    total = sum(fields[:8])  # guest time is already counted in user time
    return total - idle, total


def busy_fraction(before: tuple[int, int], after: tuple[int, int]) -> float:
    total = after[1] - before[1]
    return (after[0] - before[0]) / total if total > 0 else 0.0


def warning(found: dict[int, str], busy: float) -> str | None:
    """The warning for what was found, None if the machine looks quiet."""
    parts = []
    if found:
        kinds = sorted(set(found.values()))
        pids = ", ".join(str(p) for p in sorted(found)[:12]) + (" ..." if len(found) > 12 else "")
        parts.append(f"{len(found)} processes of other clusters run here ({'/'.join(kinds)}; "
                     f"pids {pids}): `midtown cluster down --dir DIR` or kill them")
    if busy >= BUSY_WARN:
        parts.append(f"{busy:.0%} of the CPU was busy in the second before the run")
    if not parts:
        return None
    return ("warning: this machine is not quiet: " + "; ".join(parts)
            + ". Midtown's figures will be lower than the machine allows.")


def check(say: Callable[[str], None], window_s: float = 1.0) -> str | None:
    """Look, wait `window_s` measuring the CPU, and `say` the warning if there is one."""
    with open("/proc/stat") as f:
        before = cpu_times(f.read())
    time.sleep(window_s)
    with open("/proc/stat") as f:
        after = cpu_times(f.read())
    msg = warning(others(), busy_fraction(before, after))
    if msg:
        say(msg)
    return msg
