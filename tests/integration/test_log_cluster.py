"""The replicated log with real processes: ZooKeeper and three log servers, killed and
paused for real (SIGKILL, SIGSTOP)."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator

import grpc
import pytest

from cluster import Cluster
from log import limits
from log import zk as zkpaths
from log.client import LogClient
from log.seals import Stint, Tags
from midtown_pb import log_pb2 as pb
from runtime import refusals
from runtime.refusals import Refusal
from tests.integration.conftest import Ack, Appenders, restart_and_wait, started, verify_logs, wait_for

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One cluster for the module (a cluster per test cost the suite seconds each): each
    test appends to logs of its own, and restarts what it kills or pauses."""
    with started(tmp_path_factory.mktemp("log") / "c", logs=16) as c:
        yield c


def _servers(cluster: Cluster) -> list[str]:
    return [p.addr for p in cluster.log_servers()]


def _writer(client: LogClient, log_id: int) -> dict:
    return wait_for(lambda: zkpaths.read_writer(client.zk, log_id), 30, f"a writer for log {log_id}")


def test_append_read_every_replica_and_status(cluster: Cluster, client: LogClient) -> None:
    topo = client.topology()
    assert topo.logs == 16
    # Every log has one writer, and it is a registered log server. Which server wins an
    # election is a preference (tests/test_log_topology.py), not a promise: a server that
    # starts late finds its preferred logs taken, and keeps none of them.
    registered = client.servers()
    for i in range(topo.logs):
        w = _writer(client, i)
        assert w["server"] in registered, f"log {i}: writer {w} is not a registered server"
        assert w["addr"] == registered[w["server"]], f"log {i}: writer {w} has the wrong address"
    acks = []
    for i in range(20):
        r = client.append(5, [f"e{i}".encode(), f"f{i}".encode()])
        acks += [Ack(5, r.first_position, f"e{i}".encode(), r.timestamp_ms, r.epoch, 0),
                 Ack(5, r.first_position + 1, f"f{i}".encode(), r.timestamp_ms, r.epoch, 0)]
    assert [a.position for a in acks] == list(range(40))
    verify_logs(client, acks, _servers(cluster))
    rows = {r["log"]: r for r in client.status()}
    assert rows[5]["last"] == 39 and rows[5]["epoch"] >= 1
    wait_for(lambda: all(v == 39 for v in client.status()[5]["replicas"].values()), 10,
             "every replica to report position 39")


def test_tailing_reader_sees_new_entries_promptly(cluster: Cluster, client: LogClient) -> None:
    got: list[pb.Entry] = []

    def tail() -> None:
        for e in client.read(2, 0, follow=True, max_entries=3, timeout_s=30):
            got.append(e)

    th = threading.Thread(target=tail)
    th.start()
    time.sleep(0.3)
    for i in range(3):
        client.append(2, [f"x{i}".encode()])
        t0 = time.monotonic()
        wait_for(lambda: len(got) == i + 1, 5, "the tailing reader")
        assert time.monotonic() - t0 < 2.0
    th.join(10)
    assert [e.payload for e in got] == [b"x0", b"x1", b"x2"]


@pytest.mark.moved_to_sim  # make soak: the whole-server simulation kills writers mid-append in every seed
def test_sigkill_writer_mid_stream(cluster: Cluster, client: LogClient) -> None:
    log_id = 7
    w = _writer(client, log_id)
    ap = Appenders(client, logs=[log_id, 8, 9], threads=8).start()
    wait_for(lambda: ap.count() > 200, 30, "appends before the kill")
    victim = f"log-{w['server']}"
    killed_at = time.monotonic()
    cluster.kill(victim)
    new = wait_for(lambda: (x := zkpaths.read_writer(client.zk, log_id)) and
                   x["server"] != w["server"] and x, 30, "a new writer")
    wait_for(lambda: any(a.log_id == log_id and a.at > killed_at and a.epoch > 1 for a in ap.acks),
             30, "an append acknowledged by the new writer")
    failover = min(a.at for a in ap.acks if a.log_id == log_id and a.at > killed_at
                   and a.epoch > 1) - killed_at
    n = ap.count()
    wait_for(lambda: ap.count() > n + 200, 30, "appends after the failover")
    restart_and_wait(cluster, client, victim)
    ap.stop()
    assert new["server"] != w["server"]
    bound = limits.ZK_SESSION_TIMEOUT_S + 2 * limits.ELECTION_BACKOFF_S + 2.0
    assert failover < bound, f"failover took {failover:.1f}s, bound {bound}s"
    verify_logs(client, ap.acks, _servers(cluster))


