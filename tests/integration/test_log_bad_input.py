"""Bad input gets a clear status naming the field; no process crashes."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest
from google.protobuf.message import Message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cluster import Cluster
from log import limits, linger
from log import zk as zkpaths
from log.client import LogClient
from midtown_pb import log_pb2 as pb
from tests.integration.conftest import started

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with started(tmp_path_factory.mktemp("bad-input") / "cluster", logs=16) as c:
        yield c


@pytest.fixture(scope="module")
def shared_client(shared_cluster: Cluster) -> Iterator[LogClient]:
    with LogClient(shared_cluster.zk_hosts) as c:
        yield c


def _raw_call(addr: str, method: str, body: bytes, stream: bool | str = False) -> tuple[str, str]:
    """`stream`: True for a response stream, "bidi" for a stream each way (one request)."""
    ch = grpc.insecure_channel(addr, options=[("grpc.max_send_message_length", 64 << 20)])
    raw = {"request_serializer": lambda b: b, "response_deserializer": lambda b: b}
    if stream == "bidi":
        bidi = ch.stream_stream(method, **raw)
        run = lambda: list(bidi(iter([body]), timeout=5))  # noqa: E731
    elif stream:
        call = ch.unary_stream(method, **raw)
        run = lambda: list(call(body, timeout=5))  # noqa: E731
    else:
        fn = ch.unary_unary(method, **raw)
        run = lambda: fn(body, timeout=5)  # noqa: E731
    try:
        run()
        return "OK", ""
    except grpc.RpcError as e:
        return e.code().name, e.details() or ""
    finally:
        ch.close()


def _writer_addr(client: LogClient, log_id: int) -> str:
    w = zkpaths.read_writer(client.zk, log_id)
    assert w is not None
    return str(w["addr"])


def test_append_errors_name_the_field(shared_client: LogClient) -> None:
    addr = _writer_addr(shared_client, 0)
    stub = shared_client.stub(addr)
    cases = [
        (pb.AppendRequest(log_id=99, payloads=[b"x"]), grpc.StatusCode.NOT_FOUND, "log_id"),
        (pb.AppendRequest(log_id=0, payloads=[]), grpc.StatusCode.INVALID_ARGUMENT, "payloads"),
        (pb.AppendRequest(log_id=0, payloads=[b"x", b"y" * (limits.PAYLOAD_BYTES_MAX + 1)]),
         grpc.StatusCode.INVALID_ARGUMENT, "payloads[1]"),
        (pb.AppendRequest(log_id=0, payloads=[b"z" * 1000] * (limits.BATCH_ENTRIES_MAX + 1)),
         grpc.StatusCode.INVALID_ARGUMENT, "payloads"),
        # the tags of a hand-off (log/seals.py): one shard per payload, none below -1, and
        # a record seals a shard or opens one, not both
        (pb.AppendRequest(log_id=0, payloads=[b"x", b"y"], shards=[1]), grpc.StatusCode.INVALID_ARGUMENT,
         "shards: 1 shards for 2 payloads"),
        (pb.AppendRequest(log_id=0, payloads=[b"x"], shards=[-2]), grpc.StatusCode.INVALID_ARGUMENT,
         "shards: a shard is 0 or more"),
        (pb.AppendRequest(log_id=0, payloads=[b"x"], shards=[1], generations=[1, 2]),
         grpc.StatusCode.INVALID_ARGUMENT, "generations: 2 generations for 1 shards"),
        (pb.AppendRequest(log_id=0, payloads=[b"x"], seal=pb.Seal(shard=1, to=2), open=pb.Open(shard=1)),
         grpc.StatusCode.INVALID_ARGUMENT,
         "open: an append seals a shard or opens one"),
    ]
    for req, code, field in cases:
        with pytest.raises(grpc.RpcError) as ei:
            stub.Append(req, timeout=10)
        assert ei.value.code() == code, ei.value.details()
        assert field in (ei.value.details() or "")


def test_message_over_the_grpc_limit_is_resource_exhausted(shared_client: LogClient) -> None:
    addr = _writer_addr(shared_client, 0)
    body = pb.AppendRequest(log_id=0, payloads=[b"a" * (1 << 20)] * 40).SerializeToString()
    code, _ = _raw_call(addr, "/midtown.log.v1.Log/Append", body)
    assert code == "RESOURCE_EXHAUSTED"


def test_append_to_a_follower_redirects(shared_client: LogClient, shared_cluster: Cluster) -> None:
    w = zkpaths.read_writer(shared_client.zk, 3)
    assert w is not None
    other = next(p.addr for p in shared_cluster.log_servers() if p.server_id != w["server"])
    with pytest.raises(grpc.RpcError) as ei:
        shared_client.stub(other).Append(pb.AppendRequest(log_id=3, payloads=[b"x"]), timeout=5)
    assert ei.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    trailers = dict(ei.value.trailing_metadata())
    assert trailers["midtown-writer"] == w["addr"] and trailers["midtown-refused"] == "not-writer"
    # The client follows the redirect by itself.
    assert shared_client.append(3, [b"x"]).count == 1


def test_malformed_and_stale_replica_requests(shared_client: LogClient, shared_cluster: Cluster) -> None:
    addr = shared_cluster.log_servers()[0].addr
    code, msg = _raw_call(addr, "/midtown.log.v1.Log/Append", b"\xff\xff\xff")
    assert (code, "request" in msg) == ("INVALID_ARGUMENT", True)
    code, msg = _raw_call(addr, "/midtown.log.v1.Replica/Fence",
                          pb.FenceRequest(log_id=0, epoch=0).SerializeToString())
    assert (code, "epoch" in msg) == ("INVALID_ARGUMENT", True)
    # The replication stream parses each message as a Replicate call does.
    stream = "/midtown.log.v1.Replica/ReplicateStream"
    code, msg = _raw_call(addr, stream, b"\xff\xff\xff", stream="bidi")
    assert (code, "ReplicateRequest" in msg) == ("INVALID_ARGUMENT", True)
    too_many = pb.ReplicateRequest(
        requests=[pb.AddEntriesRequest(log_id=0)] * (limits.REPLICATE_MESSAGES_MAX + 1))
    code, msg = _raw_call(addr, stream, too_many.SerializeToString(), stream="bidi")
    assert (code, "requests" in msg) == ("INVALID_ARGUMENT", True)
    bad_epoch = pb.ReplicateRequest(requests=[pb.AddEntriesRequest(log_id=0, epoch=0)])
    code, msg = _raw_call(addr, stream, bad_epoch.SerializeToString(), stream="bidi")
    assert (code, "requests[0]: " in msg and "epoch" in msg) == ("INVALID_ARGUMENT", True), msg
    # A stale epoch is refused by the fencing rule, in the reply body.
    from midtown_pb import log_pb2_grpc

    stub_ch = grpc.insecure_channel(addr)
    shared_client.append(0, [b"honest"])
    # A new writer takes an epoch far ahead in ZooKeeper (a versioned write) and fences log
    # 0 there; requests at the old writer's epoch are now stale.
    meta, version = zkpaths.read_metadata(shared_client.zk, 0)
    assert zkpaths.cas_metadata(shared_client.zk, meta.bump(meta.writer, at_least=meta.epoch + 100),
                                version) is not None
    stale = log_pb2_grpc.ReplicaStub(stub_ch).Fence(
        pb.FenceRequest(log_id=0, epoch=meta.epoch + 100, segment_epoch=meta.epoch), timeout=5)
    assert stale.result == pb.OK
    rep2 = log_pb2_grpc.ReplicaStub(stub_ch).AddEntries(
        pb.AddEntriesRequest(log_id=0, epoch=meta.epoch, segment_epoch=meta.epoch,
                             entries=[pb.Entry(position=999, epoch=meta.epoch, timestamp_ms=1,
                                               payload=b"stale")]),
        timeout=5,
    )
    assert rep2.result == pb.FENCED and rep2.fenced_epoch == meta.epoch + 100
    stub_ch.close()
    # The writer of log 0 on that server is now fenced there; appends still complete
    # through the quorum of the two other replicas or a new writer after the failure.
    assert shared_client.append(0, [b"after fence"], timeout_s=60).count == 1


def test_an_epoch_zookeeper_never_issued_is_refused(shared_client: LogClient,
                                                    shared_cluster: Cluster) -> None:
    """One Fence with epoch 2**62 (the highest a message may carry) sent to one replica used
    to wedge the log: the next writer's epoch would not fit. A replica now takes only
    epochs ZooKeeper issued for the log."""
    from midtown_pb import log_pb2_grpc

    log_id = 6
    shared_client.append(log_id, [b"before"], timeout_s=30)
    meta, _ = zkpaths.read_metadata(shared_client.zk, log_id)
    for p in shared_cluster.log_servers():
        stub = log_pb2_grpc.ReplicaStub(grpc.insecure_channel(p.addr))
        for epoch in (2**62, meta.epoch + 1):
            for call, req in (
                ("Fence", pb.FenceRequest(log_id=log_id, epoch=epoch, segment_epoch=meta.epoch)),
                ("AddEntries", pb.AddEntriesRequest(log_id=log_id, epoch=epoch, segment_epoch=meta.epoch)),
                ("ReadRange", pb.ReadRangeRequest(log_id=log_id, epoch=epoch, segment_epoch=meta.epoch,
                                                  first=0, last=0)),
            ):
                with pytest.raises(grpc.RpcError) as ei:
                    getattr(stub, call)(req, timeout=10)
                assert ei.value.code() == grpc.StatusCode.FAILED_PRECONDITION, (call, ei.value.details())
                assert "never issued" in (ei.value.details() or ""), ei.value.details()
    # Nothing was fenced: the same writer goes on at the same epoch.
    r = shared_client.append(log_id, [b"after"], timeout_s=30)
    assert r.epoch == meta.epoch


def test_epochs_and_positions_out_of_range_are_refused(shared_client: LogClient,
                                                      shared_cluster: Cluster) -> None:
    """A peer request with an epoch or a position near 2**64 would fence a replica beyond
    any writer's reach, or overflow a reply: refused, and the log stays writable."""
    addr = shared_cluster.log_servers()[0].addr
    huge = 2**64 - 1
    cases: list[tuple[str, Message, str]] = [
        ("Fence", pb.FenceRequest(log_id=5, epoch=huge, segment_epoch=1), "epoch"),
        ("ReadRange", pb.ReadRangeRequest(log_id=5, epoch=huge, segment_epoch=1, first=0, last=0), "epoch"),
        ("ReadRange", pb.ReadRangeRequest(log_id=5, segment_epoch=huge, first=0, last=0), "segment_epoch"),
        ("ReadRange", pb.ReadRangeRequest(log_id=5, segment_epoch=1, first=2**63, last=huge), "range"),
        ("AddEntries", pb.AddEntriesRequest(log_id=5, epoch=huge, segment_epoch=1), "epoch"),
        ("AddEntries", pb.AddEntriesRequest(
            log_id=5, epoch=1, segment_epoch=1,
            entries=[pb.Entry(position=huge, epoch=1, timestamp_ms=1, payload=b"x")]), "position"),
    ]
    for method, req, field in cases:
        code, msg = _raw_call(addr, f"/midtown.log.v1.Replica/{method}", req.SerializeToString())
        assert code == "INVALID_ARGUMENT" and field in msg, (method, code, msg)
    assert shared_client.append(5, [b"still writable"], timeout_s=30).count == 1


