"""The SDK's routes to the coordinator beside each log's writer (midtown/routes.py): pure parts."""

from __future__ import annotations

import time
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from catalog import log_map
from catalog.routing import log_of, shard_of
from midtown import routes
from midtown.routes import Routes, Table, beside_writers, route


def test_beside_writers_pairs_each_log_with_the_coordinator_of_its_writers_process() -> None:
    coordinators = [{"addr": "h0:3", "log": "h0:1"}, {"addr": "h1:3", "log": "h1:1"},
                    {"addr": "c9:3"},  # a coordinator of its own (split layout)
                    {"addr": 5, "log": "h2:1"}, "garbage", {"log": "h2:1"}]  # bad entries: ignored
    writers = {0: "h1:1", 1: "h0:1", 2: "h2:1", 3: "elsewhere:1"}
    assert beside_writers(writers, coordinators) == {0: "h1:3", 1: "h0:3"}
    assert beside_writers(writers, [{"addr": "c9:3"}]) == {}


@given(st.text(min_size=1, max_size=20), st.binary(max_size=40), st.integers(1, 256), st.integers(1, 8))
def test_a_key_routes_to_the_coordinator_beside_the_writer_of_its_log(
        dataset_id: str, pkey: bytes, shards: int, logs: int) -> None:
    beside = {i: f"c{i}" for i in range(logs)}
    of = log_map.first(shards, logs).of
    t = Table(shards, of, {"d": (dataset_id, 0, 0)}, beside)
    assert route(t, "d", pkey) == f"c{log_of(shard_of(dataset_id, pkey, shards), logs)}"
    assert route(t, "other", pkey) is None  # an unknown dataset: no route
    assert route(Table(shards, of, {"d": (dataset_id, 0, 0)}, {}), "d", pkey) is None
    # a log whose writer has no coordinator beside it: no route for its keys
    partial = Table(shards, of, {"d": (dataset_id, 0, 0)}, {i: c for i, c in beside.items() if i})
    assert route(partial, "d", pkey) == (None if log_of(shard_of(dataset_id, pkey, shards), logs) == 0
                                         else route(t, "d", pkey))
    # a shard handed over to another log (catalog/log_map.py): routed to that log's writer
    shard = shard_of(dataset_id, pkey, shards)
    moved = tuple((lg + 1) % logs if s == shard else lg for s, lg in enumerate(of))
    assert route(Table(shards, moved, {"d": (dataset_id, 0, 0)}, beside), "d", pkey) == f"c{moved[shard]}"


def test_a_coordinator_that_failed_gets_no_routed_calls_for_a_while(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    r = Routes(lambda: None)
    r._thread = object()  # type: ignore[assignment]  # no ZooKeeper: the table is set here
    r._table = Table(1, (0,), {"d": ("d#0", 0, 0)}, {0: "c0"})
    assert r.coordinator_for("d", b"k") == "c0"
    r.failed("c0")
    assert r.coordinator_for("d", b"k") is None
    monkeypatch.setattr(routes, "AVOID_S", 0.0)
    r.failed("c0")
    time.sleep(0.01)
    assert r.coordinator_for("d", b"k") == "c0"


class _Watching:
    """A ZooKeeper session that only records data watches (read_table is replaced)."""

    def __init__(self) -> None:
        self.watches: dict[str, Any] = {}

    def DataWatch(self, path: str, fn: Any) -> None:  # noqa: N802 (kazoo's name)
        self.watches[path] = fn


def test_routes_are_read_again_as_soon_as_a_logs_writer_changes(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A takeover moves a log's writer: the routes follow it when its writer node changes,
    not at the next ROUTES_TTL_S (made an hour here)."""
    zk = _Watching()
    tables = [Table(2, (0, 1), {"d": ("d#0", 0, 0)}, {0: "c0", 1: "c1"})]
    monkeypatch.setattr(routes, "read_table", lambda zk, names: tables[-1])
    monkeypatch.setattr(routes, "ROUTES_TTL_S", 3600.0)
    r = Routes(lambda: zk)
    try:
        r.coordinator_for("d", b"k")  # starts the thread
        deadline = time.monotonic() + 10
        while len(zk.watches) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sorted(zk.watches) == ["/midtown/logs/0/writer", "/midtown/logs/1/writer"]
        tables.append(Table(2, (0, 1), {"d": ("d#0", 0, 0)}, {0: "c2", 1: "c2"}))  # both taken over
        zk.watches["/midtown/logs/0/writer"](b"{}", None)
        while r.coordinator_for("d", b"k") != "c2" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert r.coordinator_for("d", b"k") == "c2"
    finally:
        r.stop()
