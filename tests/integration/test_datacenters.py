"""Three data centers over network namespaces, under the linearizability checker (make
soak-datacenters; outside the suite's budget: a few minutes, as root).

Seven machines, each a namespace running one host (`cluster/netns.py`; the host layout, as
`machine up` runs it): east and west of three machines each (a local scope's home holds a
log's whole ensemble, three machines), north of one; ZooKeeper in the root namespace, off
the data path. Every machine's packets to the other data centers' machines are held
DELAY_MS each way (`bench/wan.py`: an NFQUEUE program, since this kernel has no netem;
docs/performance.md says how faithful it is). Log 1 is kept in east and carries scope east
(the dataset `local`); `global` is on log 0, whose ensemble spans the data centers
(bench/home_lost.py: the machines, the application, the loss and the fail-over
`midtown-bench home-lost` measures). The checker's clients run in the
root namespace on `global`'s hot keys.

1. West cut off whole (its machines' links down) and brought back: `global` goes on
   (writes complete while west is away) and its history linearizes.
2. East lost whole (every host there SIGKILLed) while an application writes `local` and
   the checker's clients `global`; once east's log servers left ZooKeeper, `dataset
   fail-over local --to west`; then east brought back. `global` goes on through the loss
   and linearizes; the fail-over loses no more than it reports (each acknowledged write of
   `local` missing at the end is one of the log positions it said were lost for sure or
   `scope list` says are kept aside); every write acknowledged after it is read back; east's
   storage nodes, condemned, take their copies and leave the record; east serves nothing
   of the scope (the log's writer stays in west); at the end every storage node is up and
   replicas at one position of a shard hold one digest (`node status`)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench import home_lost
from bench.harness import midtown_json
from cluster import Cluster, netns
from midtown import Client
from tests.integration.conftest import wait_for
from tests.integration.test_kv import run_history
from tests.linearizability import Operation, check_per_key

WHY_NOT = netns.can_make()
pytestmark = [pytest.mark.integration, pytest.mark.soak,
              pytest.mark.skipif(WHY_NOT is not None, reason=f"{WHY_NOT}")]
WEST = [m for m, d in home_lost.MACHINES if d == "west"]
DELAY_MS, JITTER_MS = 20, 2
AWAY_S = 8.0  # how long west stays cut off, and east stays lost after its fail-over


@pytest.fixture(scope="module")
def spread(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, dict[str, netns.Namespace]]]:
    with home_lost.seven_machines(Path(tmp_path_factory.mktemp("dcs")) / "c", DELAY_MS, JITTER_MS,
                                  print) as (c, by_machine):
        yield c, by_machine


def completed_within(history: dict[str, list[Operation]], start: float, end: float) -> int:
    """Writes (puts, deletes, CAS) invoked and answered between `start` and `end`."""
    return sum(1 for h in history.values() for o in h
               if o.kind != "get" and o.known and start <= o.call and o.ret <= end)


def test_a_data_center_cut_off_and_brought_back_loses_no_global_write(
        spread: tuple[Cluster, dict[str, netns.Namespace]]) -> None:
    c, by_machine = spread
    away: list[float] = []

    def cut_off_west() -> None:
        time.sleep(3)
        away.append(time.monotonic())
        for m in WEST:
            by_machine[m].link(False)
        time.sleep(AWAY_S)
        for m in WEST:
            by_machine[m].link(True)
        away.append(time.monotonic())
        time.sleep(3)
    with Client(zk=c.zk_hosts, timeout=30) as db:
        history = run_history(db, ["c0", "c1", "c2"], cut_off_west, dataset="global")
    assert check_per_key(history) == []
    assert completed_within(history, *away) > 0, "no global write completed while west was away"
    wait_for(lambda: all_up_and_agreed(c), 180, "every storage node up, none behind, and no shard diverged")


def test_a_home_lost_fails_over_and_loses_no_more_than_it_reports(
        spread: tuple[Cluster, dict[str, netns.Namespace]]) -> None:
    c, _ = spread
    lost: dict[str, Any] = {}
    with home_lost.Application(c.zk_hosts) as app, Client(zk=c.zk_hosts, timeout=30) as db:
        def lose_east() -> None:
            time.sleep(3)
            lost.update(home_lost.lose_home(c, home_lost.MACHINES, AWAY_S, print))
        # (keys of its own: the checker starts from keys absent)
        history = run_history(db, ["l0", "l1", "l2"], lose_east, dataset="global")
    assert check_per_key(history) == []
    assert completed_within(history, lost["lost"], lost["back"]) > 0, \
        "no write of the global dataset completed while east was lost"
    report = lost["report"]
    assert report["to"] == "west" and report["datasets"] == ["local"] and not report["not_written_yet"]
    (cut,) = report["logs"]
    # East's storage nodes, condemned, take the scope's shards again (once back) and leave
    # the record; east's log servers say what they kept aside past the cut
    kept = home_lost.settled(c)
    missing = app.missing()
    after = [k for k, t in app.acked if t > lost["failed_over"]]
    assert after, "no write of the local dataset acknowledged after the fail-over"
    assert not set(after) & set(missing)
    print(f"fail-over: cut at {cut['cut_at']}, {cut['lost_entries']} lost for sure, {kept} kept aside; "
          f"{len(missing)} of {len(app.acked)} acknowledged writes missing")
    assert len(missing) <= cut["lost_entries"] + kept, (missing, cut, kept)
    rows = {r["log"]: r for r in midtown_json(c.zk_hosts, "log", "status")}
    west = {i for i, (_, d) in enumerate(home_lost.MACHINES) if d == "west"}
    assert rows[1]["home"] == "west" and rows[1]["writer"] in west
    wait_for(lambda: all_up_and_agreed(c), 180, "every storage node up, none behind, and no shard diverged")


def all_up_and_agreed(c: Cluster) -> bool:
    """`node status`: every storage node up, none behind its logs, and replicas at one
    position of a shard holding one digest (it exits 1 otherwise)."""
    p = subprocess.run([sys.executable, "-m", "cli", "node", "status", "--zk", c.zk_hosts, "--json"],
                       capture_output=True, text=True, timeout=120)
    rows = json.loads(p.stdout) if p.stdout.strip() else []
    return p.returncode == 0 and all(r["behind"] == 0 for r in rows)
