"""`midtown backup DIR` and `midtown restore DIR` (cli/backup.py): every shard's
values at one position of its log, written out, and read back into a new cluster with a
different shard count; refusals name what is wrong."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from midtown import Client
from tests.integration.conftest import started

pytestmark = pytest.mark.integration


def _mt(zk: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cli", *args, "--zk", zk, "--json"],
                          capture_output=True, text=True, timeout=300)


def _as_readme(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """A command as the README writes it: no --zk, the cluster found as ./run/local or by
    --dir, run from `cwd` (MIDTOWN_ZK unset)."""
    env = {k: v for k, v in os.environ.items() if k != "MIDTOWN_ZK"}
    return subprocess.run([sys.executable, "-m", "cli", *args, "--json"], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def test_a_backup_restored_into_a_new_cluster_reads_back_equal(tmp_path: Path) -> None:
    keys = [(f"p{i % 7}", f"l{i}") for i in range(120)]
    # Cluster a is where `make run` puts one (./run/local), so `midtown backup DIR` finds it.
    with started(tmp_path / "run" / "local", shards=8, kv_logs=1, logs=4) as a:
        a.create_dataset("s", ttl_ms=0)
        a.create_dataset("ev", consistency="eventual")
        with Client(a.coordinator_addrs, timeout=20) as db:
            for p, lk in keys:
                db.put("s", p, lk, f"{p}/{lk}".encode())
            db.put("s", "ttl", "short", b"gone", ttl_ms=1)
            time.sleep(0.05)
            db.put("s", "ttl", "long", b"kept", ttl_ms=3_600_000)  # log time is 50 ms on: "short" expired
            db.delete("s", "p0", "l0")
            for i in range(20):
                db.put("ev", f"e{i}", "l", b"%d" % i)
            db.delete("ev", "e0", "l")  # a tombstone: not restored
        out = tmp_path / "backup"
        p = _as_readme(tmp_path, "backup", "backup")
        assert p.returncode == 0, p.stderr
        got = json.loads(p.stdout)
        assert got["shards"] == 8 and got["datasets"] == ["ev", "s"]
        manifest = json.loads((out / "manifest.json").read_text())
        assert [c["shard"] for c in manifest["shard_copies"]] == list(range(8))
        assert all(c["position"] > 0 for c in manifest["shard_copies"])
        # Refused: a directory in use, and a second restore into the same cluster.
        again = _as_readme(tmp_path, "backup", "backup", "--dir", "run/local")
        assert again.returncode == 2 and "DIR: " in again.stderr and "not an empty directory" in again.stderr
        same = _as_readme(tmp_path, "restore", "backup")
        assert same.returncode == 2 and "dataset 'ev' exists in this cluster already" in same.stderr
    with started(tmp_path / "b", shards=16, kv_logs=1, logs=4) as b:
        p = _as_readme(tmp_path, "restore", "backup", "--dir", "b")
        assert p.returncode == 0, p.stderr
        restored = json.loads(p.stdout)
        # "short" expired: left out (or reclaimed by the nodes before the backup took it).
        assert restored["values"] == len(keys) - 1 + 1 + 19
        with Client(b.coordinator_addrs, timeout=20) as db:
            for p_, lk in keys:
                v = db.get("s", p_, lk)
                if (p_, lk) == ("p0", "l0"):
                    assert v is None
                else:
                    assert v is not None and v.value == f"{p_}/{lk}".encode(), (p_, lk)
            assert db.get("s", "ttl", "short") is None
            kept = db.get("s", "ttl", "long")
            assert kept is not None and kept.value == b"kept" and kept.expires_at_ms
            for i in range(1, 20):
                v = db.get("ev", f"e{i}", "l")
                assert v is not None and v.value == b"%d" % i
            assert db.get("ev", "e0", "l") is None
        broken = tmp_path / "broken"
        broken.mkdir()
        (broken / "shard-00000.pb").write_bytes(b"\x00\x00")
        p = _mt(b.zk_hosts, "restore", str(broken))
        assert p.returncode == 2 and "holds no whole backup" in p.stderr and "Traceback" not in p.stderr
