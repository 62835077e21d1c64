"""The host layout's in-process backends of the network ports (coordinator/storage_link.py
ProcessStorage, storage_node/callbacks.py ProcessAnswers): a call to the component of this
process goes straight to it, one to any other address through the backend it wraps, and
only the component of this process counts as near."""

from __future__ import annotations

from typing import Any

from coordinator.storage_link import GrpcStorage, ProcessStorage
from record.model import RecordResult
from runtime.inprocess import Local
from storage_node.callbacks import Callbacks, ProcessAnswers


class Node:
    node_id = 4

    def __init__(self, applies: bool) -> None:
        self.applies = applies
        self.calls: list[tuple[str, Any]] = []

    def read(self, req: Any) -> str:
        self.calls.append(("read", req))
        return "here"

    def scan_shard(self, req: Any) -> Any:
        self.calls.append(("scan_shard", req))
        return ["page-1", "page-2"]

    def applies_in_process(self, log_id: int) -> bool:
        return self.applies


class Others:
    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []

    def call(self, addr: str, method: str, req: Any, timeout_s: float) -> str:
        self.calls.append(("call", addr, method))
        return "there"

    def stream(self, addr: str, method: str, req: Any, timeout_s: float) -> Any:
        self.calls.append(("stream", addr, method))
        return iter(["far"]), "the call"

    def near(self, addr: str) -> bool:
        return False

    def beside(self, log_id: int) -> int | None:
        return None

    def send(self, addr: str, results: list[Any]) -> None:
        self.calls.append(("send", addr, tuple(r for r, _ in results)))


def test_storage_calls_to_this_process_go_straight_to_its_node() -> None:
    node, others = Node(applies=True), Others()
    link = ProcessStorage(node, "h:1", others)  # type: ignore[arg-type]
    assert link.call("h:1", "Read", "q", 1.0) == "here" and node.calls == [("read", "q")]
    it, call = link.stream("h:1", "ScanShard", "s", 1.0)
    assert list(it) == ["page-1", "page-2"] and call is None  # no gRPC call to cancel
    assert link.call("h:2", "Read", "q", 1.0) == "there"
    assert list(link.stream("h:2", "ScanShard", "s", 1.0)[0]) == ["far"]
    assert others.calls == [("call", "h:2", "Read"), ("stream", "h:2", "ScanShard")]
    assert link.near("h:1") and not link.near("h:2")
    assert link.beside(0) == 4 and ProcessStorage(Node(applies=False), "h:1", others).beside(0) is None  # type: ignore[arg-type]
    assert not GrpcStorage().near("h:1") and GrpcStorage().beside(0) is None


class Taker:
    def __init__(self) -> None:
        self.got: list[Any] = []

    def deliver(self, results: list[Any]) -> None:
        self.got += results


def test_answers_to_the_coordinator_of_this_process_are_handed_over_undecoded() -> None:
    taker, others = Taker(), Others()
    local: Local[Any] = Local()
    link = ProcessAnswers(local, others)  # type: ignore[arg-type]
    assert not link.near("c:1")  # not bound yet: the coordinator is built after the node
    local.bind(["c:1"], taker)
    r = RecordResult(b"r", log_id=0, position=3, shard=1, digest=9, node_id=4, applied=True)
    assert link.near("c:1") and not link.near("c:2")
    link.send("c:1", [(r, 7)])
    link.send("c:2", [(r, 7)])
    assert taker.got == [r] and others.calls == [("send", "c:2", (r,))]
    assert not Callbacks().near("c:1")
