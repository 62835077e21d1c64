"""A stop signal at any point of a benchmark's start-up stops whatever it had started
(runtime/children.py): ZooKeeper and the cluster's processes, etcd's members (once left
running when SIGHUP or SIGINT landed inside `Etcd(...)`, before the name was bound), the
echo floors. Each run is watched by a child subreaper (tests/integration/reaper.py), so a
process left behind is found even if it started in a session of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

BENCH = ["kv", "--seconds", "1", "--rounds", "1", "--ops", "put", "--clients", "1"]
# (the line after which, seconds after it, which signal): ZooKeeper starting, the cluster's
# processes starting, etcd's members starting (at once and 50-150 ms on, where the signal
# was seen to land in the constructor), the echo floors starting.
POINTS = [
    ("starting a local cluster", 0.0, "HUP"),
    ("starting a local cluster", 1.5, "TERM"),
    ("starting etcd", 0.0, "HUP"),
    ("starting etcd", 0.05, "INT"),
    ("starting etcd", 0.1, "INT"),
    ("starting etcd", 0.15, "INT"),
    ("starting the floors", 0.0, "TERM"),
]


def _run(where: Path, after: str, delay: float, sig: str) -> dict:
    where.mkdir(parents=True)
    env = {**os.environ, "TMPDIR": str(where)}
    p = subprocess.run([sys.executable, "-m", "tests.integration.reaper", "--after", after, "--delay",
                        str(delay), "--signal", sig, "--", sys.executable, "-m", "bench", *BENCH],
                       capture_output=True, text=True, env=env, timeout=300,
                       cwd=Path(__file__).resolve().parents[2])
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)  # type: ignore[no-any-return]


def test_a_stop_signal_at_any_point_of_start_up_leaves_nothing_running(tmp_path: Path) -> None:
    import signal

    with ThreadPoolExecutor(3) as pool:
        runs = {point: pool.submit(_run, tmp_path / f"run{i}", *point) for i, point in enumerate(POINTS)}
    for (after, delay, sig), f in runs.items():
        got = f.result()
        what = f"{sig} {delay}s after {after!r}"
        assert got["sent"], f"{what}: the benchmark ended before the signal:\n{got['output']}"
        assert got["code"] == 128 + signal.Signals[f"SIG{sig}"], f"{what}:\n{got['output']}"
        assert got["left"] == [], f"{what}: left running {got['left']}"
    for i in range(len(POINTS)):
        assert not list((tmp_path / f"run{i}").iterdir()), f"run {i}: temporary files left behind"