def test_unknown_log_on_read_and_truncate(shared_client: LogClient, shared_cluster: Cluster) -> None:
    addr = shared_cluster.log_servers()[1].addr
    code, msg = _raw_call(addr, "/midtown.log.v1.Log/Read",
                          pb.ReadRequest(log_id=16).SerializeToString(), stream=True)
    assert code == "NOT_FOUND" and "log_id" in msg
    code, msg = _raw_call(addr, "/midtown.log.v1.Log/Truncate",
                          pb.TruncateRequest(log_id=1000).SerializeToString())
    assert code == "NOT_FOUND" and "log_id" in msg


def test_a_lingering_read_delivers_every_entry_in_order(shared_client: LogClient,
                                                        shared_cluster: Cluster) -> None:
    log_id = 9
    first = shared_client.append(log_id, [b"a0"], timeout_s=30).first_position
    shared_client.append(log_id, [b"a1"], timeout_s=30)
    big = [f"b{i}".encode() for i in range(linger.LINGER_ENTRIES_MAX + 44)]  # more than a full batch
    shared_client.append(log_id, big, timeout_s=30)
    shared_client.append(log_id, [b"a2"], timeout_s=30)
    want = [b"a0", b"a1", *big, b"a2"]
    addr = shared_client.writer_addr(log_id, refresh=True)
    stream = shared_client.stub(addr).Read(
        pb.ReadRequest(log_id=log_id, from_position=first, follow=True, max_entries=len(want),
                       linger_ms=linger.LINGER_MS_MAX), timeout=60)
    got = [e for r in stream for e in r.entries]
    assert [e.payload for e in got] == want
    assert [e.position for e in got] == list(range(first, first + len(want)))


