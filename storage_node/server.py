"""The storage node process: python -m storage_node.server --id 0 --port P --zk ZK --data DIR"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import Any

import grpc

from fleet import machines
from log import limits as log_limits
from log.client import LocalLog, LogLink
from midtown_pb import kv_pb2 as pb
from runtime import handlers, inprocess, metrics, transport
from runtime.health import serve_health
from runtime.process import log_to_stderr, serve_until_signal, trace_from_env, tune_runtime
from storage_node import checks
from storage_node.callbacks import AnswerLink
from storage_node.node import StorageNode
from storage_node.settings import Settings


def service_handlers(node: StorageNode) -> grpc.GenericRpcHandler:
    """The Storage service: each request checked at the edge (storage_node/checks.py), then
    each method through runtime/handlers.py, which turns the node's refusals (Behind:
    another replica may answer; BadRequest naming the field; a shard moved away or a
    position reclaimed, mid-stream too) into statuses."""
    def unary(name: str, cls: Any, fn: Callable[[Any], Any]) -> grpc.RpcMethodHandler:
        return handlers.unary(name, cls, lambda req, ctx: fn(checks.request(req)))

    def stream(name: str, cls: Any, fn: Callable[[Any], Iterator[Any]]) -> grpc.RpcMethodHandler:
        return handlers.unary_stream(name, cls, lambda req, ctx: fn(checks.request(req)))

    return grpc.method_handlers_generic_handler("midtown.kv.v1.Storage", {
        "Watch": stream("Watch", pb.StorageWatchRequest, node.watch),
        "ScanShard": stream("ScanShard", pb.StorageScanShardRequest, node.scan_shard),
        "ShardSplits": unary("ShardSplits", pb.StorageShardSplitsRequest, node.shard_splits),
        "Read": unary("Read", pb.ReadRequest, node.read),
        "ReadMany": unary("ReadMany", pb.ReadManyRequest, node.read_many),
        "Status": unary("Status", pb.NodeStatusRequest, node.status),
        "CopyShard": unary("CopyShard", pb.CopyShardRequest, node.copy_shard),
        "LwwWrite": unary("LwwWrite", pb.LwwWriteRequest, node.lww_write),
        "LwwRead": unary("LwwRead", pb.LwwReadRequest, node.lww_read),
        "LwwRange": unary("LwwRange", pb.LwwRangeRequest, node.lww_range),
        "LwwHashes": unary("LwwHashes", pb.LwwHashesRequest, lambda _: node.lww_hashes()),
        "Snapshot": stream("Snapshot", pb.SnapshotRequest, node.snapshot),
    })


THREADS = 128  # the gRPC server's workers


def build(node_id: int, addr: str, zk_hosts: str, data_dir: str,
          log_link: LogLink | None = None, local_log: inprocess.Local[LocalLog] | None = None,
          answers: AnswerLink | None = None) -> tuple[grpc.Server, StorageNode]:
    """A storage node's gRPC server (not listening yet) and the node (not started)."""
    node = StorageNode.open(node_id, addr, zk_hosts, data_dir, Settings.from_env(),
                            log_link=log_link, local_log=local_log, answers=answers)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=THREADS), options=log_limits.GRPC_OPTIONS)
    server.add_generic_rpc_handlers([service_handlers(node)])
    return server, node


def add_health(server: grpc.Server, node: StorageNode) -> None:
    """Health (SERVING once registered and caught up with its logs) and reflection."""
    serve_health(server, ["midtown.kv.v1.Storage"], node.ready, node.state.stop, THREADS)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m storage_node.server")
    ap.add_argument("--id", type=int, required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--zk", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--advertise")
    ap.add_argument("--metrics-port", type=int, default=0, help="serve Prometheus metrics (0: off)")
    transport.add_flags(ap)
    machines.add_flags(ap)
    a = ap.parse_args(argv)
    transport.use_flags(ap, a)
    domain = machines.flags_domain(ap, a)
    metrics.serve(a.metrics_port, a.host)
    log_to_stderr(f"storage-{a.id}")
    tune_runtime()
    trace_from_env(f"storage node {a.id}")
    machines.claim_at_start(a.zk, [(machines.STORAGE_NODES, a.id)], domain)
    listen = f"{a.host}:{a.port}"
    server, node = build(a.id, a.advertise or listen, a.zk, a.data)
    add_health(server, node)
    serve_until_signal(server, listen, f"storage node {a.id} ready on {listen}", node.start,
                       node.stop, name="storage node")


if __name__ == "__main__":
    main()
