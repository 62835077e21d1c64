"""The `midtown` command end to end: cluster up/down/status and the log commands, as a
user runs them (separate processes), in tables and in JSON."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from midtown.cluster import pid_alive

pytestmark = pytest.mark.integration


def mt(*args: str, env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    p = subprocess.run([sys.executable, "-m", "midtown", *args], capture_output=True, text=True,
                       timeout=120, env={**os.environ, **(env or {})})
    if check and p.returncode != 0:
        raise AssertionError(f"midtown {' '.join(args)} failed ({p.returncode}): {p.stderr}")
    return p


def test_cluster_and_log_commands(tmp_path: Path) -> None:
    d = str(tmp_path / "c")
    up = json.loads(mt("cluster", "up", "--dir", d, "--detach", "--json").stdout)
    try:
        names = {p["name"]: p for p in up["processes"]}
        assert set(names) == {"zookeeper", "log-0", "log-1", "log-2", "storage-0", "storage-1",
                              "storage-2", "coordinator-0"}
        assert all(p["state"] == "running" and p["pid"] for p in names.values())
        zk = up["zk"]
        assert up["coordinators"] == [names["coordinator-0"]["addr"]]

        r = json.loads(mt("log", "append", "3", "hello", "world", "--dir", d, "--json").stdout)
        assert (r["first_position"], r["count"]) == (0, 2)
        # --zk and MIDTOWN_ZK find the same cluster
        mt("log", "append", "3", "again", "--zk", zk)
        rows = json.loads(mt("log", "read", "3", "--from", "0", "--json", env={"MIDTOWN_ZK": zk}).stdout)
        assert [(x["position"], x["payload"]) for x in rows] == [(0, "hello"), (1, "world"), (2, "again")]
        assert all(x["epoch"] >= 1 and x["timestamp_ms"] > 0 for x in rows)
        table = mt("log", "read", "3", "--dir", d).stdout
        assert table.splitlines()[0].split() == ["POSITION", "TIMESTAMP_MS", "EPOCH", "PAYLOAD"]

        st = json.loads(mt("log", "status", "--dir", d, "--json").stdout)
        assert len(st) == 16
        assert st[3]["last"] == 2 and st[3]["writer"] in (0, 1, 2)
        assert "REPLICAS" in mt("log", "status", "--dir", d).stdout

        t = json.loads(mt("log", "truncate", "3", "--before", "2", "--dir", d, "--json").stdout)
        assert t["first_position"] == 2
        bad = mt("log", "read", "3", "--from", "0", "--dir", d, check=False)
        assert bad.returncode == 1 and "first available position is 2" in bad.stderr

        # Bad input: a message naming the field, never a traceback.
        for args, needle in [
            (["log", "append", "99", "x", "--dir", d], "log_id"),
            (["log", "read", "3", "--from", "-1", "--dir", d], "--from"),
            (["log", "append", "3", "%%%", "--encoding", "base64", "--dir", d], "DATA"),
            (["log", "truncate", "3", "--before", "100", "--dir", d], "before_position"),
            (["log", "status", "--dir", str(tmp_path / "nothing")], "no cluster"),
        ]:
            p = mt(*args, check=False)
            assert p.returncode != 0 and needle in p.stderr, (args, p.stderr)
            assert "Traceback" not in p.stderr

        cs = json.loads(mt("cluster", "status", "--dir", d, "--json").stdout)
        assert all(p["state"] == "running" for p in cs)
    finally:
        mt("cluster", "down", "--dir", d)
    cs = json.loads(mt("cluster", "status", "--dir", d, "--json").stdout)
    assert all(p["state"] == "stopped" for p in cs)
    for p in up["processes"]:
        assert not pid_alive(p["pid"])


def test_cluster_up_in_the_foreground_stops_on_ctrl_c(tmp_path: Path) -> None:
    """What `make run` does: foreground, Ctrl-C stops everything cleanly; data survives
    a restart of the same directory."""
    d = str(tmp_path / "fg")
    proc = subprocess.Popen([sys.executable, "-m", "midtown", "cluster", "up", "--dir", d],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = []
    assert proc.stdout is not None
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        out.append(line)
        if "Ctrl-C stops everything" in line:
            break
    else:
        proc.kill()
        raise AssertionError("".join(out))
    mt("log", "append", "0", "kept", "--dir", d)
    pids = [p["pid"] for p in json.loads(mt("cluster", "status", "--dir", d, "--json").stdout)]
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0 and "stopped" in rest
    assert not any(pid_alive(p) for p in pids)
    # Up again on the same directory: the entry is still there.
    mt("cluster", "up", "--dir", d, "--detach")
    try:
        rows = json.loads(mt("log", "read", "0", "--dir", d, "--json").stdout)
        assert [r["payload"] for r in rows] == ["kept"]
    finally:
        mt("cluster", "down", "--dir", d)


def test_bench_refuses_bad_rounds() -> None:
    for bad, says in (("0", "at least 1"), ("x", "whole number")):
        p = mt("bench", "kv", "--rounds", bad, check=False)
        assert p.returncode == 2 and "--rounds" in p.stderr and says in p.stderr, p.stderr


def test_a_supervised_cluster_restarts_what_dies(tmp_path: Path) -> None:
    """`cluster up` restarts a process that dies (logged, counted in `cluster status`), and
    `cluster restart NAME` restarts one on request."""
    d = str(tmp_path / "sv")
    up = json.loads(mt("cluster", "up", "--dir", d, "--detach", "--json").stdout)
    supervisor = up["supervisor_pid"]
    try:
        assert supervisor and pid_alive(supervisor)
        pids = {p["name"]: p["pid"] for p in up["processes"]}

        def row(name: str) -> dict:
            return next(r for r in json.loads(mt("cluster", "status", "--dir", d, "--json").stdout)
                        if r["name"] == name)

        os.kill(pids["storage-1"], signal.SIGKILL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            r = row("storage-1")
            if r["state"] == "running" and r["pid"] != pids["storage-1"]:
                break
            time.sleep(0.2)
        else:
            raise AssertionError(f"storage-1 was not restarted: {row('storage-1')}")
        assert r["restarts"] == 1 and r["last_exit"] == -signal.SIGKILL
        log = (tmp_path / "sv" / "logs" / "supervisor.log").read_text()
        assert "storage-1" in log and "restarting in" in log

        again = json.loads(mt("cluster", "restart", "coordinator-0", "--dir", d, "--json").stdout)[0]
        assert again["state"] == "running" and again["pid"] != pids["coordinator-0"]
        assert again["restarts"] == 1
        assert "RESTARTS" in mt("cluster", "status", "--dir", d).stdout
        # The cluster serves through the restarted processes.
        mt("dataset", "create", "sv", "--dir", d)
        mt("put", "sv", "p", "l", "v", "--dir", d)
        assert json.loads(mt("get", "sv", "p", "l", "--dir", d, "--json").stdout)["value"] == "v"
        bad = mt("cluster", "restart", "nope", "--dir", d, check=False)
        assert bad.returncode == 2 and "NAME" in bad.stderr and "Traceback" not in bad.stderr
    finally:
        mt("cluster", "down", "--dir", d)
    assert not pid_alive(supervisor)
    assert not any(pid_alive(p["pid"]) for p in json.loads(mt("cluster", "status", "--dir", d,
                                                             "--json").stdout) if p["pid"])
