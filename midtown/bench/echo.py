"""The floor `midtown bench kv` measures beside Midtown and etcd: a Python gRPC server that
answers every call at once, doing nothing, configured as a coordinator is (thread pool,
message limits, runtime tuning), called by the benchmark's harness as the SDK calls a
coordinator (one channel per client thread).

Every Midtown operation pays at least this one call, and then its way through a log and
the storage nodes, so no Midtown figure can beat this one on the same machine in the same
run. `python -m midtown.bench.echo --port N` serves until killed."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from concurrent import futures

import grpc

from log import limits as log_limits
from runtime.process import Part, serve_all, tune_runtime

METHOD = "/midtown.bench.v1.Echo/Echo"


def server() -> grpc.Server:
    """The echo server (not listening yet)."""
    s = grpc.server(futures.ThreadPoolExecutor(max_workers=128), options=log_limits.GRPC_OPTIONS)
    s.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("midtown.bench.v1.Echo", {
        "Echo": grpc.unary_unary_rpc_method_handler(lambda req, ctx: req)})])
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
