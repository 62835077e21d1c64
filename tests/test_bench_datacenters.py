"""`bench datacenters` (bench/datacenters.py): its machines can hold what it measures (a
log kept in east needs three of east's log servers on three machines; a global log's
ensemble takes one server in each of three data centers), and a figure's round trips are
its p50 over twice the delay held each way."""

from __future__ import annotations

from bench import datacenters, home_lost
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


def test_home_losts_machines_can_keep_the_scope_in_east_and_then_in_west() -> None:
    """`bench home-lost` (bench/home_lost.py) fails the scope over to west: west, as east,
    holds a log's whole ensemble on three machines of its own."""
    dom = failure_domains.lookup({i: Domain(m, (("dc", dc), ("zone", m)))
                                  for i, (m, dc) in enumerate(home_lost.MACHINES)})
    pool = list(range(len(home_lost.MACHINES)))
    assert homes.check_home(1, "east", 2, pool, dom) is None
    assert homes.check_home(1, "west", 2, pool, dom) is None
    assert homes.check_home(1, "north", 2, pool, dom) is not None  # one machine there


def test_home_losts_figures_count_the_writes_in_the_lags_windows_before_the_loss() -> None:
    lags = [0.010] * 50 + [0.100] * 2  # p50 10 ms, p99 100 ms
    acked = [(f"w{i}", 10.0 + i * 0.02) for i in range(50)]  # 50/s up to 10.98 s
    acked += [("late", 16.5)]  # the first in west: 5.52 s after the last before the loss
    lost = {"report": {"logs": [{"lost_entries": 2}]}, "lost": 10.985, "failed_over": 15.0, "back": 20.0}
    row = home_lost.figures(lags, acked, lost, 3, ["w49"], 20, 50.0)
    assert row["acked"] == 50
    assert row["predicted_p50"] == 1  # acknowledged within 10 ms before the loss: 10.98
    assert row["predicted_p99"] == 5  # within 100 ms: 10.92..10.98
    assert (row["lost_for_sure"], row["kept_aside"], row["missing"]) == (2, 3, 1)
    assert row["no_writes_s"] == 5.5 and row["fail_over_s"] == 4.0


def test_the_links_round_trip_is_timed_by_connections_set_up() -> None:
    """The denominator of link_round_trips: TCP connections' set-up to an address, each
    timed (one untimed first)."""
    import socket

    with socket.create_server(("127.0.0.1", 0)) as srv:
        got = datacenters.probe("", "east", f"127.0.0.1:{srv.getsockname()[1]}", "connect", 3)
    assert len(got["seconds"]) == 3 and all(0 < s < 5 for s in got["seconds"]) and got["near"] == 0
