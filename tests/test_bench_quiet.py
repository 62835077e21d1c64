"""A benchmark warns when the machine is not quiet (bench/quiet.py)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench import quiet
from cluster import Cluster


@pytest.mark.parametrize("layout", ["split", "host"])
def test_every_process_a_cluster_starts_is_recognised(tmp_path: Path, layout: str) -> None:
    c = Cluster(tmp_path / layout, layout=layout)
    c.plan()
    for name, p in c.procs.items():
        if p.kind != "zookeeper":
            assert quiet.kind(c.command(name)) == "midtown", name
    assert quiet.kind([sys.executable, "-m", "cluster.supervisor", "--dir", "d"]) == "midtown"
    assert quiet.kind(["java", "-cp", "x", "org.apache.zookeeper.server.quorum.QuorumPeerMain",
                       "zoo.cfg"]) == "zookeeper"
    assert quiet.kind(["/usr/local/bin/etcd", "--name", "m0"]) == "etcd"
    for argv in ([sys.executable, "-m", "pytest"], ["bash"], [], [sys.executable, "-m"]):
        assert quiet.kind(argv) is None


def _stand_in(module: str) -> subprocess.Popen[bytes]:
    """A process with a server's command line (`-m module`): what a killed test run leaves
    behind. Returned once it runs that command line: until the child has exec'd, its
    /proc cmdline is still its parent's (a loaded machine showed that window)."""
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "-m", module])
    deadline = time.monotonic() + 30
    while module.encode() not in Path(f"/proc/{p.pid}/cmdline").read_bytes():
        assert time.monotonic() < deadline, "the stand-in did not start within 30 s"
        time.sleep(0.01)
    return p


def test_a_process_of_another_cluster_is_named_in_the_warning() -> None:
    p = _stand_in("storage_node.server")
    try:
        found = quiet.others()  # other clusters may run beside it (make test's workers)
        assert found.get(p.pid) == "midtown"
        msg = quiet.warning({p.pid: found[p.pid]}, 0.0)
        assert msg is not None and str(p.pid) in msg and "cluster down" in msg
    finally:
        p.kill()
        p.wait()
    assert p.pid not in quiet.others()


def test_busy_cpu_is_reported_from_proc_stat() -> None:
    before = quiet.cpu_times("cpu  100 0 100 700 100 0 0 0 0 0\ncpu0 1 2 3 4\n")
    after = quiet.cpu_times("cpu  400 0 200 1000 100 0 0 0 0 0\n")
    assert before == (200, 1000) and after == (600, 1700)
    assert quiet.busy_fraction(before, after) == pytest.approx(400 / 700)
    assert quiet.busy_fraction(after, after) == 0.0
    assert quiet.warning({}, 0.05) is None
    msg = quiet.warning({}, 0.57)
    assert msg is not None and "57% of the CPU" in msg
    many = quiet.warning({pid: "midtown" for pid in range(100, 130)}, 0.0)
    assert many is not None and "30 processes" in many and "..." in many


def test_the_check_says_its_warning() -> None:
    said: list[str] = []
    p = _stand_in("log.server")
    try:
        msg = quiet.check(said.append, window_s=0.05)
    finally:
        p.kill()
        p.wait()
    # It names up to 12 processes, and other clusters may run beside it (make test's workers).
    assert msg is not None and said == [msg] and "processes of other clusters run here" in msg
