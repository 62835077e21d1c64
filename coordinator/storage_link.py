"""The coordinator's network port to the storage nodes: a Storage call, or a stream, to
the node at an address. Backends: `GrpcStorage`, any node by gRPC (a stub per address);
`ProcessStorage`, the storage node of this process called directly (the host layout,
coordinator/host.py), the others through the backend it wraps. coordinator/replicas.py
decides whom to call; a backend only carries the call."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from midtown_pb import kv_pb2 as pb
from midtown_pb import kv_pb2_grpc
from runtime import inprocess
from runtime.stubs import Calls, Stubs

# Storage calls a storage node in this process answers directly: its method, and the path
# counted in midtown_in_process_calls_total (none for eventual datasets' calls).
_IN_PROCESS = {"Read": ("read", "read"), "ReadMany": ("read_many", "read"),
               "ShardSplits": ("shard_splits", ""),
               "LwwWrite": ("lww_write", ""), "LwwRead": ("lww_read", ""),
               "ScanShard": ("scan_shard", ""), "Watch": ("watch", "")}  # the last two: streams


class LocalStorage(Protocol):
    """The storage node of this process, as a coordinator calls it in place of its Storage
    service (coordinator/host.py binds one): the port, not the node."""
    @property
    def node_id(self) -> int: ...

    def read(self, req: pb.ReadRequest) -> pb.ReadResponse: ...

    def read_many(self, req: pb.ReadManyRequest) -> pb.ReadManyResponse: ...

    def shard_splits(self, req: pb.StorageShardSplitsRequest) -> pb.ShardSplitsResponse: ...

    def lww_write(self, req: pb.LwwWriteRequest) -> pb.LwwWriteResponse: ...

    def lww_read(self, req: pb.LwwReadRequest) -> pb.LwwReadResponse: ...

    def scan_shard(self, req: pb.StorageScanShardRequest) -> Iterator[pb.ScanShardResponse]: ...

    def watch(self, req: pb.StorageWatchRequest) -> Iterator[pb.WatchResponse]: ...

    def applies_in_process(self, log_id: int) -> bool: ...


class StorageLink(Calls, Protocol):
    """A Storage call or stream (runtime/stubs.py; a node in this process may raise a
    Refusal instead of grpc.RpcError), and where the nodes are."""

    def near(self, addr: str) -> bool:
        """Whether the node at `addr` answers without a network hop (read from first)."""

    def beside(self, log_id: int) -> int | None:
        """The id of the storage node of this process if it applies `log_id` as this
        process's log writer commits it (Coordinator.answered_beside), else None."""


class GrpcStorage(Stubs):
    def __init__(self) -> None:
        super().__init__(kv_pb2_grpc.StorageStub)

    def near(self, addr: str) -> bool:
        return False

    def beside(self, log_id: int) -> int | None:
        return None


class ProcessStorage:
    """The storage node of this process at `addr`, called directly; the others through `others`."""

    def __init__(self, node: LocalStorage, addr: str, others: StorageLink) -> None:
        self.node, self.addr, self.others = node, addr, others

    def call(self, addr: str, method: str, req: Any, timeout_s: float) -> Any:
        if addr != self.addr:
            return self.others.call(addr, method, req, timeout_s)
        name, path = _IN_PROCESS[method]
        if path:
            inprocess.used(path)
        return getattr(self.node, name)(req)

    def stream(self, addr: str, method: str, req: Any, timeout_s: float) -> tuple[Iterator[Any], Any]:
        if addr != self.addr:
            return self.others.stream(addr, method, req, timeout_s)
        return iter(getattr(self.node, _IN_PROCESS[method][0])(req)), None

    def near(self, addr: str) -> bool:
        return addr == self.addr

    def beside(self, log_id: int) -> int | None:
        return self.node.node_id if self.node.applies_in_process(log_id) else None
