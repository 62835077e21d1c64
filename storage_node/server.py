"""The storage node process: python -m storage_node.server --id 0 --port P --zk ZK --data DIR"""

from __future__ import annotations

import argparse
import logging
import sys
from concurrent import futures

import grpc
from google.protobuf.message import DecodeError

from log import limits as log_limits
from midtown.process import serve_until_signal
from midtown_pb import kv_pb2 as pb
from storage_node.node import GRPC_OPTIONS, Behind, StorageNode


def _handlers(node: StorageNode) -> grpc.GenericRpcHandler:
    def read(raw: bytes, ctx: grpc.ServicerContext) -> pb.ReadResponse:
        try:
            req = pb.ReadRequest.FromString(raw)
        except DecodeError:
            ctx.abort(grpc.StatusCode.INVALID_ARGUMENT, "request: not a valid ReadRequest")
        if req.shard >= node.kv.shards:
            ctx.abort(grpc.StatusCode.INVALID_ARGUMENT, f"shard: {req.shard} >= {node.kv.shards}")
        if req.op.WhichOneof("op") not in ("get", "scan"):
            ctx.abort(grpc.StatusCode.INVALID_ARGUMENT, "op: only get and scan read a replica")
        try:
            result, pos = node.read(req)
        except Behind as e:
            ctx.abort(grpc.StatusCode.FAILED_PRECONDITION, str(e))
        return pb.ReadResponse(result=result, position=pos)

    def read_many(raw: bytes, ctx: grpc.ServicerContext) -> pb.ReadManyResponse:
        try:
            req = pb.ReadManyRequest.FromString(raw)
        except DecodeError:
            ctx.abort(grpc.StatusCode.INVALID_ARGUMENT, "request: not a valid ReadManyRequest")
        try:
            return node.read_many(req)
        except Behind as e:
            ctx.abort(grpc.StatusCode.FAILED_PRECONDITION, str(e))
        except ValueError as e:
            ctx.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        raise AssertionError("unreachable: abort raises")

    def status(raw: bytes, ctx: grpc.ServicerContext) -> pb.NodeStatusResponse:
        return node.status()

    def unary(fn):  # type: ignore[no-untyped-def]
        return grpc.unary_unary_rpc_method_handler(
            fn, request_deserializer=lambda b: b, response_serializer=lambda m: m.SerializeToString())

    return grpc.method_handlers_generic_handler(
        "midtown.kv.v1.Storage", {"Read": unary(read), "ReadMany": unary(read_many),
                                  "Status": unary(status)})


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m storage_node.server")
    ap.add_argument("--id", type=int, required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--zk", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--advertise")
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format=f"%(asctime)s storage-{a.id} %(name)s %(levelname)s %(message)s")
    logging.getLogger("kazoo").setLevel(logging.WARNING)
    sys.setswitchinterval(log_limits.SWITCH_INTERVAL_S)
    listen = f"{a.host}:{a.port}"
    node = StorageNode(a.id, a.advertise or listen, a.zk, a.data)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=128), options=GRPC_OPTIONS)
    server.add_generic_rpc_handlers([_handlers(node)])
    serve_until_signal(server, listen, f"storage node {a.id} ready on {listen}", node.start,
                       node.stop)


if __name__ == "__main__":
    main()
