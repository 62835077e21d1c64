"""`bench datacenters` (bench/datacenters.py): its machines can hold what it measures (a
log kept in east needs three of east's log servers on three machines; a global log's
ensemble takes one server in each of three data centers), and a figure's round trips are
its p50 over twice the delay held each way."""

from __future__ import annotations

from bench import datacenters
from fleet import failure_domains
from fleet.failure_domains import Domain
from log import homes


def _domains() -> failure_domains.Domains:
    return failure_domains.lookup({i: Domain(m, (("dc", dc), ("zone", m)))
                                   for i, (m, dc) in enumerate(datacenters.MACHINES)})


def test_its_machines_can_keep_a_log_in_east_and_spread_a_global_one_over_three_data_centers() -> None:
    pool = list(range(len(datacenters.MACHINES)))
    assert homes.check_home(1, "east", 2, pool, _domains()) is None
    assert homes.check_home(1, "west", 2, pool, _domains()) is not None  # one machine there
    picked = failure_domains.pick(3, pool, _domains(), what="a global log's ensemble")
    assert sorted(_domains()(s).dc for s in picked) == ["east", "north", "west"]
    assert {dict(datacenters.MACHINES)[m] for m in datacenters.CLIENTS_ON} == {"east", "west"}


def test_a_rows_round_trips_are_its_p50_over_twice_the_delay() -> None:
    row = datacenters._row("global", "east", "put", 20, [0.050, 0.052, 0.054])
    assert (row["p50_ms"], row["round_trips"]) == (52.0, 1.3)
    assert datacenters._row("local", "east", "put", 0, [0.004])["round_trips"] is None
