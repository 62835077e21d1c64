"""Bad input to a running coordinator: a clear status naming the field, no crash, nothing
lost. Hypothesis throws generated requests at it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cluster import Cluster
from coordinator import limits
from midtown import Client, Op, errors
from midtown_pb import kv_pb2 as pb
from midtown_pb import kv_pb2_grpc
from tests.integration.conftest import started

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def kvc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    # Three key-value logs, as `cluster init` makes them (a local cluster uses one).
    with started(Path(tmp_path_factory.mktemp("kvbad")) / "c", kv_logs=3) as c:
        c.create_dataset("d")
        c.create_dataset("e", consistency="eventual")
        c.create_dataset("locked", acl={"nobody": "rw"})
        c.create_dataset("full", quota_bytes=1)  # full after its first write
        yield c


@pytest.fixture(scope="module")
def cl(kvc: Cluster) -> Iterator[Client]:
    with Client(kvc.coordinator_addrs, timeout=15) as c:
        yield c


def _raw(addr: str, method: str, body: bytes, service: str = "KV") -> tuple[str, str]:
    ch = grpc.insecure_channel(addr, options=[("grpc.max_send_message_length", 64 << 20)])
    try:
        ch.unary_unary(f"/midtown.kv.v1.{service}/{method}", request_serializer=lambda b: b,
                       response_deserializer=lambda b: b)(body, timeout=15)
        return "OK", ""
    except grpc.RpcError as e:
        return e.code().name, e.details() or ""
    finally:
        ch.close()


@pytest.mark.parametrize("call,exc,field", [
    (lambda c: c.get("nope", "p", "k"), errors.NotFound, "header.dataset"),
    (lambda c: c.put("d", "", "k", b"v"), errors.InvalidArgument, "key.partition"),
    (lambda c: c.put("d", "p" * (limits.PARTITION_KEY_BYTES_MAX + 1), "k", b"v"),
     errors.InvalidArgument, "key.partition"),
    (lambda c: c.put("d", "p", "k" * (limits.LOCAL_KEY_BYTES_MAX + 1), b"v"),
     errors.InvalidArgument, "key.local"),
    (lambda c: c.put("d", "p", "k", b"v" * (limits.VALUE_BYTES_MAX + 1)), errors.InvalidArgument, "value"),
    (lambda c: c.put("d", "p", "k", b"v", ttl_ms=limits.TTL_MS_MAX + 1), errors.InvalidArgument, "ttl_ms"),
    (lambda c: c.cas("d", "p", "k", b"v"), errors.InvalidArgument, "expect"),
    (lambda c: c.batch("d", [Op.put("p", "a", b"1"), Op.put("q", "b", b"2")]),
     errors.InvalidArgument, "ops[1].partition"),
    (lambda c: c.batch("d", []), errors.InvalidArgument, "ops"),
    (lambda c: c.scan("d", "p", limit=limits.SCAN_LIMIT_MAX + 1), errors.InvalidArgument, "limit"),
    (lambda c: c.put("d", "p", "k", b"v", request_id=b"x" * 65), errors.InvalidArgument,
     "header.request_id"),
])
def test_errors_name_the_field(cl: Client, call, exc, field) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(exc) as ei:
        call(cl)
    assert field in ei.value.message


def test_wrong_types_and_malformed_bytes(kvc: Cluster) -> None:
    addr = kvc.coordinator_addrs[0]
    code, msg = _raw(addr, "Put", b"\xff\xfe garbage")
    assert code == "INVALID_ARGUMENT" and "request" in msg
    # A batch op with no operation set, and a scan inside a batch.
    body = pb.BatchRequest(header=pb.RequestHeader(dataset="d"), partition_key=b"p",
                           ops=[pb.Op()]).SerializeToString()
    assert _raw(addr, "Batch", body)[0] == "INVALID_ARGUMENT"
    body = pb.BatchRequest(header=pb.RequestHeader(dataset="d"), partition_key=b"p",
                           ops=[pb.Op(scan=pb.ScanOp())]).SerializeToString()
    code, msg = _raw(addr, "Batch", body)
    assert code == "INVALID_ARGUMENT" and "ops[0]" in msg
    # Over gRPC's message limit: refused before the coordinator sees it.
    big = pb.PutRequest(header=pb.RequestHeader(dataset="d"), key=pb.Key(partition=b"p"),
                        value=b"x" * (40 << 20)).SerializeToString()
    assert _raw(addr, "Put", big)[0] == "RESOURCE_EXHAUSTED"


def _gen_request() -> st.SearchStrategy[tuple[str, bytes]]:
    key = st.builds(pb.Key, partition=st.binary(max_size=20), local=st.binary(max_size=20))
    hdr = st.builds(pb.RequestHeader, dataset=st.sampled_from(["d", "e", "locked", "full", "nope", "", "D!"]),
                    request_id=st.binary(max_size=80))
    return st.one_of(
        st.tuples(st.just("Get"), st.builds(lambda h, k, c: pb.GetRequest(header=h, key=k, consistency=c)
                                            .SerializeToString(), hdr, key, st.integers(0, 1))),
        st.tuples(st.just("Put"), st.builds(
            lambda h, k, v, t: pb.PutRequest(header=h, key=k, value=v, ttl_ms=t).SerializeToString(),
            hdr, key, st.binary(max_size=50), st.integers(0, 2**64 - 1))),
        st.tuples(st.just("Increment"), st.builds(
            lambda h, k, d: pb.IncrementRequest(header=h, key=k, delta=d).SerializeToString(),
            hdr, key, st.integers(-(2**63), 2**63 - 1))),
        st.tuples(st.just("Scan"), st.builds(
            lambda h, p, lim: pb.ScanRequest(header=h, partition_key=p, limit=lim).SerializeToString(),
            hdr, st.binary(max_size=10), st.integers(0, 5000))),
        st.tuples(st.sampled_from(["Get", "Put", "Delete", "CheckAndSet", "Increment", "Batch", "Scan"]),
                  st.binary(max_size=100)),
    )


ALLOWED = {"OK", "INVALID_ARGUMENT", "NOT_FOUND", "FAILED_PRECONDITION", "OUT_OF_RANGE",
           "UNAUTHENTICATED"}


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
@given(req=_gen_request())
def test_generated_requests(kvc: Cluster, req: tuple[str, bytes]) -> None:
    code, msg = _raw(kvc.coordinator_addrs[0], req[0], req[1])
    full = code == "RESOURCE_EXHAUSTED" and "'full'" in msg and "storage quota" in msg
    assert code in ALLOWED or full, (code, msg)
    if code != "OK":
        assert msg


def _gen_many() -> st.SearchStrategy[pb.ManyRequest]:
    """Coalesced calls (KV.Many) of generated items, some with no call in them."""
    key = st.builds(pb.Key, partition=st.binary(max_size=20), local=st.binary(max_size=20))
    hdr = st.builds(pb.RequestHeader, dataset=st.sampled_from(["d", "e", "locked", "full", "nope", "", "D!"]),
                    request_id=st.binary(max_size=80), first_attempt=st.booleans())
    item = st.one_of(
        st.builds(lambda h, k, c: pb.ManyItem(get=pb.GetRequest(header=h, key=k, consistency=c)),
                  hdr, key, st.integers(0, 1)),
        st.builds(lambda h, k, v, t: pb.ManyItem(put=pb.PutRequest(header=h, key=k, value=v, ttl_ms=t)),
                  hdr, key, st.binary(max_size=50), st.integers(0, 2**64 - 1)),
        st.builds(lambda h, k: pb.ManyItem(delete=pb.DeleteRequest(header=h, key=k)), hdr, key),
        st.builds(lambda h, k, e, n: pb.ManyItem(check_and_set=pb.CheckAndSetRequest(
            header=h, key=k, expected_value=e, new_value=n)), hdr, key, st.binary(max_size=5),
            st.binary(max_size=5)),
        st.builds(lambda h, k, d: pb.ManyItem(increment=pb.IncrementRequest(header=h, key=k, delta=d)),
                  hdr, key, st.integers(-(2**63), 2**63 - 1)),
        st.just(pb.ManyItem()),
    )
    return st.builds(lambda items: pb.ManyRequest(items=items), st.lists(item, max_size=8))


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(req=_gen_many(), garbage=st.binary(max_size=100))
def test_generated_coalesced_calls(kvc: Cluster, req: pb.ManyRequest, garbage: bytes) -> None:
    """Each item of a coalesced call is answered as its own call would be: an allowed code,
    and a message with every refusal; malformed calls are refused whole."""
    code, msg = _raw(kvc.coordinator_addrs[0], "Many", garbage)
    assert code in ALLOWED and (code == "OK" or msg), (code, msg)
    stub = kv_pb2_grpc.KVStub(grpc.insecure_channel(kvc.coordinator_addrs[0]))
    try:
        answers = stub.Many(req, timeout=15).answers
    except grpc.RpcError as e:
        assert not req.items and e.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "items" in (e.details() or "")
        return
    assert len(answers) == len(req.items)
    for i, (item, a) in enumerate(zip(req.items, answers)):
        name = grpc.StatusCode.OK.name if a.code == 0 else next(
            c.name for c in grpc.StatusCode if c.value[0] == a.code)
        full = name == "RESOURCE_EXHAUSTED" and "'full'" in a.message and a.refused == "quota"
        assert name in ALLOWED or full, (name, a.message)
        if a.code:
            assert a.message
        else:
            assert a.WhichOneof("response") == item.WhichOneof("call")
        if item.WhichOneof("call") is None:
            assert name == "INVALID_ARGUMENT" and a.message.startswith(f"items[{i}]")


def _gen_storage_request() -> st.SearchStrategy[tuple[str, bytes]]:
    value = st.builds(pb.LwwValue, value=st.binary(max_size=20), version=st.integers(0, 2**64 - 1),
                      expires_at_ms=st.integers(0, 2**64 - 1), deleted=st.booleans())
    # Dataset ids past the key layout's 255 bytes too (they once ended in INTERNAL).
    dataset = st.one_of(st.text(max_size=10), st.text(min_size=200, max_size=300))
    common = dict(dataset=dataset, shard=st.integers(0, 2**32 - 1), partition_key=st.binary(max_size=20))
    return st.one_of(
        st.tuples(st.just("LwwWrite"), st.builds(
            lambda r: r.SerializeToString(),
            st.builds(pb.LwwWriteRequest, local_key=st.binary(max_size=20), value=value, **common))),
        st.tuples(st.just("LwwRead"), st.builds(
            lambda r: r.SerializeToString(),
            st.builds(pb.LwwReadRequest, scan=st.booleans(), local_key=st.binary(max_size=20),
                      start=st.binary(max_size=5), end=st.binary(max_size=5),
                      limit=st.integers(0, 2**32 - 1), **common))),
        st.tuples(st.just("LwwRange"), st.builds(
            lambda r: r.SerializeToString(),
            st.builds(pb.LwwRangeRequest, shard=st.integers(0, 2**32 - 1), after=st.binary(max_size=12),
                      limit=st.integers(0, 2**32 - 1)))),
        st.tuples(st.just("ShardSplits"), st.builds(
            lambda r: r.SerializeToString(),
            st.builds(pb.StorageShardSplitsRequest, dataset=dataset, shard=st.integers(0, 2**32 - 1),
                      split_bytes=st.integers(0, 2**64 - 1), wait_ms=st.integers(0, 100)))),
        st.tuples(st.just("ScanShard"), st.builds(
            lambda r: r.SerializeToString(),
            st.builds(pb.StorageScanShardRequest, dataset=dataset, shard=st.integers(0, 2**32 - 1),
                      page=st.integers(0, 2**32 - 1), wait_ms=st.integers(0, 100),
                      cursor=st.binary(max_size=20)))),
        st.tuples(st.just("Read"), st.builds(
            lambda r: r.SerializeToString(),
            st.builds(pb.ReadRequest, dataset=dataset, shard=st.integers(0, 2**32 - 1),
                      partition_key=st.binary(max_size=20),
                      op=st.just(pb.Op(get=pb.GetOp(local_key=b"k")))))),
        st.tuples(st.sampled_from(["LwwWrite", "LwwRead", "LwwRange", "Read", "ReadMany", "Status",
                                   "ShardSplits", "ScanShard", "Watch", "Snapshot", "CopyShard"]),
                  st.binary(max_size=100)),
    )


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
@given(req=_gen_storage_request())
def test_generated_storage_requests(kvc: Cluster, req: tuple[str, bytes]) -> None:
    code, msg = _raw(kvc.playing("storage-node")[0].addr, req[0], req[1], service="Storage")
    assert code in ALLOWED, (code, msg)
    if code != "OK":
        assert msg


def test_a_request_id_used_before_by_another_request_is_refused_naming_it(kvc: Cluster) -> None:
    """A request id is kept with its request's first outcome. Used again by another kind of
    request, that outcome cannot answer it: FAILED_PRECONDITION naming header.request_id,
    never an internal error (found by the coalesced-calls test under load: a get through
    the log, then an increment under the same id)."""
    stub = kv_pb2_grpc.KVStub(grpc.insecure_channel(kvc.coordinator_addrs[0]))

    def hdr(rid: bytes) -> pb.RequestHeader:
        return pb.RequestHeader(dataset="d", request_id=rid)

    def key(local: bytes = b"") -> pb.Key:
        return pb.Key(partition=b"ru", local=local)
    stub.Put(pb.PutRequest(header=hdr(b"reused-1"), key=key(b"a"), value=b"text"), timeout=15)
    stub.Delete(pb.DeleteRequest(header=hdr(b"reused-2"), key=key(b"b")), timeout=15)
    for call, req in ((stub.Increment, pb.IncrementRequest(header=hdr(b"reused-1"), key=key(), delta=1)),
                      (stub.Put, pb.PutRequest(header=hdr(b"reused-2"), key=key(), value=b"v")),
                      (stub.Increment, pb.IncrementRequest(header=hdr(b"reused-2"), key=key()))):
        with pytest.raises(grpc.RpcError) as ei:
            call(req, timeout=15)
        assert ei.value.code() == grpc.StatusCode.FAILED_PRECONDITION, ei.value.details()
        assert (ei.value.details() or "").startswith("header.request_id: used before by another request")
    # A retry of the same request under its id still gets its first outcome.
    again = stub.Put(pb.PutRequest(header=hdr(b"reused-1"), key=key(b"a"), value=b"text"), timeout=15)
    assert again.version > 0


def test_still_serving_and_nothing_lost(kvc: Cluster, cl: Client) -> None:
    assert all(p.alive() for p in kvc.procs.values())
    assert cl.put("e", "keep", "k", b"safe") > 0 and cl.get("e", "keep", "k").value == b"safe"  # type: ignore[union-attr]
    v = cl.put("d", "keep", "k", b"safe")
    got = cl.get("d", "keep", "k")
    assert got is not None and got.value == b"safe" and got.version == v


def test_dataset_rate_limit(kvc: Cluster) -> None:
    import time

    kvc.create_dataset("limited", rate_limit=5)
    with Client(kvc.coordinator_addrs, timeout=15, retries=0) as c:
        refused = []
        for i in range(30):
            try:
                c.put("limited", "p", str(i), b"v")
            except errors.ResourceExhausted as e:
                refused.append(e.message)
        assert refused and all("limit of 5 requests/s" in m and "header.dataset" in m for m in refused)
        assert len(refused) >= 15
        time.sleep(1.2)
        assert c.put("limited", "p", "after", b"v") >= 1
    # The SDK's retries ride over the limit with backoff.
    with Client(kvc.coordinator_addrs, timeout=30) as c:
        for i in range(12):
            c.put("limited", "q", str(i), b"v")


def test_storage_reads_refuse_bad_input(kvc: Cluster) -> None:
    addr = kvc.of_kind("storage-node")[0].addr
    get = pb.Op(get=pb.GetOp(local_key=b"k"))
    cases = [
        ("Read", b"\xff\xfe", "request"),
        ("Read", pb.ReadRequest(dataset="d", shard=10_000, op=get).SerializeToString(), "shard"),
        ("Read", pb.ReadRequest(dataset="d", shard=0, op=pb.Op(put=pb.PutOp())).SerializeToString(), "op"),
        ("ReadMany", pb.ReadManyRequest(log_id=999).SerializeToString(), "log_id"),
        ("ReadMany", pb.ReadManyRequest(log_id=3).SerializeToString(), "log_id"),  # no KV data
        # With three key-value logs, shard 1 is on log 1.
        ("ReadMany", pb.ReadManyRequest(log_id=0, requests=[pb.ReadRequest(shard=1, op=get)])
         .SerializeToString(), "requests[0].shard"),
        ("ReadMany", pb.ReadManyRequest(log_id=0, requests=[pb.ReadRequest(shard=0, op=pb.Op())])
         .SerializeToString(), "requests[0].op"),
        # Eventually consistent datasets' replica calls.
        ("LwwWrite", b"\xff\xfe", "request"),
        ("LwwWrite", pb.LwwWriteRequest(shard=0, value=pb.LwwValue(value=b"v")).SerializeToString(),
         "value.version"),
        ("LwwWrite", pb.LwwWriteRequest(shard=10_000, value=pb.LwwValue(version=1)).SerializeToString(),
         "shard"),
        ("LwwRead", pb.LwwReadRequest(shard=10_000).SerializeToString(), "shard"),
        ("LwwRead", pb.LwwReadRequest(shard=0, scan=True, limit=0).SerializeToString(), "limit"),
        ("LwwRange", pb.LwwRangeRequest(shard=0, limit=0).SerializeToString(), "limit"),
        ("LwwRange", pb.LwwRangeRequest(shard=10_000, limit=5).SerializeToString(), "shard"),
        ("LwwRange", pb.LwwRangeRequest(shard=0, after=b"Kxyz", limit=5).SerializeToString(), "after"),
        # A dataset id longer than a key keeps (storage_node/checks.py): it was INTERNAL.
        ("LwwRead", pb.LwwReadRequest(dataset="x" * 300, shard=0).SerializeToString(), "dataset: 300 bytes"),
        ("ShardSplits", pb.StorageShardSplitsRequest(dataset="é" * 200, shard=0).SerializeToString(),
         "dataset: 400 bytes"),
        ("ReadMany", pb.ReadManyRequest(log_id=0, requests=[
            pb.ReadRequest(dataset="y" * 256, shard=0, op=get)]).SerializeToString(), "requests[0].dataset"),
    ]
    for method, body, field in cases:
        code, msg = _raw(addr, method, body, service="Storage")
        assert code == "INVALID_ARGUMENT" and field in msg, (method, field, code, msg)


def test_clients_cannot_send_position_records(kvc: Cluster) -> None:
    body = pb.BatchRequest(header=pb.RequestHeader(dataset="d"), partition_key=b"p",
                           ops=[pb.Op(position=pb.PositionOp(node_id=0, position=10**9))])
    code, msg = _raw(kvc.coordinator_addrs[0], "Batch", body.SerializeToString())
    assert code == "INVALID_ARGUMENT" and "ops[0]" in msg


def test_admin_commands_name_the_bad_field(kvc: Cluster) -> None:
    import subprocess
    import sys

    def mt(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "cli", *args, "--zk", kvc.zk_hosts],
                              capture_output=True, text=True, timeout=60, check=False)

    for args, needle in [
        (("node", "remove", "7"), "ID"),
        (("cluster", "init", "--log-servers", "a,b"), "--log-servers"),
        (("dataset", "create", "rl", "--rate-limit", "-1"), "rate_limit"),
        (("dataset", "create", "ev", "--consistency", "causal"), "consistency"),
        (("dataset", "describe", "missing"), "NAME"),
    ]:
        p = mt(*args)
        assert p.returncode == 2 and needle in p.stderr, (args, p.stderr)
        assert "Traceback" not in p.stderr


def test_access_lists_refuse_unknown_and_unauthorized_callers(kvc: Cluster) -> None:
    """A dataset with an access list: no token is UNAUTHENTICATED, a wrong one too, a
    reader cannot write, a grant takes effect, a removed user's token stops working;
    datasets without a list stay open."""
    import time

    from catalog import users
    from log import zk as zkpaths
    from tests.integration.conftest import wait_for

    zk = zkpaths.connect(kvc.zk_hosts)
    try:
        alice, bob = users.add(zk, "alice"), users.add(zk, "bob")
        with pytest.raises(ValueError, match="USER: user 'bob' already exists"):
            users.add(zk, "bob")
    finally:
        zk.stop()
    kvc.create_dataset("secret", acl={"alice": "rw", "bob": "r"})
    addrs = kvc.coordinator_addrs
    with Client(addrs, timeout=10, retries=0) as anon, \
            Client(addrs, timeout=10, retries=0, token=alice) as a, \
            Client(addrs, timeout=10, retries=0, token=bob) as b, \
            Client(addrs, timeout=10, retries=0, token="not-a-token") as forged:
        with pytest.raises(errors.Unauthenticated, match="has an access list"):
            anon.put("secret", "p", "k", b"v")
        with pytest.raises(errors.Unauthenticated, match="has an access list"):
            anon.get("secret", "p", "k")
        with pytest.raises(errors.Unauthenticated, match="unknown token"):
            forged.get("secret", "p", "k")
        a.put("secret", "p", "k", b"v")
        assert b.get("secret", "p", "k").value == b"v"  # type: ignore[union-attr]
        assert [i.local_key for i in b.scan("secret", "p").items] == [b"k"]
        for write in (lambda: b.put("secret", "p", "k", b"w"), lambda: b.delete("secret", "p", "k"),
                      lambda: b.incr("secret", "p", "n"),
                      lambda: b.cas("secret", "p", "k", b"w", expected=b"v")):
            with pytest.raises(errors.PermissionDenied, match="user 'bob' may not write to dataset 'secret'"):
                write()
        # Datasets without an access list take anyone's calls, with or without a token.
        kvc.create_dataset("public")
        anon.put("public", "p", "k", b"v")
        assert b.get("public", "p", "k") is not None
        # A grant reaches the coordinators within their dataset cache's second.
        zk = zkpaths.connect(kvc.zk_hosts)
        try:
            from catalog import datasets

            datasets.grant(zk, "secret", "bob", "rw")
            wait_for(lambda: _ok(lambda: b.put("secret", "p", "k", b"from bob")), 10, "bob's grant")
            users.remove(zk, "alice")
        finally:
            zk.stop()
        time.sleep(0.2)
        wait_for(lambda: not _ok(lambda: a.get("secret", "p", "k")), 10, "alice's token to stop working")


def _ok(fn) -> bool:  # type: ignore[no-untyped-def]
    try:
        fn()
        return True
    except errors.MidtownError:
        return False


def test_access_lists_from_the_command_line(kvc: Cluster) -> None:
    import json
    import os
    import subprocess
    import sys

    def mt(*args: str, env: dict | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "cli", *args, "--zk", kvc.zk_hosts],
                              capture_output=True, text=True, timeout=60, check=False,
                              env={**os.environ, **(env or {})})

    added = mt("user", "add", "carol", "--json")
    assert added.returncode == 0, added.stderr
    token = json.loads(added.stdout)["token"]
    assert "carol" in mt("user", "list").stdout
    assert mt("dataset", "create", "cli-secret", "--acl", "carol=r").returncode == 0
    assert "carol=r" in mt("dataset", "describe", "cli-secret").stdout
    denied = mt("put", "cli-secret", "p", "k", "v")
    assert denied.returncode == 1 and "UNAUTHENTICATED" in denied.stderr
    reader = mt("put", "cli-secret", "p", "k", "v", "--token", token)
    assert reader.returncode == 1 and "PERMISSION_DENIED" in reader.stderr
    granted = mt("dataset", "grant", "cli-secret", "carol", "rw", "--json")
    assert json.loads(granted.stdout)["acl"] == "carol=rw"
    from tests.integration.conftest import wait_for

    wait_for(lambda: mt("put", "cli-secret", "p", "k", "v", env={"MIDTOWN_TOKEN": token})
             .returncode == 0, 10, "the grant")
    for args, needle in [(("dataset", "grant", "cli-secret", "carol", "admin"), "PERM"),
                         (("dataset", "create", "x", "--acl", "carol"), "--acl"),
                         (("user", "add", "carol"), "USER"), (("user", "remove", "nobody"), "USER"),
                         (("dataset", "grant", "no-such-set", "carol", "r"), "NAME")]:
        p = mt(*args)
        assert p.returncode != 0 and needle in p.stderr and "Traceback" not in p.stderr, (args, p.stderr)


def test_a_dropped_dataset_leaves_the_cache_at_once(kvc: Cluster) -> None:
    """A coordinator's dataset cache forgets every dataset when ZooKeeper says one was
    created or dropped, however long it would keep them otherwise (ten minutes here): a
    dataset dropped is refused at once, as docs/api.md promises."""
    from kazoo.client import KazooClient

    from catalog import datasets
    from tests.integration.conftest import wait_for

    zk = KazooClient(hosts=kvc.zk_hosts)
    zk.start(timeout=15)
    try:
        cache = datasets.DatasetCache(zk, ttl_s=600)
        cache.watch()
        datasets.create(zk, "short-lived")
        assert cache.get("short-lived") is not None  # held for ten minutes, but for the watch
        datasets.drop(zk, "short-lived")
        wait_for(lambda: cache.get("short-lived") is None, 10, "the drop seen by the cache")
    finally:
        zk.stop()
        zk.close()


def test_a_new_users_token_is_known_at_once(kvc: Cluster) -> None:
    """A coordinator's user cache reads the users again for an unknown token as soon as
    ZooKeeper says the list changed, whatever its rate limit for unknown tokens (one
    minute here): a user just added is not refused as unknown."""
    from kazoo.client import KazooClient

    from catalog import users
    from tests.integration.conftest import wait_for

    zk = KazooClient(hosts=kvc.zk_hosts)
    zk.start(timeout=15)
    try:
        cache = users.UserCache(zk, ttl_s=600, miss_s=60)
        cache.watch()
        assert cache.user("mt_not-a-token") is None  # loaded now: the next miss waits a minute
        token = users.add(zk, "dora")
        wait_for(lambda: cache.user(token) == "dora", 10, "the new user's token")
        assert cache.user("mt_still-not-a-token") is None
        users.remove(zk, "dora")
    finally:
        zk.stop()
        zk.close()


def test_the_largest_value_is_stored_through_every_path(kvc: Cluster, cl: Client, tmp_path: Path) -> None:
    """docs/api.md's value limit, exactly, under the longest keys: a put, a check-and-set,
    a batch, a bulk write (as columns and as a group) and the command line store it; one
    byte more is refused naming the value's field and the limit."""
    import subprocess
    import sys

    from midtown.client import Write

    big = b"v" * limits.VALUE_BYTES_MAX
    pk, lk = "p" * limits.PARTITION_KEY_BYTES_MAX, "k" * limits.LOCAL_KEY_BYTES_MAX
    v = cl.put("d", pk, lk, big)
    got = cl.get("d", pk, lk)
    assert got is not None and got.value == big and got.version == v
    assert cl.cas("d", pk, lk, big[:-1] + b"w", expected=big).succeeded
    assert cl.batch("d", [Op.put(pk, lk, big)]).applied
    outs = cl.write_many("d", [Write.put("bulk", lk, big, event_id="e1"),
                               Write([Op.put("bulk2", "a", big)], event_id="e2"),
                               Write.put("bulk", "small", b"x", event_id="e3")])
    assert [o.status for o in outs] == ["applied"] * 3, outs
    assert (cl.get("d", "bulk2", "a") or Stub).value == big
    f = tmp_path / "big.bin"
    f.write_bytes(big)
    p = subprocess.run([sys.executable, "-m", "cli", "put", "d", "cli", "k", f"@{f}",
                        "--zk", kvc.zk_hosts], capture_output=True, text=True, timeout=60, check=False)
    assert p.returncode == 0, p.stderr
    assert (cl.get("d", "cli", "k") or Stub).value == big
    for call, field in [(lambda: cl.put("d", "p", "k", big + b"x"), "value"),
                        (lambda: cl.cas("d", "p", "k", big + b"x", expect_absent=True), "new_value"),
                        (lambda: cl.batch("d", [Op.put("p", c, big) for c in "abc"]), "ops"),
                        (lambda: cl.write_many("d", [Write.put("p", "k", big + b"x")]), "values[0]")]:
        with pytest.raises(errors.InvalidArgument) as ei:
            call()
        assert field in ei.value.message and "the limit is" in ei.value.message, ei.value.message
    assert "request is" not in ei.value.message


class Stub:
    value = None
