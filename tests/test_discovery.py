"""The SDK's look-ups in ZooKeeper never hold a call past its deadline (midtown/discovery.py),
and a coordinator's reads of ZooKeeper end within their bound (fleet/connect.py), here
with a stand-in session whose answers wait until a test lets them through."""

from __future__ import annotations

import json
import threading
import time
from types import SimpleNamespace
from typing import Any

import grpc
import pytest
from hypothesis import given
from hypothesis import strategies as st
from kazoo.exceptions import OperationTimeoutError
from kazoo.handlers.threading import KazooTimeoutError

from fleet.connect import BoundedReads
from midtown import errors
from midtown.discovery import CLOSE_WAIT_S, DISCOVERY_TTL_S, Discovery
from midtown.endpoints import Endpoints
from midtown.retries import Attempts

LATE_S = 0.25


class Session:
    """Answers the coordinators' registry with `addrs`, each read held until `open` is set."""

    def __init__(self, addrs: list[str]) -> None:
        self.addrs = addrs
        self.dcs: dict[str, str] = {}  # addr -> the data center its coordinator registered
        self.open = threading.Event()
        self.open.set()
        self.reads = 0
        self.stopped = threading.Event()

    def get_children(self, path: str) -> list[str]:
        self.reads += 1
        assert self.open.wait(30)
        return [str(i) for i in range(len(self.addrs))]

    def get(self, path: str) -> tuple[bytes, Any]:
        addr = self.addrs[int(path.rsplit("/", 1)[1])]
        where = {"dc": self.dcs[addr]} if addr in self.dcs else {}
        return json.dumps({"addr": addr, **where}).encode(), SimpleNamespace(version=0)

    def stop(self) -> None:
        assert self.open.wait(30)  # kazoo's stop waits for a ZooKeeper that does not answer
        self.stopped.set()

    def close(self) -> None:
        pass


def _discovery(monkeypatch: pytest.MonkeyPatch, s: Session) -> Discovery:
    d = Discovery("127.0.0.1:1", None)
    monkeypatch.setattr(d, "session", lambda: s)
    d._zk = s  # as if connected
    return d


def test_a_call_with_no_coordinator_known_waits_for_zookeeper_only_until_its_deadline(
        monkeypatch: pytest.MonkeyPatch) -> None:
    s = Session(["a:1"])
    s.open.clear()
    d = _discovery(monkeypatch, s)
    t0 = time.monotonic()
    with pytest.raises(errors.Unavailable, match="did not answer within 0.3s"):
        d.coordinators(0.3)
    assert time.monotonic() - t0 <= 0.3 + LATE_S
    s.open.set()
    assert d.coordinators(5) == ["a:1"]
    s.open.clear()
    t0 = time.monotonic()
    d.close()
    assert time.monotonic() - t0 <= CLOSE_WAIT_S + LATE_S
    s.open.set()


def test_a_known_list_is_used_at_once_while_it_is_looked_up_again(monkeypatch: pytest.MonkeyPatch) -> None:
    s = Session(["a:1", "b:2"])
    d = _discovery(monkeypatch, s)
    assert d.coordinators(5) == ["a:1", "b:2"] and s.reads == 1
    assert d.coordinators(5) == ["a:1", "b:2"] and s.reads == 1  # fresh: no look-up
    s.open.clear()
    s.addrs = ["c:3"]
    t0 = time.monotonic()
    assert d.coordinators(5, refresh=True) == ["a:1", "b:2"]  # the last list, at once
    assert time.monotonic() - t0 < LATE_S
    s.open.set()
    deadline = time.monotonic() + 10
    while d.known() != ["c:3"] and time.monotonic() < deadline:
        time.sleep(0.01)
    assert d.known() == ["c:3"]
    d.close()


