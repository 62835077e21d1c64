"""The floor `midtown bench kv` measures beside Midtown and etcd: a Python gRPC server that
answers every call at once, doing nothing, configured as a coordinator is (thread pool,
message limits, runtime tuning), called by the benchmark's harness as the SDK calls a
coordinator (one channel per client thread).

Every Midtown operation pays at least this one call, and then its way through a log and
the storage nodes, so no Midtown figure can beat this one on the same machine in the same
run. The server also answers the KV service's single-key calls and `Many` at once (every
item answered, nothing done), so the SDK's own Client, coalescing, can call it: the floor
for coalesced calls. `python -m midtown.bench.echo --port N` serves until killed."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from concurrent import futures

import grpc
from google.protobuf.message import Message

from log import limits as log_limits
from midtown_pb import kv_pb2 as pb
from runtime.process import Part, serve_all, tune_runtime

METHOD = "/midtown.bench.v1.Echo/Echo"

# What the KV floor answers, at once: a check-and-set succeeds (the benchmark's CAS loop
# checks it); every other response is empty.
_ANSWERS: dict[str, Message] = {
    "get": pb.GetResponse(), "put": pb.PutResponse(), "delete": pb.DeleteResponse(),
    "check_and_set": pb.CheckAndSetResponse(succeeded=True), "increment": pb.IncrementResponse()}
_METHODS = {"Get": "get", "Put": "put", "Delete": "delete", "CheckAndSet": "check_and_set",
            "Increment": "increment"}


def _answer(out: bytes) -> Callable[[bytes, grpc.ServicerContext], bytes]:
    return lambda req, ctx: out


def _many(raw: bytes, ctx: grpc.ServicerContext) -> bytes:
    """A coalesced call: decoded, and one answer per item, as a coordinator must at least do."""
    req = pb.ManyRequest.FromString(raw)
    out = pb.ManyResponse()
    for i, item in enumerate(req.items):
        which = item.WhichOneof("call")
        if which is None:  # as the coordinator answers it
            out.answers.add(code=grpc.StatusCode.INVALID_ARGUMENT.value[0],
                            message=f"items[{i}]: no call in it")
            continue
        getattr(out.answers.add(), which).CopyFrom(_ANSWERS[which])
    return out.SerializeToString()


def server() -> grpc.Server:
    """The echo server (not listening yet)."""
    s = grpc.server(futures.ThreadPoolExecutor(max_workers=128), options=log_limits.GRPC_OPTIONS)
    kv = {m: grpc.unary_unary_rpc_method_handler(_answer(_ANSWERS[f].SerializeToString()))
          for m, f in _METHODS.items()}
    kv["Many"] = grpc.unary_unary_rpc_method_handler(_many)
    s.add_generic_rpc_handlers([
        grpc.method_handlers_generic_handler("midtown.bench.v1.Echo", {
            "Echo": grpc.unary_unary_rpc_method_handler(lambda req, ctx: req)}),
        grpc.method_handlers_generic_handler("midtown.kv.v1.KV", kv)])
    return s


def caller(addr: str, payload: bytes, timeout_s: float = 30.0) -> Callable[[int], object]:
    """One client's call, on its own channel: returns the echoed bytes."""
    call = grpc.insecure_channel(addr, options=log_limits.GRPC_OPTIONS).unary_unary(METHOD)

    def op(_n: int) -> bytes:
        out: bytes = call(payload, timeout=timeout_s)
        if out != payload:
            raise RuntimeError("echo: the answer differs from the request")
        return out
    return op


def _port(s: str) -> int:
    if not s.isdigit() or not 0 < int(s) < 65536:
        raise argparse.ArgumentTypeError(f"{s!r} is not a port number (1-65535)")
    return int(s)


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m midtown.bench.echo", description=__doc__.splitlines()[0])
    p.add_argument("--port", type=_port, required=True)
    a = p.parse_args()
    tune_runtime()
    addr = f"127.0.0.1:{a.port}"
    serve_all([Part(server(), addr, lambda: None, lambda: None)], f"echo: listening on {addr}")


if __name__ == "__main__":
    main()
