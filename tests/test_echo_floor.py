"""The floor `midtown-bench kv` prints beside Midtown and etcd: a real echo server process,
called as the benchmark calls it, stopped by SIGTERM."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from bench import echo
from bench.kv import EchoFloor
from bench.loadgen import run_workload
from runtime import children
from runtime.disk import SyncedDb


def test_the_floor_answers_every_client_and_stops_cleanly() -> None:
    floor = EchoFloor()
    try:
        ops = floor.ops()
        assert echo.caller(floor.addr, b"abc")(0) == b"abc"
        r = run_workload(ops["cas"], 4, 0.3)
        assert r["errors"] == 0 and r["ops_per_s"] > 0
    finally:
        floor.stop()
    assert floor.proc.returncode == 0  # SIGTERM: a clean stop


@pytest.mark.parametrize("bad", ["", "x", "-1", "0", "65536"])
def test_the_floor_names_a_bad_port(bad: str) -> None:
    p = subprocess.run([sys.executable, "-m", "bench.echo", "--port", bad],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "--port" in p.stderr


def test_the_floor_for_coalesced_calls_answers_the_sdk_item_by_item() -> None:
    """The echo server's KV service, called by the SDK's coalescing Client as bench kv's
    floor_many does: every operation answered (a Many call item by item, nothing done)."""
    from bench.kv import midtown_ops
    from midtown import Client
    from midtown_pb import kv_pb2 as pb
    from midtown_pb import kv_pb2_grpc

    floor = EchoFloor()
    try:
        stub = kv_pb2_grpc.KVStub(grpc.insecure_channel(floor.addr))
        many = stub.Many(pb.ManyRequest(items=[pb.ManyItem(put=pb.PutRequest()),
                                               pb.ManyItem(check_and_set=pb.CheckAndSetRequest()),
                                               pb.ManyItem(get=pb.GetRequest())]), timeout=10)
        assert [a.WhichOneof("response") for a in many.answers] == ["put", "check_and_set", "get"]
        assert many.answers[1].check_and_set.succeeded
        empty = stub.Many(pb.ManyRequest(items=[pb.ManyItem()]), timeout=10).answers[0]
        assert empty.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
        assert empty.message.startswith("items[0]")
        ops = midtown_ops([floor.addr])
        r = run_workload(ops["cas"], 16, 0.5)
        assert r["errors"] == 0 and r["ops_per_s"] > 0
        with Client([floor.addr]) as c:
            assert c.put("d", "p", "k", b"v") == 0 and c.get("d", "p", "k") is None
    finally:
        floor.stop()


def test_the_replicated_floor_answers_only_once_its_follower_holds_the_bytes(tmp_path: Path) -> None:
    """bench kv's floor_replicated: the echo answers once its bytes are durable on itself and
    on the follower; with the follower paused, no answer comes."""
    with EchoFloor(tmp_path / "f") as follower, EchoFloor(tmp_path / "l", follower.addr) as leader:
        call = echo.caller(leader.addr, b"abc", timeout_s=10)
        assert call(0) == b"abc"
        r = run_workload(leader.ops()["cas"], 4, 0.3)
        assert r["errors"] == 0 and r["ops_per_s"] > 0
        children.pause(follower.proc, True)  # stopped when it returns: a follower still
        try:  # running for a few ms after the kill once answered for xyz (CI, two workers)
            with pytest.raises(grpc.RpcError):
                echo.caller(leader.addr, b"xyz", timeout_s=2)(0)
        finally:
            children.pause(follower.proc, False)
        assert call(1) == b"abc"
    # both hold what they answered for, in their own RocksDB
    for d in ("l", "f"):
        db = SyncedDb(str(tmp_path / d / "echo.db"))
        assert b"abc" in set(db.db.values())
        db.close()


@pytest.mark.parametrize("args, named", [
    (["--follower", "x:1"], "--follower"),  # a follower needs a local copy beside it
    (["--data", "D", "--follower", "nohost"], "--follower"),
    (["--data", "D", "--follower", "h:99999"], "--follower"),
    (["--data", "FILE"], "--data"),  # a file where a folder should be
])
def test_the_replicated_floor_names_a_bad_flag(tmp_path: Path, args: list[str], named: str) -> None:
    (tmp_path / "FILE").write_text("")
    args = [str(tmp_path / a) if a in ("D", "FILE") else a for a in args]
    p = subprocess.run([sys.executable, "-m", "bench.echo", "--port", "5", *args],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and named in p.stderr, p.stderr
