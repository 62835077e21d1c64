"""Storage quotas on a real cluster: storage nodes count each dataset's bytes and publish
them; coordinators refuse writes that add data to a dataset at or over its quota, and take
deletes; raising the quota lets writes in again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cluster import Cluster
from midtown import Client, Op, QuotaExceeded
from tests.integration.conftest import started, wait_for

pytestmark = pytest.mark.integration
VALUE = b"v" * 200


@pytest.fixture
def qc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Cluster]:
    monkeypatch.setenv("MIDTOWN_USAGE_INTERVAL_S", "0.3")
    with started(tmp_path / "c") as c:
        yield c


def mt(c: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cli", *args], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "MIDTOWN_ZK": c.zk_hosts}, check=False)


def _fill(db: Client, name: str, limit: int) -> tuple[int, QuotaExceeded]:
    """Put values until the quota refuses one: (how many were taken, the refusal)."""
    deadline = time.monotonic() + 60
    for i in range(limit):
        try:
            db.put(name, "p", f"k{i:05}", VALUE)
        except QuotaExceeded as e:
            return i, e
        if time.monotonic() > deadline:
            break
    raise AssertionError(f"{limit} values of {len(VALUE)} bytes went in past a quota")


def test_a_dataset_over_its_quota_refuses_writes_and_takes_deletes(qc: Cluster) -> None:
    assert mt(qc, "dataset", "create", "q", "--quota", "4KB").returncode == 0
    qc.create_dataset("free")
    qc.create_dataset("one", quota_bytes=4000)
    with Client(qc.coordinator_addrs) as db:
        for _ in range(100):  # one key written again and again holds one value, not a hundred
            db.put("one", "p", "k", VALUE)
        taken, refused = _fill(db, "q", 2000)
        # Refused at the 4 KB: what the nodes counted, plus what this (only) coordinator
        # let in since, each value taking a little more than its 200 bytes. A value let in
        # within APPLY_SLACK_MS of a count is added to it even if the count has it already
        # (coordinator/quotas.py): each value counts at most twice, never more, and the
        # quota is never passed.
        slack = 2  # counted by the nodes and as let in: the most a value counts
        assert 4000 // (slack * (len(VALUE) + 60)) <= taken <= 4000 // len(VALUE), taken
        assert "header.dataset" in refused.message and "quota" in refused.message
        assert "earlier attempt" not in refused.message  # a first attempt, not retried

        # Values let in within APPLY_SLACK_MS before a count may be in that count too: the
        # refusal can come below the quota, and then writes are taken again once those
        # values are older than a count by the slack. Put one more value each time one is
        # taken, until the nodes' counts see the dataset full: it is never passed by more
        # than the last value let in.
        def full() -> dict | None:
            nonlocal taken
            d = json.loads(mt(qc, "dataset", "describe", "q", "--json").stdout)
            if d["used_bytes"] >= 4000:
                return d
            try:
                db.put("q", "p", f"k{taken:05}", VALUE)
                taken += 1
            except QuotaExceeded:
                pass
            return None

        described = wait_for(full, 60, "the nodes' counts to see it full")
        assert described["quota_bytes"] == 4000
        assert described["used_bytes"] < 4000 + len(VALUE) + 60, described
        # Every write that adds data is refused; reads, deletes and other datasets are not.
        with pytest.raises(QuotaExceeded):
            db.incr("q", "p", "n")
        with pytest.raises(QuotaExceeded):
            db.cas("q", "p", "k00000", b"x", expected=VALUE)
        with pytest.raises(QuotaExceeded):
            db.batch("q", [Op.delete("p", "k00001"), Op.put("p", "new", b"x")])
        assert db.get("q", "p", "k00000") is not None
        db.put("free", "p", "k", VALUE)
        db.delete("q", "p", "k00000")
        assert db.cas("q", "p", "k00001", expected=VALUE, delete=True).succeeded
        for lo in range(2, taken, 1000):
            chunk = range(lo, min(lo + 1000, taken))
            assert db.batch("q", [Op.delete("p", f"k{i:05}") for i in chunk]).applied
        # Emptied, it takes writes again once the counts see it.
        wait_for(lambda: _puts(db, "q"), 30, "writes taken again under the quota")
        # Filled again, then the quota raised from the command line: taken again.
        _fill(db, "q", 2000)
        assert mt(qc, "dataset", "quota", "q", "1MiB").returncode == 0
        wait_for(lambda: _puts(db, "q"), 30, "writes taken under the raised quota")
        bad = mt(qc, "dataset", "quota", "q", "lots")
        assert bad.returncode == 2 and "SIZE" in bad.stderr
        bad = mt(qc, "dataset", "create", "q2", "--quota", "5 parsecs")
        assert bad.returncode == 2 and "--quota" in bad.stderr and "Traceback" not in bad.stderr
        bad = mt(qc, "dataset", "quota", "nope", "1GB")
        assert bad.returncode == 2 and "NAME" in bad.stderr


def _puts(db: Client, name: str) -> bool:
    try:
        db.put(name, "p", "again", VALUE)
        return True
    except QuotaExceeded:
        return False
