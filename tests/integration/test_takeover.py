"""A follower takes a log over from a writer it lost (issue 33, log/takeover.py), without
waiting for ZooKeeper to expire the old writer's session: the new writer is in place while
the lost one is still registered (a fact read from ZooKeeper, not a guess at timing).
Appends go on meanwhile, and every acknowledged entry reads back.

Run by `make soak`, not by the suite (moved_to_sim): the whole-server simulation checks the
same in every seed (tests/sim/test_writers.py, `make sim SIM_ARGS=--elections`: log/node.py's servers
killed and paused, takeovers counted while the old writer's server is still registered,
every older writer awake at the end stopped, every acknowledged append kept)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cluster import Cluster
from log import zk as zkpaths
from log.client import LogClient
from log.takeover import SETTLE_S
from tests.integration.conftest import started, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.moved_to_sim]
LOG = 1  # not the key-value log: only this test's appends go into it


@pytest.fixture(scope="module")
def tc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with started(Path(tmp_path_factory.mktemp("takeover")) / "c", logs=4, kv_logs=1) as c:
        yield c


def _appending(c: Cluster, stop: threading.Event, acked: list[tuple[bytes, Any]],
               errors: list[BaseException]) -> threading.Thread:
    def run() -> None:
        with LogClient(c.zk_hosts) as logs:
            i = 0
            while not stop.is_set():
                data = b"t-%d" % i
                try:
                    acked.append((data, logs.append(LOG, [data], timeout_s=30)))
                except BaseException as e:  # noqa: BLE001 (the test reports it)
                    errors.append(e)
                    return
                i += 1
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def _taken_over_while_registered(c: Cluster, how: str) -> None:
    zk = zkpaths.connect(c.zk_hosts)
    stop = threading.Event()
    acked: list[tuple[bytes, Any]] = []
    errors: list[BaseException] = []
    t = _appending(c, stop, acked, errors)
    heard: list[str | None] = []  # what LogClient.on_writer_change told (storage nodes follow it)
    watcher = LogClient(c.zk_hosts)
    try:
        watcher.on_writer_change(LOG, heard.append)
        w = wait_for(lambda: zkpaths.writer_is_live(zk, LOG) and zkpaths.read_writer(zk, LOG), 60, "a writer")
        old = int(w["server"])
        wait_for(lambda: len(acked) > 20, 30, "appends")
        threading.Event().wait(SETTLE_S)  # a writer that has just taken a log is not taken over
        registration = f"{zkpaths.SERVERS}/{old}"
        if how == "kill":
            c.kill(f"log-{old}")
        else:
            c.signal(f"log-{old}", signal.SIGSTOP)
        try:
            new = wait_for(lambda: (x := zkpaths.read_writer(zk, LOG)) and x["server"] != old
                           and x.get("state") == "writing" and x, 30, "another writer")
            # The lost writer's session has not expired yet: nobody waited for it.
            assert zk.exists(registration) is not None, "the takeover waited for the session to expire"
            assert int(new["server"]) != old
            wait_for(lambda: new["addr"] in heard, 10, "the writer watch to name the new writer")
            n = len(acked)
            wait_for(lambda: len(acked) > n + 20, 30, "appends to the new writer")
        finally:
            if how == "kill":
                c.restart(f"log-{old}")
            else:
                c.signal(f"log-{old}", signal.SIGCONT)
        stop.set()
        t.join(60)
        assert errors == []
        with LogClient(c.zk_hosts) as logs:
            lo = min(a.first_position for _, a in acked)
            hi = max(a.first_position for _, a in acked)
            got = {e.position: e.payload for e in logs.read(LOG, lo, max_entries=hi - lo + 1, timeout_s=30)}
        assert all(got.get(a.first_position) == data for data, a in acked)
    finally:
        stop.set()
        watcher.close()
        zk.stop()
        zk.close()


def test_a_killed_writer_is_taken_over_before_its_session_expires(tc: Cluster) -> None:
    _taken_over_while_registered(tc, "kill")


def test_a_paused_writer_is_taken_over_and_stops_when_it_wakes(tc: Cluster) -> None:
    """SIGSTOP: its sockets stay open, so the followers find it quiet (no heartbeat), probe
    it, and take over; woken up, it finds the log taken and stops writing it."""
    _taken_over_while_registered(tc, "pause")
