"""Placements allocated on a real cluster: concurrent callers on separate clients get the
same placement for the same (tenant, time); settings apply from the next placement on."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from cluster import Cluster
from midtown import Client
from midtown.placements import Placement, Placements, Settings
from tests.integration.conftest import started

pytestmark = pytest.mark.integration
HOUR = 3_600_000


@pytest.fixture(scope="module")
def pc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with started(tmp_path_factory.mktemp("placements") / "c") as c:
        c.create_dataset("placements")
        yield c


def test_concurrent_callers_get_one_placement(pc: Cluster) -> None:
    got: list[Placement] = []
    lock = threading.Lock()

    def caller() -> None:
        with Client(pc.coordinator_addrs, timeout=30) as db:  # each its own client and cache
            p = Placements(db).get_placement("acme", 10 * HOUR + 123)
        with lock:
            got.append(p)

    threads = [threading.Thread(target=caller) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(got) == 16 and len(set(got)) == 1
    p = got[0]
    assert (p.start_ms, p.end_ms) == (10 * HOUR, 11 * HOUR) and len(p.shards) == 2


def test_settings_apply_from_the_next_placement(pc: Cluster) -> None:
    with Client(pc.coordinator_addrs, timeout=30) as db:
        pl = Placements(db)
        before = pl.get_placement("globex", 20 * HOUR)
        pl.update_settings(lambda s: Settings(s.total_shards, s.placement_ms, s.default_count,
                                              s.exclusions, {**s.counts, "globex": 5}, s.salts))
        assert Placements(db).get_placement("globex", 20 * HOUR + 5) == before  # immutable
        assert len(Placements(db).get_placement("globex", 21 * HOUR).shards) == 5
        with pytest.raises(ValueError, match="placement_ms"):
            pl.update_settings(lambda s: Settings(s.total_shards, 60_000))
        with pytest.raises(ValueError, match="exclusions"):
            pl.update_settings(lambda s: Settings(s.total_shards, s.placement_ms, 1, (999,)))


def test_the_placement_command(pc: Cluster, tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    def mt(*args: str) -> dict:
        p = subprocess.run([sys.executable, "-m", "cli", "placement", *args, "--zk", pc.zk_hosts,
                            "--json"], capture_output=True, text=True, timeout=60)
        assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
        return json.loads(p.stdout)  # type: ignore[no-any-return]

    shown = mt("show", "initech", "--at", str(30 * HOUR))
    assert shown["placements"][0]["start_ms"] == 30 * HOUR and shown["count"] >= 1
    assert mt("set", "--exclude", "3,7")["exclusions"] == [3, 7]
    load = {f"t{i}": float(1 + (i % 3) * 10) for i in range(12)}
    (tmp_path / "load.json").write_text(json.dumps(load))
    out = mt("balance", "--load", str(tmp_path / "load.json"), "--dry-run")
    assert out["variance_after"] <= out["variance_before"] and out["applied"] is False
