"""A log kept in one data center (log/homes.py), in real processes: six log servers that say
they run on six machines, three in data center east and three in west (the network is
loopback: what is tested here is where a log's writer and copies go). `midtown log home`
moves a log's writer and open segment into its home; the writer killed, the next one is
there too; what the command cannot do is refused naming the argument."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cluster import Cluster
from midtown import Client
from tests.integration.conftest import started, wait_for

pytestmark = pytest.mark.integration
EAST, WEST = {0, 1, 2}, {3, 4, 5}
WHERE = {**{f"log-{i}": (f"m{i}", f"dc={'east' if i in EAST else 'west'},zone=z{i}") for i in range(6)},
         **{f"storage-{i}": (f"m{m}", f"dc={'east' if m in EAST else 'west'},zone=z{m}")
            for i, m in enumerate((0, 3, 1))}}


@pytest.fixture(scope="module")
def two_dcs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with started(Path(tmp_path_factory.mktemp("homes")) / "c", log_server_count=6, where=WHERE) as c:
        c.create_dataset("t")
        yield c


def mt(c: Cluster, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    p = subprocess.run([sys.executable, "-m", "cli", *args, "--zk", c.zk_hosts], capture_output=True,
                       text=True, timeout=120)
    assert (p.returncode == 0) == ok, p.stdout + p.stderr
    return p


def status(c: Cluster, log_id: int) -> dict[str, Any]:
    rows = json.loads(mt(c, "log", "status", "--json").stdout)
    return next(r for r in rows if r["log"] == log_id)


def placed_in(c: Cluster, log_id: int, servers: set[int]) -> dict[str, Any] | None:
    """The log's status once its writer and its open segment's servers are all of
    `servers` (None until then)."""
    r = status(c, log_id)
    return r if r["writer"] in servers and {int(s) for s in r["replicas"]} <= servers else None


def test_a_log_given_a_home_is_written_and_copied_there_and_stays_there(two_dcs: Cluster) -> None:
    c = two_dcs
    # Before: every log's open segment spread over both data centers (the widest tier first).
    assert all(len(status(c, log_id)["data_centers"]) == 2 for log_id in (0, 3))
    out = json.loads(mt(c, "log", "home", "0", "west", "--json").stdout)
    assert out["home"] == "west"
    row = wait_for(lambda: placed_in(c, 0, WEST), 60, "log 0's writer and open segment in west")
    assert row["home"] == "west" and row["data_centers"] == ["west"]
    # Log 3, written from west already (its preferred writer): its open segment moves there.
    mt(c, "log", "home", "3", "west")
    wait_for(lambda: placed_in(c, 3, WEST), 60, "log 3's open segment in west")
    assert "west" in mt(c, "log", "status").stdout  # the table's home column
    with Client(zk=c.zk_hosts, timeout=30) as db:
        for i in range(20):  # keys on every log, log 0 among them
            db.put("t", f"p{i}", "k", b"v")
        # Its writer killed, the next writer is in west too.
        writer = row["writer"]
        c.kill(f"log-{writer}")
        try:
            wait_for(lambda: status(c, 0)["writer"] in WEST - {writer}, 60, "a new writer in west")
            for i in range(20):
                db.put("t", f"p{i}", "k", b"w")
                assert db.get("t", f"p{i}", "k").value == b"w"  # type: ignore[union-attr]
        finally:
            c.restart(f"log-{writer}")
    assert all(int(s) in WEST for s in status(c, 0)["replicas"])
    cleared = json.loads(mt(c, "log", "home", "0", "--clear", "--json").stdout)
    assert cleared["home"] == "" and status(c, 0)["home"] == ""


@pytest.mark.parametrize("args,says", [
    (("log", "home", "0", "north"), "DC: 'north' holds none of the pool's log servers (data centers: east, "
                                    "west)"),
    (("log", "home", "9", "west"), "LOG: 9"),
    (("log", "home", "0"), "DC: name a data center"),
    (("log", "home", "0", "west", "--clear"), "DC: give a data center or --clear"),
])
def test_a_home_that_cannot_be_is_refused_naming_the_argument(two_dcs: Cluster, args: tuple[str, ...],
                                                              says: str) -> None:
    p = mt(two_dcs, *args, ok=False)
    assert says in p.stderr and "Traceback" not in p.stderr
    assert status(two_dcs, 0)["home"] in ("", "west")  # nothing written by a refusal
