"""The `midtown` command end to end: cluster up/down/status and the log commands, as a
user runs them (separate processes), in tables and in JSON."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from catalog.routing import shard_of
from cluster import pid_alive

pytestmark = pytest.mark.integration


def program(args: list[str] | tuple[str, ...]) -> list[str]:
    """`midtown ARGS`, or `midtown-bench REST` for ARGS `bench REST` (the benchmarks' own
    program), run as the installed scripts run them."""
    if args[:1] in (["bench"], ("bench",)):
        return [sys.executable, "-m", "bench", *args[1:]]
    return [sys.executable, "-m", "cli", *args]


def mt(*args: str, env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    """`midtown ARGS` as a user runs it (no arguments: the bare command)."""
    p = subprocess.run(program(args), capture_output=True, text=True,
                       timeout=120, env={**os.environ, **(env or {})})
    if check and p.returncode != 0:
        raise AssertionError(f"midtown {' '.join(args)} failed ({p.returncode}): {p.stderr}")
    return p


def test_cluster_and_log_commands_and_the_supervisor(tmp_path: Path) -> None:
    d = str(tmp_path / "c")
    up = json.loads(mt("cluster", "up", "--dir", d, "--layout", "split", "--detach", "--json").stdout)
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
        assert table.splitlines()[0].split() == ["POSITION", "TIME", "EPOCH", "OPERATION", "DATASET", "KEYS"]
        assert "(raw)" in table and "hello" in table

        st = json.loads(mt("log", "status", "--dir", d, "--json").stdout)
        assert len(st) == 16
        assert st[3]["last"] == 2 and st[3]["writer"] in (0, 1, 2)
        assert "REPLICAS" in mt("log", "status", "--dir", d).stdout

        t = json.loads(mt("log", "truncate", "3", "--before", "2", "--dir", d, "--json").stdout)
        assert t["first_position"] == 2
        # From before the first position held: from the first one, saying so.
        after = mt("log", "read", "3", "--from", "0", "--dir", d, "--json")
        assert [x["position"] for x in json.loads(after.stdout)] == [2]
        assert "truncated below position 2: reading from 2" in after.stderr

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
        _supervised(tmp_path, d, up)
    finally:
        mt("cluster", "down", "--dir", d)
    cs = json.loads(mt("cluster", "status", "--dir", d, "--json").stdout)
    assert all(p["state"] == "stopped" for p in cs)
    for p in up["processes"]:
        assert not pid_alive(p["pid"])
    assert not pid_alive(up["supervisor_pid"])
    assert not any(pid_alive(p["pid"]) for p in cs if p["pid"])


def _supervised(tmp_path: Path, d: str, up: dict) -> None:
    """`cluster up` restarts a process that dies (logged, counted in `cluster status`), and
    `cluster restart NAME` restarts one on request; the cluster serves through them."""
    supervisor = up["supervisor_pid"]
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
    log = (Path(d) / "logs" / "supervisor.log").read_text()
    assert "storage-1" in log and "restarting in" in log

    again = json.loads(mt("cluster", "restart", "coordinator-0", "--dir", d, "--json").stdout)[0]
    assert again["state"] == "running" and again["pid"] != pids["coordinator-0"]
    assert again["restarts"] == 1
    assert "RESTARTS" in mt("cluster", "status", "--dir", d).stdout
    mt("dataset", "create", "sv", "--dir", d)
    mt("put", "sv", "p", "l", "v", "--dir", d)
    assert json.loads(mt("get", "sv", "p", "l", "--dir", d, "--json").stdout)["value"] == "v"
    # `log add`: the key-value store takes two more of the service's 16 logs; every shard
    # stays on its log (none is handed over yet) and the store serves on
    added = json.loads(mt("log", "add", "2", "--dir", d, "--json").stdout)
    assert (added["kv_logs"], added["added"], added["log_service_logs"]) == (3, [1, 2], 16)
    listed = json.loads(mt("shard", "list", "--dir", d, "--json").stdout)
    assert {r["log"] for r in listed["shards"]} == {0} and listed["log_map_version"] == 0
    mt("put", "sv", "p", "l", "w", "--dir", d)
    assert json.loads(mt("get", "sv", "p", "l", "--dir", d, "--json").stdout)["value"] == "w"
    # `shard hand-off`: the key's shard is handed over to log 1 online (docs/log.md); the
    # key keeps its value, and its versions go on above the old log's
    ds = next(r for r in json.loads(mt("dataset", "list", "--dir", d, "--json").stdout) if r["name"] == "sv")
    shard = shard_of(ds["id"], b"p", len(listed["shards"]))
    before = json.loads(mt("get", "sv", "p", "l", "--dir", d, "--json").stdout)
    handed = json.loads(mt("shard", "hand-off", str(shard), "--to", "1", "--dir", d, "--json").stdout)
    assert (handed["from"], handed["to"], handed["handed"], handed["generation"]) == (0, 1, True, 1)
    assert json.loads(mt("get", "sv", "p", "l", "--dir", d, "--json").stdout)["value"] == "w"
    mt("put", "sv", "p", "l", "x", "--dir", d)
    after = json.loads(mt("get", "sv", "p", "l", "--dir", d, "--json").stdout)
    assert after["value"] == "x" and after["version"] > before["version"]
    rows = json.loads(mt("shard", "list", "--dir", d, "--json").stdout)["shards"]
    assert [r["log"] for r in rows if r["shard"] == shard] == [1] and {r["log"] for r in rows} == {0, 1}
    again = json.loads(mt("shard", "hand-off", str(shard), "--to", "1", "--dir", d, "--json").stdout)
    assert not again["handed"]
    p = mt("shard", "hand-off", str(shard), "--to", "7", "--dir", d, check=False)
    assert p.returncode != 0 and "--to: log 7 is not one of" in p.stderr and "Traceback" not in p.stderr
    p = mt("shard", "hand-off", str(len(rows)), "--to", "1", "--dir", d, check=False)
    assert p.returncode != 0 and f"SHARD: {len(rows)}, this cluster has shards 0..{len(rows) - 1}" in p.stderr
    # `cluster rebalance` spreads the shards over the three logs (a dry run plans it and
    # hands nothing over); the key keeps its value through it
    dry = json.loads(mt("cluster", "rebalance", "--dry-run", "--dir", d, "--json").stdout)
    q, r = divmod(len(rows), 3)
    assert sorted(dry["shards_per_log"].values()) == [q] * (3 - r) + [q + 1] * r and dry["handoffs"]
    assert json.loads(mt("shard", "list", "--dir", d, "--json").stdout)["shards"] == rows
    done = json.loads(mt("cluster", "rebalance", "--dir", d, "--json").stdout)
    planned = [(h["shard"], h["to_log"]) for h in dry["handoffs"]]
    assert [(h["shard"], h["to_log"]) for h in done["handoffs"]] == planned
    assert all(h["took_s"] > 0 for h in done["handoffs"]) and done["shards_per_log"] == dry["shards_per_log"]
    spread = json.loads(mt("shard", "list", "--dir", d, "--json").stdout)["shards"]
    assert {str(lg): sum(1 for x in spread if x["log"] == lg) for lg in range(3)} == done["shards_per_log"]
    assert json.loads(mt("get", "sv", "p", "l", "--dir", d, "--json").stdout)["value"] == "x"
    assert json.loads(mt("cluster", "rebalance", "--dir", d, "--json").stdout)["handoffs"] == []
    p = mt("cluster", "rebalance", "--max-handoffs", "-1", "--dir", d, check=False)
    assert p.returncode != 0 and "--max-handoffs: -1, must be 0 or more" in p.stderr
    for n, needle in (("14", "at most 13 more"), ("0", "N: 0, must be 1 or more"), ("x", "N must be")):
        p = mt("log", "add", n, "--dir", d, check=False)
        assert p.returncode != 0 and needle in p.stderr and "Traceback" not in p.stderr, p.stderr
    bad = mt("cluster", "restart", "nope", "--dir", d, check=False)
    assert bad.returncode == 2 and "NAME" in bad.stderr and "Traceback" not in bad.stderr


def test_cluster_up_in_the_foreground_stops_on_ctrl_c(tmp_path: Path) -> None:
    """What `make run` does: foreground, Ctrl-C stops everything cleanly; data survives
    a restart of the same directory."""
    d = str(tmp_path / "fg")
    proc = subprocess.Popen([sys.executable, "-m", "cli", "cluster", "up", "--dir", d, "--logs", "4"],
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
        # Log 0 carries the key-value shards: its writer's time marks (empty) are there too.
        assert [r["payload"] for r in rows if r["payload"]] == ["kept"]
    finally:
        mt("cluster", "down", "--dir", d)


def test_bench_refuses_bad_rounds() -> None:
    for bad, says in (("0", "at least 1"), ("x", "whole number")):
        p = mt("bench", "kv", "--rounds", bad, check=False)
        assert p.returncode == 2 and "--rounds" in p.stderr and says in p.stderr, p.stderr
        for bench in ("kv", "ingest"):
            p = mt("bench", bench, "--kv-logs", bad, check=False)
            assert p.returncode == 2 and "--kv-logs" in p.stderr and says in p.stderr, p.stderr
    for args in (("kv", "--layout", "rack"), ("ingest", "--layout", "rack"),
                 ("failover", "--layout", "rack")):
        p = mt("bench", *args, check=False)
        assert p.returncode == 2 and "--layout" in p.stderr and "Traceback" not in p.stderr, p.stderr
    for args, field in ((("failover", "--rounds", "0"), "--rounds"), (("failover", "--pause-seconds", "-1"),
                        "--pause-seconds"), (("failover", "--deadline", "x"), "--deadline"),
                        (("kv", "--etcd-api", "http"), "--etcd-api"),
                        (("spark-read", "--rounds", "0"), "--rounds")):
        p = mt("bench", *args, check=False)
        assert p.returncode == 2 and field in p.stderr and "Traceback" not in p.stderr, p.stderr


def _cluster_commands(load: Path) -> list[list[str]]:
    """Every `midtown` command that talks to a cluster (it takes --zk), read from the parser,
    with stand-in arguments: its positionals, and the options it requires."""
    import argparse

    from cli.main import parser

    required = {("log", "truncate"): ["--before", "1"], ("cas",): ["--expect-absent"],
                ("placement", "balance"): ["--load", str(load)], ("shard", "move"): ["--to", "1"],
                ("shard", "hand-off"): ["--to", "1"], ("log", "home"): ["--clear"],
                ("log", "prefer"): ["--clear"], ("scope", "add"): ["--shards", "1", "--logs", "1"],
                ("scope", "grow"): ["--logs", "1"],
                ("dataset", "fail-over"): ["--to", "west"],
                ("machine", "up"): ["--plaintext", "--dir", str(load.parent / "machine")]}
    out = []

    def walk(p: argparse.ArgumentParser, words: tuple[str, ...]) -> None:
        for act in p._actions:
            if isinstance(act, argparse._SubParsersAction):
                for name, sp in act.choices.items():
                    walk(sp, words + (name,))
                return
        if any("--zk" in act.option_strings for act in p._actions):
            positionals = [act for act in p._actions if not act.option_strings and act.nargs != "?"]
            out.append([*words, *["1"] * len(positionals), *required.get(words, [])])
    walk(parser(), ())
    return out


def test_no_command_ends_in_a_traceback_and_zookeeper_errors_come_within_the_timeout(tmp_path: Path) -> None:
    """Every command that talks to a cluster, with nothing at its ZooKeeper address: exit
    code 5 (docs/api.md), one line naming the address, within its --timeout; the common
    options are taken before the command too."""
    assert "usage: midtown" in mt().stdout  # no arguments: the help
    assert mt("--version").stdout.startswith("midtown ")
    (tmp_path / "load.json").write_text("{}")
    commands = _cluster_commands(tmp_path / "load.json")
    assert len(commands) >= 25 and ["log", "status"] in commands and ["get", "1", "1"] in commands

    def timed(args: list[str]) -> tuple[subprocess.CompletedProcess[str], float]:
        t0 = time.monotonic()
        front = args[0] in ("get", "dataset")  # `midtown --zk ... get ...`, as etcdctl takes it
        opts = ["--zk", "127.0.0.1:1", "--timeout", "0.5"]
        p = mt(*(opts + args if front else args + opts), check=False)
        return p, time.monotonic() - t0

    # Four at a time: each waits out its 0.5 s timeout, so the test need not wait them in turn.
    with ThreadPoolExecutor(4) as pool:
        for args, (p, took) in zip(commands, pool.map(timed, commands)):
            assert p.returncode == 5 and "Traceback" not in p.stderr, (args, p.returncode, p.stderr)
            assert "127.0.0.1:1" in p.stderr and len(p.stderr.strip().splitlines()) == 1, (args, p.stderr)
            assert took < 10, (args, took)
    bad = mt("--zk", "127.0.0.1:1", "get", check=False)  # a bad command line is 2, whatever else
    assert bad.returncode == 2 and "dataset" in bad.stderr, bad.stderr


def test_values_from_files_and_stdin_deletes_counted_and_the_log_readable(tmp_path: Path) -> None:
    d = str(tmp_path / "v")
    mt("cluster", "up", "--dir", d, "--detach", "--logs", "4")
    try:
        mt("dataset", "create", "files", "--dir", d)
        big = os.urandom(300 * 1024)  # beyond what one command-line argument can hold
        (tmp_path / "big.bin").write_bytes(big)
        put_at = json.loads(mt("put", "files", "p", "big", f"@{tmp_path / 'big.bin'}", "--dir", d,
                               "--json").stdout)["version"] - 1  # its position in log 0
        p = subprocess.run([sys.executable, "-m", "cli", "put", "files", "p", "in", "-", "--dir", d],
                           input=b"from stdin", capture_output=True, timeout=60)
        assert p.returncode == 0, p.stderr
        from cluster import Cluster
        from midtown import Client

        c = Cluster.load(Path(d))
        with Client(c.coordinator_addrs) as db:
            assert db.get("files", "p", "big").value == big  # type: ignore[union-attr]
            assert db.get("files", "p", "in").value == b"from stdin"  # type: ignore[union-attr]
            assert db.delete("files", "p", "in") == 1
            assert db.delete("files", "p", "in") == 0
        gone = mt("delete", "files", "p", "nothing", "--dir", d)
        assert "nothing deleted" in gone.stdout
        assert json.loads(mt("delete", "files", "p", "big", "--dir", d, "--json").stdout) == {"deleted": 1}
        missing = mt("put", "files", "p", "x", "@/nonexistent", "--dir", d, check=False)
        assert missing.returncode == 2 and "VALUE" in missing.stderr
        log = mt("log", "read", "0", "--dir", d).stdout.splitlines()
        assert log[0].split()[:3] == ["POSITION", "TIME", "EPOCH"] and len(log) > 1, log
        first = int(log[1].split()[0])
        if first <= put_at:  # not truncated yet (every node applied it: it may be, at any time)
            assert any(r.split()[0] == str(put_at) and "put" in r and "files" in r and "p/big" in r
                       for r in log[1:]), log
        # A scan's table abbreviates a long value (a 2 KB binary one); --json has it whole.
        (tmp_path / "blob.bin").write_bytes(os.urandom(2048))
        mt("put", "files", "s", "blob", f"@{tmp_path / 'blob.bin'}", "--dir", d)
        mt("--dir", d, "put", "files", "s", "note", "short")  # common options before the command
        rows = mt("scan", "files", "s", "--dir", d).stdout.splitlines()
        assert len(rows) == 3 and all(len(r) < 160 for r in rows), rows
        assert "chars)" in rows[1] and rows[2].split()[:2] == ["note", "short"], rows
        whole = json.loads(mt("--json", "scan", "files", "s", "--dir", d).stdout)["items"][0]["value"]
        assert base64.b64decode(whole.removeprefix("base64:")) == (tmp_path / "blob.bin").read_bytes()
        # One exit code per outcome (docs/api.md): refused by the store 1, nothing found 3,
        # a check-and-set that failed 4.
        assert mt("get", "nosuch", "p", "k", "--dir", d, check=False).returncode == 1
        assert mt("get", "files", "p", "absent", "--dir", d, check=False).returncode == 3
        assert mt("cas", "files", "s", "note", "x", "--expect", "other", "--dir", d,
                  check=False).returncode == 4
    finally:
        mt("cluster", "down", "--dir", d)


def _processes_under(path: Path) -> list[int]:
    """Pids of the live processes whose command line names `path` (a cluster's data and
    config live there, and ZooKeeper's, log servers' and storage nodes' commands name them)."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes()
            except OSError:
                continue
            if str(path).encode() in cmd and pid_alive(int(d.name)):
                out.append(int(d.name))
    return out


def _stopped_by(sig: int, args: list[str], ready: str, where: Path, code: int | None = None) -> None:
    """Start `midtown ARGS` with its temporary files under `where`, wait until it prints
    `ready` (its processes are up), send `sig`: it exits with `code` (by default 128 + sig,
    as the shell reports a command a signal ended), with no process left running under
    `where` and no temporary file left behind."""
    where.mkdir(parents=True, exist_ok=True)
    # PYTHONFAULTHANDLER: a native crash prints every thread's Python stack (a SIGSEGV on
    # SIGHUP, once, under a loaded suite: where it landed is what a fix needs)
    env = {**os.environ, "TMPDIR": str(where / "tmp"), "PYTHONFAULTHANDLER": "1"}
    (where / "tmp").mkdir()
    proc = subprocess.Popen(program(args), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True)
    assert proc.stdout is not None
    out = []
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            out.append(line)
            if ready in line or not line:
                break
        assert ready in out[-1], "".join(out)
        assert _processes_under(where), f"{args}: no process under {where} to stop"
        proc.send_signal(sig)
        rest, _ = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == (128 + sig if code is None else code), "".join(out) + rest
    left = _processes_under(where)
    assert not left, f"{args}: {signal.Signals(sig).name} left processes {left} running"
    assert not list((where / "tmp").iterdir()), f"{args}: temporary files left behind"


def test_commands_stop_what_they_started_on_each_signal(tmp_path: Path) -> None:
    """`bench log` on SIGINT, SIGTERM and SIGHUP, and a foreground `cluster up` on SIGTERM
    and SIGHUP (SIGINT: test_cluster_up_in_the_foreground_stops_on_ctrl_c, which also
    restarts it), all at once: each stops what it started. Stopping is how a foreground
    cluster ends: exit code 0, its data kept in --dir."""
    bench = ["bench", "log", "--seconds", "30", "--no-failover"]
    runs = [(sig, tmp_path / f"bench-{sig.name}", bench, "workload:", None)
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)]
    for sig in (signal.SIGTERM, signal.SIGHUP):
        where = tmp_path / f"up-{sig.name}"
        runs.append((sig, where, ["cluster", "up", "--dir", str(where / "c"), "--logs", "4"],
                     "Ctrl-C stops everything", 0))
    with ThreadPoolExecutor(len(runs)) as pool:
        done = [pool.submit(_stopped_by, sig, args, ready, where, code)
                for sig, where, args, ready, code in runs]
        for f in done:
            f.result()
