"""The floor `midtown-bench kv` measures beside Midtown and etcd: a Python gRPC server that
answers every call at once, doing nothing, configured as a coordinator is (thread pool,
message limits, runtime tuning), called by the benchmark's harness as the SDK calls a
coordinator (one channel per client thread).

Every Midtown operation pays at least this one call, and then its way through a log and
the storage nodes, so no Midtown figure can beat this one on the same machine in the same
run. The server also answers the KV service's single-key calls and `Many` at once (every
item answered, nothing done), so the SDK's own Client, coalescing, can call it: the floor
for coalesced calls. `python -m bench.echo --port N` serves until killed.

**The replicated floor** (`--data DIR`, and `--follower HOST:PORT`): an Echo call first
makes its bytes durable, written to a RocksDB in DIR and synced as a log replica does
(log/rocks_store.py), and at the follower, another such server called while the local
write runs; it answers once both hold them. That is the least a write replicated before
its acknowledgement costs in Python on this machine: one client call, one replication
call, two synced writes, nothing else (no log order, no state machine, no third copy)."""

from __future__ import annotations

import argparse
import os
import threading
from collections.abc import Callable
from concurrent import futures

import grpc
from google.protobuf.message import Message
from rocksdict import WriteBatch

from log import limits as log_limits
from midtown_pb import kv_pb2 as pb
from runtime.disk import SyncedDb
from runtime.process import Part, serve_all, tune_runtime

METHOD = "/bench.v1.Echo/Echo"

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


class Durable:
    """An Echo call's bytes made durable before the answer: synced into a RocksDB here and,
    with a follower, at that server too (called while the local write runs)."""

    def __init__(self, data: str, follower: str | None) -> None:
        os.makedirs(data, exist_ok=True)
        self.db = SyncedDb(os.path.join(data, "echo.db"))
        self._lock = threading.Lock()
        self._n = 0
        self._follower = (grpc.insecure_channel(follower, options=log_limits.GRPC_OPTIONS).unary_unary(METHOD)
                          if follower else None)

    def echo(self, req: bytes, ctx: grpc.ServicerContext) -> bytes:
        sent = self._follower.future(req, timeout=10) if self._follower is not None else None
        with self._lock:  # one writer, as a log replica's
            self._n += 1
            wb = WriteBatch(raw_mode=True)
            wb.put(self._n.to_bytes(8, "big"), req)
            self.db.write(wb)
        if sent is not None:
            sent.result()  # the follower holds it too (its failure fails this call)
        return req


def server(durable: Durable | None = None) -> grpc.Server:
    """The echo server (not listening yet); with `durable`, Echo makes its bytes durable first."""
    s = grpc.server(futures.ThreadPoolExecutor(max_workers=128), options=log_limits.GRPC_OPTIONS)
    kv = {m: grpc.unary_unary_rpc_method_handler(_answer(_ANSWERS[f].SerializeToString()))
          for m, f in _METHODS.items()}
    kv["Many"] = grpc.unary_unary_rpc_method_handler(_many)
    s.add_generic_rpc_handlers([
        grpc.method_handlers_generic_handler("bench.v1.Echo", {
            "Echo": grpc.unary_unary_rpc_method_handler(durable.echo if durable else lambda req, ctx: req)}),
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


def _host_port(s: str) -> str:
    host, sep, port = s.rpartition(":")
    if not sep or not host:
        raise argparse.ArgumentTypeError(f"{s!r} is not HOST:PORT")
    _port(port)
    return s


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.echo", description=__doc__.splitlines()[0])
    p.add_argument("--port", type=_port, required=True)
    p.add_argument("--data", help="make each Echo call's bytes durable in a RocksDB here first")
    p.add_argument("--follower", metavar="HOST:PORT", type=_host_port,
                   help="with --data: and at this echo server too (the replicated floor)")
    a = p.parse_args()
    if a.follower and not a.data:
        p.error("--follower: give --data too (the follower's copy is beside a local one)")
    tune_runtime()
    addr = f"127.0.0.1:{a.port}"
    try:
        durable = Durable(a.data, a.follower) if a.data else None
    except Exception as e:  # not a folder, not writable, a database held by another server
        p.error(f"--data: cannot keep a database in {a.data!r} ({e})")
    serve_all([Part(server(durable), addr, lambda: None, lambda: None)], f"echo: listening on {addr}")


if __name__ == "__main__":
    main()
