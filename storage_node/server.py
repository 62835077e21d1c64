"""The storage node process: python -m storage_node.server --id 0 --port P --zk ZK --data DIR"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from log import limits as log_limits
from log.client import LocalAppends
from log.node import Node
from midtown_pb import kv_pb2 as pb
from record.model import Behind
from runtime import inprocess, metrics, transport
from runtime.health import serve_health
from runtime.process import serve_until_signal, tune_runtime
from runtime.refusals import BEHIND_TRAILER, Refusal, refuse
from storage_node.callbacks import AnswerTaker
from storage_node.node import StorageNode
from storage_node.settings import Settings


def _handlers(node: StorageNode) -> grpc.GenericRpcHandler:
    def parse(cls: type, raw: bytes, ctx: grpc.ServicerContext) -> Any:
        try:
            return cls.FromString(raw)  # type: ignore[attr-defined]
        except DecodeError:
            refuse(ctx, grpc.StatusCode.INVALID_ARGUMENT, f"request: not a valid {cls.__name__}")

    def answer(fn: Callable[[], Any], ctx: grpc.ServicerContext) -> Any:
        try:
            return fn()
        except Behind as e:
            refuse(ctx, grpc.StatusCode.FAILED_PRECONDITION, str(e), trailers=(BEHIND_TRAILER,))
        except Refusal as r:  # about the request or the shard: every replica would say the same
            r.abort(ctx)
        except ValueError as e:
            refuse(ctx, grpc.StatusCode.INVALID_ARGUMENT, str(e))

    def call(cls: type, fn: Callable[[Any], Any]) -> grpc.RpcMethodHandler:
        """A unary method: parse the request, call the node, map its refusals to statuses."""
        def handle(raw: bytes, ctx: grpc.ServicerContext) -> Any:
            req = parse(cls, raw, ctx)
            return answer(lambda: fn(req), ctx)
        return grpc.unary_unary_rpc_method_handler(
            handle, request_deserializer=lambda b: b, response_serializer=lambda m: m.SerializeToString())

    def snapshot(raw: bytes, ctx: grpc.ServicerContext) -> Iterator[pb.SnapshotChunk]:
        req = parse(pb.SnapshotRequest, raw, ctx)
        yield from answer(lambda: node.snapshot(req), ctx)

    def scan_shard(raw: bytes, ctx: grpc.ServicerContext) -> Iterator[pb.ScanShardResponse]:
        req = parse(pb.StorageScanShardRequest, raw, ctx)
        yield from answer(lambda: node.scan_shard(req), ctx)

    def watch(raw: bytes, ctx: grpc.ServicerContext) -> Iterator[pb.WatchResponse]:
        req = parse(pb.StorageWatchRequest, raw, ctx)
        stream = answer(lambda: node.watch(req), ctx)
        try:
            yield from stream
        except Refusal as r:  # a position reclaimed or a shard moved away, mid-stream
            r.abort(ctx)

    return grpc.method_handlers_generic_handler("midtown.kv.v1.Storage", {
        "Watch": grpc.unary_stream_rpc_method_handler(
            watch, request_deserializer=lambda b: b,
            response_serializer=lambda m: m.SerializeToString()),
        "ScanShard": grpc.unary_stream_rpc_method_handler(
            scan_shard, request_deserializer=lambda b: b,
            response_serializer=lambda m: m.SerializeToString()),
        "ShardSplits": call(pb.StorageShardSplitsRequest, node.shard_splits),
        "Read": call(pb.ReadRequest, node.read),
        "ReadMany": call(pb.ReadManyRequest, node.read_many),
        "Status": call(pb.NodeStatusRequest, lambda _: node.status()),
        "CopyShard": call(pb.CopyShardRequest, node.copy_shard),
        "LwwWrite": call(pb.LwwWriteRequest, node.lww_write),
        "LwwRead": call(pb.LwwReadRequest, node.lww_read),
        "LwwRange": call(pb.LwwRangeRequest, node.lww_range),
        "LwwHashes": call(pb.LwwHashesRequest, lambda _: node.lww_hashes()),
        "Snapshot": grpc.unary_stream_rpc_method_handler(
            snapshot, request_deserializer=lambda b: b,
            response_serializer=lambda m: m.SerializeToString()),
    })


def build(node_id: int, addr: str, zk_hosts: str, data_dir: str,
          local_appends: LocalAppends | None = None, local_log: inprocess.Local[Node] | None = None,
          local_answers: inprocess.Local[AnswerTaker] | None = None) -> tuple[grpc.Server, StorageNode]:
    """A storage node's gRPC server (not listening yet) and the node (not started)."""
    node = StorageNode(node_id, addr, zk_hosts, data_dir, Settings.from_env(), local_appends=local_appends,
                       local_log=local_log, local_answers=local_answers)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=128), options=log_limits.GRPC_OPTIONS)
    server.add_generic_rpc_handlers([_handlers(node)])
    return server, node


def add_health(server: grpc.Server, node: StorageNode) -> None:
    """Health (SERVING once registered and caught up with its logs) and reflection."""
    serve_health(server, ["midtown.kv.v1.Storage"], node.ready, node.state.stop)


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
    a = ap.parse_args(argv)
    transport.use_flags(ap, a)
    metrics.serve(a.metrics_port, a.host)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format=f"%(asctime)s storage-{a.id} %(name)s %(levelname)s %(message)s")
    logging.getLogger("kazoo").setLevel(logging.WARNING)
    tune_runtime()
    listen = f"{a.host}:{a.port}"
    server, node = build(a.id, a.advertise or listen, a.zk, a.data)
    add_health(server, node)
    serve_until_signal(server, listen, f"storage node {a.id} ready on {listen}", node.start,
                       node.stop)


if __name__ == "__main__":
    main()
