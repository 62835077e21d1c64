"""Exactly-once ingestion through the store (real cluster): bulk writes with event ids,
retries and repeats applied once, counters exact, shard scans from one position."""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Iterator

import grpc
import pytest

from cluster import Cluster
from midtown import Client, Write, errors
from midtown_pb import kv_pb2 as pb
from midtown_pb import kv_pb2_grpc
from tests.integration.conftest import started

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def ic(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with started(tmp_path_factory.mktemp("ingest") / "c") as c:
        yield c


def test_bulk_writes_apply_each_event_once(ic: Cluster) -> None:
    ic.create_dataset("ev")
    rng = random.Random(7)
    events = [(f"user{rng.randrange(40)}", f"ev{i}") for i in range(3000)]
    sent = events + rng.sample(events, 600)  # repeats across calls
    rng.shuffle(sent)
    with Client(ic.coordinator_addrs, timeout=60) as db:
        outcomes = []
        for i in range(0, len(sent), 500):
            chunk = sent[i:i + 500]
            outcomes += db.write_many("ev", [Write.incr(u, "n", 1, event_id=e) for u, e in chunk])
        statuses = Counter(o.status for o in outcomes)
        assert statuses == {"applied": 3000, "duplicate": 600}
        # The same call retried with its request id: the first outcomes, nothing again.
        again = [Write.incr(u, "n", 1, event_id=e) for u, e in sent[:100]]
        first = db.write_many("ev", again, request_id=b"retry-me")
        second = db.write_many("ev", again, request_id=b"retry-me")
        assert [o.status for o in first] == [o.status for o in second] == ["duplicate"] * 100
        per_user = Counter(u for u, _ in events)
        for u, n in per_user.items():
            got = db.get("ev", u, "n")
            assert got is not None and int(got.value) == n, u


def test_concurrent_writers_of_the_same_events_apply_each_once(ic: Cluster) -> None:
    """Two attempts of one Spark task (or a client and its retry) writing the same rows at
    the same time: every event counted once."""
    ic.create_dataset("race")
    events = [f"e{i}" for i in range(2000)]

    def writer(seed: int) -> None:
        rng = random.Random(seed)
        order = events[:]
        rng.shuffle(order)
        with Client(ic.coordinator_addrs, timeout=60) as db:
            for i in range(0, len(order), 250):
                db.write_many("race", [Write.incr("total", "n", 1, event_id=e) for e in order[i:i + 250]])

    threads = [threading.Thread(target=writer, args=(s,)) for s in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    with Client(ic.coordinator_addrs, timeout=60) as db:
        assert db.get("race", "total", "n").value == b"2000"  # type: ignore[union-attr]


def test_outcomes_name_failures_and_single_ops_take_event_ids(ic: Cluster) -> None:
    ic.create_dataset("one")
    with Client(ic.coordinator_addrs, timeout=60) as db:
        out = db.write_many("one", [Write.insert("k", "l", b"a", event_id="x1"),
                                    Write.insert("k", "l", b"b", event_id="x2"),
                                    Write.put("k", "m", b"c")])
        assert [o.status for o in out] == ["applied", "failed", "applied"]
        assert "condition failed" in out[1].error
        assert db.incr("one", "c", "n", 5, event_id="i1") == 5
        assert db.incr("one", "c", "n", 5, event_id="i1") == 5  # a duplicate: the first value
        assert db.incr("one", "c", "n", 5, event_id="i2") == 10
        # Groups and single puts (sent as columns) mixed: outcomes in the order written.
        out = db.write_many("one", [Write.put("m", "a", b"1", event_id="y1"),
                                    Write.insert("m", "b", b"2", event_id="y2"),
                                    Write.put("m", "c", b"3", event_id="y1"),
                                    Write.incr("m", "n", 2, event_id="y3"),
                                    Write.put("q", "d", b"4", ttl_ms=60_000)])
        assert [o.status for o in out] == ["applied", "applied", "duplicate", "applied", "applied"]
        assert out[2].position == out[0].position and out[3].results[0].value.value == b"2"
        assert db.get("one", "m", "c") is None and db.get("one", "q", "d").expires_at_ms > 0  # type: ignore[union-attr]
        v1 = db.put("one", "p", "l", b"v", event_id="p1")
        assert db.put("one", "p", "l", b"w", event_id="p1") == v1
        assert db.get("one", "p", "l").value == b"v"  # type: ignore[union-attr]


def test_shard_scans_see_every_key_once(ic: Cluster) -> None:
    ic.create_dataset("scan")
    with Client(ic.coordinator_addrs, timeout=60) as db:
        want = {}
        writes = []
        for i in range(1500):
            pk, lk = f"p{i % 97}", f"l{i}"
            want[(pk.encode(), lk.encode())] = str(i).encode()
            writes.append(Write.put(pk, lk, str(i).encode()))
        db.write_many("scan", writes)
        db.delete("scan", "p0", "l0")
        del want[(b"p0", b"l0")]
        got = {}
        for shard in range(db.shards("scan")):
            items = [it for page in db.scan_shard("scan", shard, page=100) for it in page.items]
            for it in items:
                assert (it.partition_key, it.local_key) not in got
                got[(it.partition_key, it.local_key)] = it.value.value
        assert got == want


def test_bad_bulk_requests_name_the_field(ic: Cluster) -> None:
    ic.create_dataset("bad")
    stub = kv_pb2_grpc.KVStub(grpc.insecure_channel(ic.coordinator_addrs[0]))
    h = pb.RequestHeader(dataset="bad")
    cases = [
        (pb.WriteManyRequest(header=h), "groups"),
        (pb.WriteManyRequest(header=h, groups=[pb.WriteGroup(partition_key=b"p")]), "groups[0].ops"),
        (pb.WriteManyRequest(header=h, groups=[pb.WriteGroup(ops=[pb.Op(put=pb.PutOp(local_key=b"l"))])]),
         "groups[0].partition_key"),
        (pb.WriteManyRequest(header=h, groups=[pb.WriteGroup(partition_key=b"p", event_id=b"x" * 300,
                                                             ops=[pb.Op(put=pb.PutOp(local_key=b"l"))])]),
         "groups[0].event_id"),
        (pb.WriteManyRequest(header=h, groups=[pb.WriteGroup(partition_key=b"p",
                                                             ops=[pb.Op(get=pb.GetOp(local_key=b"l"))])]),
         "groups[0].ops[0]"),
    ]
    cols = dict(partition_keys=[b"p", b"q"], local_keys=[b"a", b"b"], values=[b"x", b"y"])
    for bad, field in [(dict(local_keys=[b"a"]), "puts.local_keys"), (dict(values=[b"x"] * 3), "puts.values"),
                       (dict(event_ids=[b"e"]), "puts.event_ids"), (dict(ttl_ms=[1, 2, 3]), "puts.ttl_ms"),
                       (dict(partition_keys=[b"p", b""]), "puts.partition_keys[1]"),
                       (dict(event_ids=[b"e", b"x" * 300]), "puts.event_ids[1]"),
                       (dict(values=[b"x", b"v" * (5 << 20)]), "puts.values[1]"),
                       (dict(ttl_ms=[0, 2**63]), "puts.ttl_ms[1]")]:
        cases.append((pb.WriteManyRequest(header=h, puts=pb.PutColumns(**{**cols, **bad})), field))
    for req, field in cases:
        with pytest.raises(grpc.RpcError) as ei:
            stub.WriteMany(req, timeout=10)
        assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT and field in (ei.value.details() or ""), \
            (field, ei.value.details())
    with pytest.raises(grpc.RpcError) as ei:
        list(stub.ScanShard(pb.ScanShardRequest(header=h, shard=10**6), timeout=10))
    assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "shard" in (ei.value.details() or "")
    with Client(ic.coordinator_addrs, timeout=10) as db, pytest.raises(errors.InvalidArgument):
        db.write_many("bad", [])


def _node_event_ids(c: Cluster, dataset_id: str) -> dict[int, int]:
    """Event ids each storage node holds for the dataset (summed over shards)."""
    out = {}
    for p in c.playing("storage-node"):
        st = kv_pb2_grpc.StorageStub(grpc.insecure_channel(p.addr_of("storage-node"))).Status(
            pb.NodeStatusRequest(), timeout=10)
        out[p.server_id] = sum(e.ids for e in st.event_ids if e.dataset == dataset_id)
    return out


def test_window_and_cap_age_ids_out_on_every_replica(ic: Cluster) -> None:
    import json
    import subprocess
    import sys
    import time

    from tests.integration.conftest import wait_for

    ic.create_dataset("win", dedup_window_ms=1500)
    # The cap's dataset keeps ids an hour: only the cap ages them out, whatever the machine's speed.
    hour = 3_600_000
    d = ic.create_dataset("cap", dedup_window_ms=hour, dedup_max_ids=40, dedup_warn_below_ms=hour)
    with Client(ic.coordinator_addrs, timeout=60) as db:
        # The window, on log time: a repeat within it is a duplicate, after it applies again.
        assert db.incr("win", "w", "n", 1, event_id="old") == 1
        assert db.incr("win", "w", "n", 1, event_id="old") == 1
        time.sleep(2)  # log time moves with the next entries: 2 s later
        assert db.write_many("win", [Write.incr("w", "tick", 1)])[0].status == "applied"
        assert db.incr("win", "w", "n", 1, event_id="old") == 2, "a repeat after the window applies again"
        # The cap, per shard: one partitioning key, one shard; the oldest ids go first.
        ids = [f"c{i}" for i in range(100)]
        for i in range(0, 100, 10):
            db.write_many("cap", [Write.incr("capped", "n", 1, event_id=e) for e in ids[i:i + 10]])
        late = db.write_many("cap", [Write.incr("capped", "n", 1, event_id=e) for e in ids[-10:]])
        early = db.write_many("cap", [Write.incr("capped", "n", 1, event_id=e) for e in ids[:10]])
        assert [o.status for o in late] == ["duplicate"] * 10  # still held
        assert [o.status for o in early] == ["applied"] * 10  # aged out by the cap
        assert db.get("cap", "capped", "n").value == b"110"  # type: ignore[union-attr]
    # Every replica holds the same ids, as many as the cap in that shard.
    held = wait_for(lambda: (h := _node_event_ids(ic, d.id)) and len(set(h.values())) == 1 and h, 30,
                    "the replicas to apply the same records")
    assert set(held.values()) == {40}

    def describe() -> dict:
        out = subprocess.run([sys.executable, "-m", "cli", "dataset", "describe", "cap", "--zk",
                              ic.zk_hosts, "--json"], capture_output=True, text=True, timeout=60,
                             check=True).stdout
        return json.loads(out)  # type: ignore[no-any-return]

    # The nodes publish what they hold every few seconds: describe shows it once published. The
    # effective window is the age of the oldest id the full shard holds, which grows with log time.
    desc = wait_for(lambda: (d := describe())["effective_dedup_window_ms"] < hour and d, 180,
                    "describe to show the window the cap left", every_s=1)
    assert desc["dedup_max_ids"] == 40 and desc["event_ids"] == 40
    assert desc["warning"].startswith("effective dedup window ")
    assert "raise --dedup-max-ids" in desc["warning"]