def test_a_linger_over_the_bound_is_refused(shared_cluster: Cluster) -> None:
    addr = shared_cluster.log_servers()[0].addr
    code, msg = _raw_call(addr, "/midtown.log.v1.Log/Read",
                          pb.ReadRequest(log_id=1, follow=True, linger_ms=linger.LINGER_MS_MAX + 1)
                          .SerializeToString(), stream=True)
    assert code == "INVALID_ARGUMENT" and "linger_ms" in msg, (code, msg)


ALLOWED = {"OK", "INVALID_ARGUMENT", "NOT_FOUND", "FAILED_PRECONDITION", "OUT_OF_RANGE",
           "UNAVAILABLE", "RESOURCE_EXHAUSTED", "DEADLINE_EXCEEDED"}
METHODS = [
    ("/midtown.log.v1.Log/Append", False), ("/midtown.log.v1.Log/Read", True),
    ("/midtown.log.v1.Log/Truncate", False), ("/midtown.log.v1.Log/Status", False),
    ("/midtown.log.v1.Replica/ReadRange", False), ("/midtown.log.v1.Replica/ReplicateStream", "bidi"),
]


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    method=st.sampled_from(METHODS),
    body=st.one_of(
        st.binary(max_size=200),
        st.builds(lambda lg, ps: pb.AppendRequest(log_id=lg, payloads=ps).SerializeToString(),
                  st.integers(0, 2**32 - 1), st.lists(st.binary(max_size=50), max_size=5)),
        st.builds(lambda lg, ps, ss, gs, o: pb.AppendRequest(log_id=lg, payloads=ps, shards=ss,
                                                             generations=gs, open=pb.Open(shard=o))
                  .SerializeToString(),
                  st.integers(0, 20), st.lists(st.binary(max_size=5), max_size=3),
                  st.lists(st.integers(-2**31, 2**31 - 1), max_size=3),
                  st.lists(st.integers(0, 2**32 - 1), max_size=3), st.integers(0, 2**32 - 1)),
        st.builds(lambda lg, f, m, w: pb.ReadRequest(log_id=lg, from_position=f, max_entries=m,
                                                      linger_ms=w).SerializeToString(),
                  st.integers(0, 40), st.integers(0, 2**64 - 1), st.integers(1, 5),
                  st.one_of(st.just(0), st.integers(0, 2**32 - 1))),
        st.builds(lambda lg, b: pb.TruncateRequest(log_id=lg, before_position=b).SerializeToString(),
                  st.integers(0, 40), st.integers(0, 2**64 - 1)),
        st.builds(lambda lg, a, b: pb.ReadRangeRequest(log_id=lg, segment_epoch=1, first=a, last=b)
                  .SerializeToString(),
                  st.integers(0, 40), st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1)),
        st.builds(lambda lg, e: pb.ReadRangeRequest(log_id=lg, epoch=e, segment_epoch=1, first=0, last=0)
                  .SerializeToString(),
                  st.integers(0, 40), st.integers(0, 2**64 - 1)),
    ),
)
def test_generated_requests_get_clear_statuses(shared_cluster: Cluster, method: tuple[str, bool | str],
                                               body: bytes) -> None:
    addr = shared_cluster.log_servers()[0].addr
    code, msg = _raw_call(addr, method[0], body, stream=method[1])
    assert code in ALLOWED, (code, msg)
    if code not in ("OK", "UNAVAILABLE", "DEADLINE_EXCEEDED"):
        assert msg, "every error says what is wrong"


def test_servers_survived(shared_cluster: Cluster, shared_client: LogClient) -> None:
    assert all(p.alive() for p in shared_cluster.procs.values())
    for log_id in range(16):  # and no generated request left a log unwritable
        assert shared_client.append(log_id, [b"still here"], timeout_s=60).count == 1
