"""The `midtown` command's parser: a positional argument never shares where it is kept
with an option (the backup directory and --dir once did, and `midtown backup bk` read
`bk` as the cluster's directory), durations carry their unit, and a mistaken command is
named as one."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cli.arguments import parse_duration_ms
from cli.connect import CliError
from cli.main import parser


def _parsers(p: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[
        tuple[tuple[str, ...], argparse.ArgumentParser]]:
    yield path, p
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            for name, child in a.choices.items():
                yield from _parsers(child, path + (name,))


def test_no_argument_of_a_command_is_kept_where_another_is() -> None:
    clashes = []
    for path, p in _parsers(parser()):
        seen: dict[str, str] = {}
        for a in p._actions:
            name = "/".join(a.option_strings) or a.metavar or a.dest
            if a.dest in seen and a.dest != argparse.SUPPRESS:
                clashes.append(f"midtown {' '.join(path)}: {seen[a.dest]} and {name} -> {a.dest}")
            seen[a.dest] = str(name)
    assert not clashes, clashes


@pytest.mark.parametrize("args", [
    ["backup", "bk", "--dir", "run/local"],
    ["--dir", "run/local", "backup", "bk"],
    ["restore", "bk", "--dir", "run/local"],
])
def test_a_backup_directory_and_the_cluster_directory_are_two_things(args: list[str]) -> None:
    from cli.main import hoist_common

    a = parser().parse_args(hoist_common(args))
    assert a.backup_dir == "bk" and a.dir == "run/local"


def test_an_unknown_command_is_called_a_command(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["bogus"], ["dataset", "bogus"]):
        with pytest.raises(SystemExit) as e:
            parser().parse_args(argv)
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert "argument COMMAND: invalid choice: 'bogus'" in err and "group" not in err and "cmd" not in err


@given(st.integers(1, 10**9))
def test_a_duration_without_its_unit_is_refused_naming_the_option(n: int) -> None:
    with pytest.raises(CliError, match=rf"^--ttl: '{n}' has no unit; say {n}ms, {n}s"):
        parse_duration_ms(str(n), "--ttl")


@given(st.integers(0, 10**6), st.sampled_from([("ms", 1), ("s", 1000), ("m", 60_000), ("h", 3_600_000),
                                                 ("d", 86_400_000)]))
def test_a_duration_with_its_unit_is_read(n: int, unit: tuple[str, int]) -> None:
    assert parse_duration_ms(f"{n}{unit[0]}", "--ttl") == n * unit[1]
    assert parse_duration_ms("0", "--ttl") == 0


@pytest.mark.parametrize("args, says", [
    ([], "--tls-dir: mutual TLS between machines is the default"),
    (["--plaintext", "--tls-dir", "/nonexistent"], "--tls-dir: mutual TLS between machines is the default"),
    (["--tls-dir", "/nonexistent", "--machine", "m1"],
     "--tls-dir: no ca.pem in /nonexistent (midtown cluster certs --dir /nonexistent --machine m1"),
    (["--plaintext", "--machine", "a b"], "--machine: 'a b' is not a machine name"),
    (["--plaintext", "--locality", "zone"], "--locality: 'zone' in 'zone' is not tier=value"),
    (["--plaintext", "--locality", "zone=a,dc=east"], "--locality: the data-center tier dc comes first"),
    (["--plaintext", "--zk", ""], "--zk: the cluster's ZooKeeper"),
])
def test_machine_up_refuses_what_it_cannot_run_naming_the_flag(args: list[str], says: str,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Before anything starts: no TLS and no --plaintext (what plaintext exposes is the
    operator's explicit choice), certificates missing, a malformed machine or locality."""
    monkeypatch.setenv("MIDTOWN_ZK", "127.0.0.1:1")
    if "--zk" in args:
        monkeypatch.delenv("MIDTOWN_ZK")
    a = parser().parse_args(["machine", "up", *args])
    with pytest.raises(CliError) as e:
        a.fn(a)
    assert says in str(e.value)


def test_a_lost_zookeeper_connection_ends_a_command_as_an_expected_fault() -> None:
    """A command whose ZooKeeper connection drops mid-way (ConnectionLoss, SessionExpired)
    says so in one line and exits 5 (unreachable), not "unexpected error" with exit 1."""
    import subprocess
    import sys

    code = (
        "import argparse, sys\n"
        "from kazoo.exceptions import ConnectionLoss\n"
        "import importlib\n"
        "m = importlib.import_module('cli.main')\n"
        "def lost(a):\n"
        "    raise ConnectionLoss()\n"
        "def fake():\n"
        "    p = argparse.ArgumentParser()\n"
        "    p.add_argument('--go', action='store_true')\n"
        "    p.set_defaults(fn=lost, verbose=False)\n"
        "    return p\n"
        "m.parser = fake\n"
        "sys.exit(m.main(['--go']))\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 5, (p.returncode, p.stderr)
    assert "ZooKeeper's connection was lost during the command (ConnectionLoss)" in p.stderr
    assert "unexpected error" not in p.stderr and "Traceback" not in p.stderr