def test_sigstop_writer_past_session_timeout(cluster: Cluster, client: LogClient) -> None:
    """A paused writer whose session expires is replaced; when it resumes, none of the
    appends it still holds may be acknowledged."""
    log_id = 4
    w = _writer(client, log_id)
    old = client.stub(w["addr"])
    client.append(log_id, [b"before"])
    victim = f"log-{w['server']}"
    cluster.signal(victim, signal.SIGSTOP)
    results: list[tuple[str, object]] = []

    def direct(i: int) -> None:  # appends sent to the paused writer itself
        try:
            r = old.Append(pb.AppendRequest(log_id=log_id, payloads=[f"paused{i}".encode()]),
                           timeout=60)
            results.append(("ok", r))
        except grpc.RpcError as e:
            results.append((e.code().name, e.details()))

    threads = [threading.Thread(target=direct, args=(i,)) for i in range(5)]
    for t in threads:
        t.start()
    try:
        new = wait_for(lambda: (x := zkpaths.read_writer(client.zk, log_id)) and
                       x["server"] != w["server"] and x, 30, "a new writer")
        acks = []
        for i in range(20):
            r = client.append(log_id, [f"after{i}".encode()], timeout_s=30)
            acks.append(Ack(log_id, r.first_position, f"after{i}".encode(), r.timestamp_ms, r.epoch, 0))
    finally:
        cluster.signal(victim, signal.SIGCONT)
    for t in threads:
        t.join(60)
    assert new["server"] != w["server"]
    assert len(results) == 5
    assert all(kind != "ok" for kind, _ in results), f"a paused writer acknowledged: {results}"
    # And nothing it held made it into the log.
    entries = list(client.read(log_id, 0, max_entries=1000, timeout_s=30))
    assert not [e for e in entries if e.payload.startswith(b"paused")]
    verify_logs(client, acks, _servers(cluster))


def test_sigkill_and_restart_follower(cluster: Cluster, client: LogClient) -> None:
    log_id = 10
    w = _writer(client, log_id)
    follower = next(p for p in cluster.log_servers() if p.server_id != w["server"])
    ap = Appenders(client, logs=[log_id], threads=4).start()
    wait_for(lambda: ap.count() > 100, 30, "appends")
    cluster.kill(follower.name)
    n = ap.count()
    wait_for(lambda: ap.count() > n + 200, 30, "appends with a follower down")
    restart_and_wait(cluster, client, follower.name)
    n = ap.count()
    wait_for(lambda: ap.count() > n + 100, 30, "appends after the restart")
    # With the other follower down, the writer's quorum needs the restarted one: its
    # replication stream (runtime/call_stream.py) broke with the kill and was opened again.
    other = next(p for p in cluster.log_servers()
                 if p.server_id not in (w["server"], follower.server_id))
    cluster.kill(other.name)
    n = ap.count()
    wait_for(lambda: ap.count() > n + 100, 30, "appends with the other follower down")
    restart_and_wait(cluster, client, other.name)
    ap.stop()
    last = max(a.position for a in ap.acks)
    # The restarted follower fills its gaps from its peers, by itself.
    wait_for(lambda: client.status()[log_id]["replicas"].get(follower.server_id, -1) >= last,
             30, "the follower to catch up")
    verify_logs(client, ap.acks, _servers(cluster))


