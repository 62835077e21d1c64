"""The README's tour runs top to bottom, exactly as written, on a fresh `make run` cluster
(`midtown cluster up` in the foreground, as `make run` starts it), and prints what the
README shows under each command.

The tour is the README's text between `<!-- tour: begin` and `<!-- tour: end -->`: each
```console block's `$ ` lines are commands, run in order by bash from one directory (the
one holding run/local, as the project's root does), the lines under a command are what it
prints (standard output), `…` standing for what differs from run to run (a line of `…`
alone: any number of lines); `(exit N)` is its exit code (0 when not said); a line starting
with `# ` is a comment. `alias midtown=...` is the venv's command here too; a command
ending with `&` runs in the background until the tour ends.

MIDTOWN_TOUR_RECORD=1 prints what each command printed instead of comparing (to write the
README's lines from)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


@dataclass
class Step:
    command: str
    expected: list[str] = field(default_factory=list)
    exit_code: int = 0


def tour(readme: str) -> list[Step]:
    """The tour's commands and what each prints, in order."""
    m = re.search(r"<!-- tour: begin.*?-->(.*?)<!-- tour: end -->", readme, re.S)
    assert m is not None, "README.md has no tour between its markers"
    steps: list[Step] = []
    for block in re.findall(r"```console\n(.*?)```", m.group(1), re.S):
        for line in block.splitlines():
            if line.startswith("$ "):
                steps.append(Step(line[2:].strip()))
            elif line.startswith("# ") or not steps:
                continue
            elif re.fullmatch(r"\(exit \d+\)", line.strip()):
                steps[-1].exit_code = int(line.strip()[6:-1])
            else:
                steps[-1].expected.append(line)
    return steps


def _norm(line: str) -> str:
    return re.sub(r"\s+", " ", line).strip()


def matches(expected: list[str], actual: list[str]) -> bool:
    """Whether `actual` lines are `expected` ones, whitespace runs taken as one space, `…`
    matching any text within a line and a line of `…` alone any number of lines."""
    pattern = ""
    for e in expected:
        if _norm(e) == "…":
            pattern += r"(?:[^\n]*\n)*?"
        else:
            pattern += ".*".join(re.escape(part) for part in _norm(e).split("…")) + r"\n"
    return re.fullmatch(pattern, "".join(_norm(a) + "\n" for a in actual), re.S) is not None


def test_matches_reads_the_readmes_ellipses() -> None:
    assert matches(["VERSION", "…"], ["VERSION", "12"])
    assert matches(["name   Ada    …   -"], ["name Ada 7 -"])
    assert not matches(["name Ada … -"], ["name Bea 7 -"])
    assert matches(["A", "…", "Z"], ["A", "b", "c", "Z"]) and matches(["A", "…", "Z"], ["A", "Z"])
    assert not matches(["A"], ["A", "B"])


def test_the_readme_tour_runs_as_written(tmp_path: Path) -> None:
    steps = tour((ROOT / "README.md").read_text())
    assert len(steps) > 20, "the tour is shorter than it was"
    record = os.environ.get("MIDTOWN_TOUR_RECORD") == "1"
    env = {k: v for k, v in os.environ.items() if k != "MIDTOWN_ZK"}
    env["PATH"] = f"{BIN}{os.pathsep}{env['PATH']}"
    up = subprocess.Popen([str(BIN / "midtown"), "cluster", "up", "--dir", "run/local"], cwd=tmp_path,
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          start_new_session=True)
    background: list[subprocess.Popen[str]] = []
    failures: list[str] = []
    try:
        assert up.stdout is not None
        deadline = time.monotonic() + 180
        seen = []
        while time.monotonic() < deadline:
            line = up.stdout.readline()
            seen.append(line)
            if "Ctrl-C stops everything" in line or not line:
                break
        assert "Ctrl-C stops everything" in seen[-1], "".join(seen)
        for step in steps:
            if step.command.startswith("alias midtown="):
                continue  # the venv's midtown is first on PATH
            if step.command.endswith("&"):
                background.append(subprocess.Popen(["bash", "-c", step.command[:-1]], cwd=tmp_path, env=env,
                                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                                   start_new_session=True, text=True))
                continue
            p = subprocess.run(["bash", "-o", "pipefail", "-c", step.command], cwd=tmp_path, env=env,
                               capture_output=True, text=True, timeout=600)
            got = p.stdout.splitlines()
            if record:
                code = f"\n(exit {p.returncode})" if p.returncode else ""
                print(f"$ {step.command}\n" + "\n".join(got) + code)
                continue
            if p.returncode != step.exit_code or not matches(step.expected, got):
                failures.append(f"$ {step.command}\n  exit {p.returncode} (README: {step.exit_code})\n"
                                "  printed:\n    " + "\n    ".join(got) + "\n  README:\n    "
                                + "\n    ".join(step.expected) + f"\n  stderr: {p.stderr[-1500:]}")
                break  # the steps after it depend on it
    finally:
        for b in background:
            try:
                os.killpg(b.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            b.wait(30)
        up.send_signal(signal.SIGINT)
        try:
            up.wait(120)
        except subprocess.TimeoutExpired:
            os.killpg(up.pid, signal.SIGKILL)
            up.wait()
        for d in (tmp_path / "run").iterdir() if (tmp_path / "run").exists() else ():
            if d.name != "local" and (d / "cluster.json").exists():  # a cluster the tour left up
                subprocess.run([str(BIN / "midtown"), "cluster", "down", "--dir", str(d)], cwd=tmp_path,
                               env=env, capture_output=True, timeout=180)
    assert not failures, "\n".join(failures)