def test_a_list_older_than_its_time_to_live_is_looked_up_again(monkeypatch: pytest.MonkeyPatch) -> None:
    s = Session(["a:1"])
    d = _discovery(monkeypatch, s)
    d.coordinators(5)
    assert d._found is not None
    d._found = (d._found[0] - DISCOVERY_TTL_S - 1, d._found[1])
    assert d.known() is None
    s.addrs = ["b:2"]
    assert d.coordinators(5) == ["a:1"]  # stale, given while the look-up runs
    deadline = time.monotonic() + 10
    while d.known() != ["b:2"] and time.monotonic() < deadline:
        time.sleep(0.01)
    assert s.reads == 2 and d.known() == ["b:2"]
    d.close()


def test_no_coordinator_registered_is_unavailable_saying_so(monkeypatch: pytest.MonkeyPatch) -> None:
    d = _discovery(monkeypatch, Session([]))
    with pytest.raises(errors.Unavailable, match="no coordinator is registered"):
        d.coordinators(5)
    d.close()


class _Unanswered:
    def get(self, timeout: float | None = None) -> Any:
        time.sleep(timeout or 0)
        raise KazooTimeoutError()


def test_bounded_reads_end_within_their_bound() -> None:
    zk = SimpleNamespace(get_async=lambda path, watch=None: _Unanswered(),
                         get_children_async=lambda path, watch=None, include_data=False: _Unanswered(),
                         exists_async=lambda path, watch=None: _Unanswered(), state="CONNECTED")
    b = BoundedReads(zk, 0.1)  # type: ignore[arg-type]
    for read in (lambda: b.get("/x"), lambda: b.get_children("/x"), lambda: b.exists("/x")):
        t0 = time.monotonic()
        with pytest.raises(OperationTimeoutError, match="within 0.1s"):
            read()
        assert time.monotonic() - t0 <= 0.1 + LATE_S
    assert b.state == "CONNECTED"  # the rest is the session's own


class _Rpc(grpc.RpcError):
    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.DEADLINE_EXCEEDED


def test_a_coordinator_silent_through_a_calls_deadline_is_passed_over() -> None:
    """The call that waited out its deadline on `a` marks it: the next calls go to `b`."""
    ends = Endpoints(["a:1", "b:2"], None, timeout=1.0, retries=3, token=None, tls_ca=None, route=True)
    attempts = Attempts("Put", 3, 0.05)
    attempts.start(object())
    assert not attempts.unanswered(_Rpc())  # its deadline has not passed: it may be the server's own
    time.sleep(0.06)
    assert attempts.unanswered(_Rpc())
    ends.unanswered("a:1")
    assert {ends.pick(ends.coordinators()) for _ in range(50)} == {"b:2"}


def test_a_client_calls_the_coordinators_of_its_data_center_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """Client(dc=...): of the coordinators registered (each with the data center it runs
    in, coordinator/node.py), a call goes to one in the client's; to another once those
    could not be reached; to any when none is registered there."""
    s = Session(["10.0.0.1:7000", "10.0.0.2:7000", "10.0.0.3:7000"])
    s.dcs = {"10.0.0.1:7000": "west", "10.0.0.2:7000": "east", "10.0.0.3:7000": "east"}
    ends = Endpoints(None, "127.0.0.1:1", timeout=5.0, retries=3, token=None, tls_ca=None, route=False,
                     dc="east")
    assert ends.discovery is not None
    monkeypatch.setattr(ends.discovery, "session", lambda: s)
    ends.discovery._zk = s
    found = ends.coordinators()
    assert {ends.pick(found) for _ in range(60)} == {"10.0.0.2:7000", "10.0.0.3:7000"}
    ends.unanswered("10.0.0.2:7000")
    ends.unanswered("10.0.0.3:7000")
    assert {ends.pick(found) for _ in range(20)} == {"10.0.0.1:7000"}
    nowhere = Endpoints(None, "127.0.0.1:1", timeout=5.0, retries=3, token=None, tls_ca=None, route=False,
                        dc="south")
    assert nowhere.discovery is not None
    monkeypatch.setattr(nowhere.discovery, "session", lambda: s)
    nowhere.discovery._zk = s
    assert {nowhere.pick(nowhere.coordinators()) for _ in range(80)} == set(s.addrs)
    ends.discovery.close()
    nowhere.discovery.close()