def test_truncate_removes_prefix_everywhere(cluster: Cluster, client: LogClient) -> None:
    for i in range(10):
        client.append(1, [f"t{i}".encode()])
    assert client.truncate(1, 6) == 6
    for addr in _servers(cluster):
        with pytest.raises(Refusal) as ei:
            list(client.read(1, 3, server=addr))
        assert ei.value.code == grpc.StatusCode.OUT_OF_RANGE
        assert "first available position is 6" in ei.value.message
        # A follower may learn the commit point up to 50 ms later: follow until there.
        got = client.read(1, 6, server=addr, follow=True, max_entries=4, timeout_s=10)
        assert [e.payload for e in got] == [b"t6", b"t7", b"t8", b"t9"]
    wait_for(lambda: all(r["first"] == 6 for r in [client.status()[1]]), 10, "truncation")
    with pytest.raises(Refusal) as ei:
        client.truncate(1, 50)
    assert ei.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert "before_position" in ei.value.message
    assert client.truncate(1, 2) == 6, "truncation never moves backwards"


def test_a_sealed_shard_stays_sealed_across_a_writer_kill(cluster: Cluster, client: LogClient) -> None:
    """docs/log.md "Adding logs and handing shards over", step 3, with real servers: the
    hand-off record seals its shard (the log service's list written first), an append with
    a record of it is refused whole (FAILED_PRECONDITION, reason "sealed"), other shards'
    go on; the writer SIGKILLed, the new one reads the list and refuses it too; an open
    record at the next generation, the list, and an open record again let it in once more,
    at that generation only (a sender whose map is older is refused)."""
    log_id, shard = 11, 5
    w = _writer(client, log_id)
    before = client.append(log_id, [b"s5-before"], tags=Tags((shard,)))
    zkpaths.change_seal(client.zk, log_id, shard, Stint(0, to=12))
    seal = client.append(log_id, [b"s5-hand-off"], tags=Tags((shard,), seal=shard, to=12))

    def refused(payload: bytes) -> None:
        with pytest.raises(Refusal) as ei:  # one record of the shard among others: all refused
            client.append(log_id, [b"s6-" + payload, b"s5-" + payload], tags=Tags((6, shard)), timeout_s=60)
        assert ei.value.code == grpc.StatusCode.FAILED_PRECONDITION and ei.value.reason == refusals.SEALED
        assert f"shard {shard} was handed over to log 12" in ei.value.message

    refused(b"late")
    other = client.append(log_id, [b"s6-other"], tags=Tags((6,)))
    cluster.kill(f"log-{w['server']}")
    wait_for(lambda: (x := zkpaths.read_writer(client.zk, log_id)) and x["server"] != w["server"],
             30, "a new writer")
    refused(b"after-the-kill")
    opening = Tags((shard,), open=shard, generation=1)
    client.append(log_id, [b"s5-open"], tags=opening)
    zkpaths.change_seal(client.zk, log_id, shard, Stint(1))
    client.append(log_id, [b"s5-open"], tags=opening)
    again = client.append(log_id, [b"s5-again"], tags=Tags((shard,), (1,)))
    with pytest.raises(Refusal) as ei:
        client.append(log_id, [b"s5-stale"], tags=Tags((shard,), (0,)))
    assert ei.value.reason == refusals.SEALED and "generation 1 in this log, not 0" in ei.value.message
    restart_and_wait(cluster, client, f"log-{w['server']}")
    got = {e.position: e.payload for e in client.read(log_id, 0, max_entries=again.first_position + 1)}
    assert got[before.first_position] == b"s5-before" and got[seal.first_position] == b"s5-hand-off"
    assert got[other.first_position] == b"s6-other" and got[again.first_position] == b"s5-again"
    assert not [p for p in got.values() if b"late" in p or b"after-the-kill" in p or b"stale" in p]
