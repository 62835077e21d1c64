"""The client alone, installed as the README says: `pip install .` from a clone (nothing
generated in it: the build makes the protobuf code, setup.py), in a new virtual
environment. It brings grpcio, protobuf and kazoo and none of the servers', Spark's or the
tests' packages, and its `midtown` command and SDK talk to a running cluster. (The README
once said `make proto` first, which installed the whole server, Spark and dev environment.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.conftest import started

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def _clone(to: Path) -> None:
    """The checkout's tracked files, as a fresh clone has them (no midtown_pb, no venv)."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in files.decode().split("\0"):
        if name:
            dst = to / name
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_bytes((ROOT / name).read_bytes())


def test_pip_install_from_a_clone_gives_the_client_alone(tmp_path: Path) -> None:
    clone, venv = tmp_path / "midtown", tmp_path / "venv"
    _clone(clone)
    assert not (clone / "midtown_pb").exists()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    pip = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", str(clone)], capture_output=True,
                         text=True, timeout=600)
    assert pip.returncode == 0, pip.stderr[-3000:]
    listed = subprocess.run([str(venv / "bin" / "pip"), "list", "--format", "freeze"], capture_output=True,
                            text=True, check=True, timeout=120).stdout.lower()
    names = {line.split("==")[0] for line in listed.splitlines()}
    assert {"midtown", "grpcio", "protobuf", "kazoo"} <= names
    assert not names & {"rocksdict", "pyspark", "pyarrow", "pandas", "prometheus-client", "pytest",
                        "hypothesis", "grpcio-tools", "cryptography", "opentelemetry-sdk",
                        "opentelemetry-api"}, names
    with started(tmp_path / "c", layout="host") as c:
        c.create_dataset("users")
        env = {"PATH": str(venv / "bin"), "HOME": str(tmp_path)}
        put = subprocess.run(["midtown", "--zk", c.zk_hosts, "put", "users", "u42", "name", "Ada"],
                             capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
        assert put.returncode == 0, put.stderr
        code = (f"from midtown import Client\n"
                f"with Client(zk={c.zk_hosts!r}) as db:\n"
                f"    print(db.get('users', 'u42', 'name').value.decode())\n")
        got = subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True,
                             env=env, cwd=tmp_path, timeout=120)
        assert got.returncode == 0 and got.stdout.strip() == "Ada", got.stderr
