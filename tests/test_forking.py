"""Commands that start Spark beside their gRPC clients run with gRPC's fork handlers off
(runtime/forking.py): otherwise the fork that starts Spark's JVM can die of SIGABRT."""

from __future__ import annotations

import importlib
import os
import sys

import pytest

from cli import demo
from runtime import forking

cli = importlib.import_module("cli.main")  # the package exports main, the function
bench = importlib.import_module("bench.main")


class Restarted(Exception):
    pass


def test_restart_sets_the_variable_and_runs_the_same_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(forking.VARIABLE, raising=False)
    calls = []
    forking.restart_without_grpc_fork_handlers(
        "bench", ["ingest", "--seconds", "2"], execve=lambda *a: calls.append(a))
    [(exe, argv, env)] = calls
    assert exe == sys.executable
    assert argv == [sys.executable, "-m", "bench", "ingest", "--seconds", "2"]
    assert env[forking.VARIABLE] == "0"


def test_no_restart_when_set_and_the_users_choice_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(forking.VARIABLE, "1")
    calls = []
    forking.restart_without_grpc_fork_handlers("cli", [], execve=lambda *a: calls.append(a))
    forking.without_grpc_fork_handlers()
    assert calls == []
    assert os.environ[forking.VARIABLE] == "1"


def _recorder(monkeypatch: pytest.MonkeyPatch, module: object) -> list[tuple[str, list[str]]]:
    seen: list[tuple[str, list[str]]] = []

    def restart(mod: str, args: list[str]) -> None:
        seen.append((mod, list(args)))
        raise Restarted

    monkeypatch.setattr(module, "restart_without_grpc_fork_handlers", restart)
    return seen


def test_bench_ingest_and_the_demo_restart_before_anything_else(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _recorder(monkeypatch, cli)
    with pytest.raises(Restarted):
        bench.main(["ingest", "--seconds", "1", "--rounds", "1"])
    assert seen == [("bench", ["ingest", "--seconds", "1", "--rounds", "1"])]
    seen = _recorder(monkeypatch, demo)
    with pytest.raises(Restarted):
        demo.main(["--events", "10", "--dir", "/nonexistent"])
    assert seen == [("cli.demo", ["--events", "10", "--dir", "/nonexistent"])]


def test_other_commands_do_not_restart() -> None:
    for args in (["cluster", "up"], ["get", "ds", "p", "l"]):
        assert not getattr(cli.parser().parse_args(args), "starts_spark", False), args
    for args in (["kv"], ["log"]):
        assert not getattr(bench.parser().parse_args(args), "starts_spark", False), args
