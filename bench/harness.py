"""What every benchmark does the same way: say its progress, check the machine is quiet,
start a fresh local cluster in a temporary directory (and stop it, and remove the
directory, however the run ends), run `midtown` commands on it, sample the CPU its
processes use, and take percentiles. The workloads are timed by bench/loadgen.py, etcd is
run by bench/etcd.py, the echo floor by bench/echo.py, and tables are printed by
cli/output.py `emit`."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bench import quiet
from bench.etcd import Etcd
from bench.loadgen import percentile
from cluster import Cluster
from midtown.client import Client
from runtime import children

Say = Callable[[str], None]


def log(message: str) -> None:
    """Progress, on standard error (the figures go to standard output)."""
    print(message, file=sys.stderr, flush=True)


def progress_for(json_out: bool) -> Say:
    """Progress as `log` says it, or nothing when the figures are printed as JSON."""
    return (lambda _m: None) if json_out else log


@contextlib.contextmanager
def fresh_cluster(prefix: str, what: str, progress: Say = log, check_quiet: bool = True,
                  **settings: Any) -> Iterator[Cluster]:
    """A local cluster started with `settings` (cluster/runner.py Cluster's), in a new
    temporary directory named from `prefix`; stopped and the directory removed on the way
    out, whatever ends the run. `what` says what is starting; the machine is checked to be
    quiet first (bench/quiet.py) unless `check_quiet` is off (a second cluster of the same
    run). The cluster's directory is `c.dir`; its parent holds the run's other files."""
    with tempfile.TemporaryDirectory(prefix=f"midtown-bench-{prefix}-") as tmp:
        c = Cluster(Path(tmp) / "midtown", **settings)
        try:
            if check_quiet:
                quiet.check(progress)
            progress(f"starting a local cluster: {what}...")
            c.start()
            yield c
        except BaseException:
            _stop_before_removing()
            raise
        finally:
            c.stop()


@contextlib.contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    """`values` in this process's environment while the block runs (the processes it starts
    inherit them), the old ones back after."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def fresh_etcd(prefix: str, progress: Say = log) -> Iterator[Etcd]:
    """A three-member etcd on loopback (bench/etcd.py) in a new temporary directory,
    stopped and removed on the way out."""
    with tempfile.TemporaryDirectory(prefix=f"midtown-bench-{prefix}-etcd-") as tmp:
        try:
            progress("starting etcd (3 members on loopback)...")
            etcd = Etcd(Path(tmp) / "etcd")
            try:
                yield etcd
            finally:
                etcd.stop()
        except BaseException:
            _stop_before_removing()
            raise


def _stop_before_removing() -> None:
    """Whatever ends a run early, every process it started is stopped before the temporary
    directory holding their files goes: a stop signal that lands inside a start leaves a
    process recorded (runtime/children.py) but not yet its owner's, and an etcd member
    still starting made its data directory again after the directory was removed."""
    children.stop_all()


def midtown_json(zk_hosts: str, *args: str, timeout_s: float = 3600) -> Any:
    """`midtown ARGS --zk ZK --json` run as a user runs it (a process of its own): what it
    printed, read as JSON; RuntimeError with its message when it failed."""
    p = subprocess.run([sys.executable, "-m", "cli", *args, "--zk", zk_hosts, "--json"], capture_output=True,
                       text=True, timeout=timeout_s)
    if p.returncode:
        raise RuntimeError(f"midtown {' '.join(args)}: {p.stderr.strip()}")
    return json.loads(p.stdout)


def percentile_ms(xs: list[float], q: float) -> float:
    """The `q` quantile of `xs`, seconds, in milliseconds."""
    return percentile(xs, q) * 1000


def cpu_seconds(pid: int) -> float:
    """The CPU time a process has used so far, user and system, in seconds (0: it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def steady_puts(db: Client, clients: int, until: threading.Event,
                dataset: str = "steady") -> list[tuple[float, float]]:
    """(start time, latency) of each put of `clients` threads into `dataset` (small
    values over 500 keys each, so over every shard), one after another until `until` is
    set."""
    out: list[tuple[float, float]] = []
    lock = threading.Lock()

    def one(i: int) -> None:
        n = 0
        while not until.is_set():
            t0 = time.monotonic()
            db.put(dataset, f"c{i}-{n % 500}", "l", b"x" * 100)
            with lock:
                out.append((t0, time.monotonic() - t0))
            n += 1
    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out