def test_a_call_that_could_not_reach_a_coordinator_goes_to_another_host_next() -> None:
    """What silenced a coordinator (its machine paused or cut off) likely silenced the
    others on its host: a retry goes to another host while one remains, and to the failed
    host's other coordinators only when no other host is known."""
    ends = Endpoints(["10.0.0.1:7000", "10.0.0.1:7004", "10.0.0.2:7000"], None, timeout=1.0, retries=3,
                     token=None, tls_ca=None, route=True)
    assert {ends.switch("10.0.0.1:7000", ends.coordinators()) for _ in range(50)} == {"10.0.0.2:7000"}
    one_host = Endpoints(["127.0.0.1:1", "127.0.0.1:2"], None, timeout=1.0, retries=3, token=None,
                         tls_ca=None, route=True)
    assert {one_host.switch("127.0.0.1:1", one_host.coordinators()) for _ in range(20)} == {"127.0.0.1:2"}


@given(st.text(max_size=40))
def test_the_host_of_an_address_is_never_an_error_and_agrees_with_the_check(addr: str) -> None:
    """reach.host_of (the host a retry moves away from) takes any text; where split_addr
    accepts the address, both name the same host."""
    from runtime import reach
    host = reach.host_of(addr)
    try:
        checked, _ = reach.split_addr(addr)
    except ValueError:
        return
    assert host == checked


def test_the_host_of_a_v6_address_or_one_without_a_port() -> None:
    from runtime import reach
    assert reach.host_of("[::1]:7000") == "::1" and reach.host_of("10.0.0.1") == "10.0.0.1"


def test_clients_find_a_silent_coordinator_within_half_a_typical_deadline() -> None:
    """The SDK's channels ping twice as often as the servers' (a paused coordinator's calls
    fail UNAVAILABLE within 0.5-1 s and are retried elsewhere), and servers accept it."""
    from runtime import transport
    client = dict(transport.CLIENT_GRPC_OPTIONS)
    server = dict(transport.GRPC_OPTIONS)
    assert client["grpc.keepalive_time_ms"] + client["grpc.keepalive_timeout_ms"] <= 1000
    assert server["grpc.http2.min_recv_ping_interval_without_data_ms"] <= client["grpc.keepalive_time_ms"]


class _Catalog:
    """A ZooKeeper holding one dataset, "e"; `away` makes every read fail as a ZooKeeper
    without a quorum does."""

    def __init__(self) -> None:
        self.away = False

    def get(self, path: str) -> tuple[bytes, Any]:
        if self.away:
            raise OperationTimeoutError("ZooKeeper did not answer")
        body = {"consistency": "eventual", "replication": 3, "ttl_ms": 0}
        return json.dumps(body).encode(), SimpleNamespace(czxid=7)


def test_a_dataset_entry_outlives_a_session_reestablished_with_the_same_datasets() -> None:
    """kazoo calls the datasets' watch again, with the same list, when a session is made
    anew: that empties nothing, so a read goes on with the entry while ZooKeeper is away
    again (it emptied the cache, and eventual reads failed without a quorum). A list that
    changed (a dataset made or dropped) empties it."""
    from catalog.datasets import DatasetCache

    zk = _Catalog()
    cache = DatasetCache(zk, ttl_s=0.0)  # type: ignore[arg-type]
    cache._on_children(["e"])
    assert cache.get("e", write=False) is not None
    cache._on_children(["e"])  # a new session: the same datasets
    zk.away = True
    d = cache.get("e", write=False)
    assert d is not None and d.consistency == "eventual"
    cache._on_children(["e", "f"])  # a dataset made: emptied
    with pytest.raises(OperationTimeoutError):
        cache.get("e", write=False)
