"""The log server process: gRPC services (Log for clients, Replica between servers) over a
Node. Every request is parsed here so that malformed bytes, unknown logs and broken
limits become clear statuses naming the field; nothing a client sends can crash it.

Run: python -m log.server --id 0 --port 21001 --zk 127.0.0.1:2181 --data DIR"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import Any

import grpc

from fleet import machines
from log import append, codec, ensemble_change, lease, limits, linger, reading, spares
from log.catch_up import Unavailable
from log.node import Node
from midtown_pb import log_pb2 as pb
from runtime import handlers, metrics, transport, world
from runtime.health import serve_health
from runtime.process import log_to_stderr, serve_until_signal, trace_from_env, tune_runtime
from runtime.refusals import BadRequest, Refusal

log = logging.getLogger("midtown.log.server")



class Services:
    def __init__(self, node: Node) -> None:
        self.node = node

    def _check_log(self, log_id: int) -> None:
        n = self.node.topo.logs
        if not 0 <= log_id < n:
            raise Refusal(grpc.StatusCode.NOT_FOUND,
                          f"unknown log {log_id}; this cluster has logs 0..{n - 1}", field="log_id")

    # ---------------------------------------------------------------- Log
    def append(self, req: pb.AppendRequest, ctx: grpc.ServicerContext) -> pb.AppendResponse:
        self._check_log(req.log_id)
        remaining, tags = ctx.time_remaining(), codec.tags_from_pb(req)
        r = append.answer(self.node, req.log_id, list(req.payloads),
                          remaining if remaining is not None else 60, hurry=True, tags=tags)
        if isinstance(r, Refusal):
            raise r
        return pb.AppendResponse(
            first_position=r.first_position, count=r.count, timestamp_ms=r.timestamp_ms, epoch=r.epoch
        )

    def read(self, req: pb.ReadRequest, ctx: grpc.ServicerContext) -> Iterator[bytes]:
        self._check_log(req.log_id)
        if req.linger_ms > linger.LINGER_MS_MAX:
            raise BadRequest(f"{req.linger_ms} is more than {linger.LINGER_MS_MAX}", field="linger_ms")
        node, log_id = self.node, req.log_id
        node.apply_truncation_now(log_id)
        linger_s = req.linger_ms / 1000 if req.follow else 0.0
        pos, sent = req.from_position, 0
        since: float | None = None  # when the entries waiting to be sent were first seen
        while ctx.is_active():
            first = node.replica.first(log_id)
            try:
                reading.check_position(pos, first)
            except reading.Truncated as e:
                raise Refusal(grpc.StatusCode.OUT_OF_RANGE, str(e), field="from_position") from None
            end = node.committed_end(log_id)
            if req.max_entries and sent >= req.max_entries:
                return
            if pos <= end:
                if linger_s:
                    now = world.monotonic()
                    since = now if since is None else since
                    left = linger.linger_left(now, since, linger_s, end - pos + 1,
                                              node.lingering.hurried(log_id, pos))
                    if left > 0:
                        node.lingering.wait(log_id, pos, left)
                        continue
                    since = None
                hi = min(end, pos + limits.READ_BATCH_ENTRIES_MAX - 1)
                if req.max_entries:
                    hi = min(hi, pos + (req.max_entries - sent) - 1)
                try:
                    chunks = node.read_cache.chunks(
                        log_id, pos, hi, lambda a, b: node.read_committed(log_id, a, b))
                except Unavailable as e:
                    raise Refusal(grpc.StatusCode.UNAVAILABLE, f"{e}; retry") from None
                yield b"".join(chunks)  # a ReadResponse, its entries encoded once for all streams
                sent += len(chunks)
                pos = hi + 1
                continue
            if not req.follow:
                return
            node.wait_committed(log_id, pos, 0.5)

    def truncate(self, req: pb.TruncateRequest, ctx: grpc.ServicerContext) -> pb.TruncateResponse:
        self._check_log(req.log_id)
        return pb.TruncateResponse(first_position=self.node.truncate_before(req.log_id, req.before_position))

    def status(self, req: pb.StatusRequest, ctx: grpc.ServicerContext) -> pb.StatusResponse:
        me = self.node.server_id
        return pb.StatusResponse(server_id=me, logs=[pb.LogStatus(
            log_id=ls.log_id, writer_id=ls.writer_id, epoch=ls.epoch, first_position=ls.first,
            last_position=ls.last, replicas=[pb.ReplicaPosition(server_id=me, position=ls.filled)])
            for ls in self.node.status()])

    def tail(self, req: pb.TailRequest, ctx: grpc.ServicerContext) -> pb.TailResponse:
        self._check_log(req.log_id)
        t = self.node.tail_hurrying(req.log_id)
        seg = self.node.segment_last(req.log_id, req.segment_epoch) if req.segment_epoch else -1
        return pb.TailResponse(last=t.last, epoch=t.epoch, clock_ms=t.clock_ms, segment_last=seg)

    # ---------------------------------------------------------------- Replica
    def _issued(self, msg: Any, prefix: str = "") -> Any:
        """Refuse a replica request whose epoch ZooKeeper never issued (Node.issued)."""
        try:
            return self.node.issued(msg)
        except Refusal as e:
            raise e.within(prefix) from None

    def fence(self, req: pb.FenceRequest, ctx: grpc.ServicerContext) -> pb.FenceResponse:
        msg = self._issued(codec.fence_from_pb(req))
        return codec.fence_reply_to_pb(self.node.local(msg))

    def add_entries(self, req: pb.AddEntriesRequest, ctx: grpc.ServicerContext) -> pb.AddEntriesResponse:
        msg = self._issued(codec.add_from_pb(req))
        return codec.add_reply_to_pb(self.node.local(msg))

    def replicate(self, req: pb.ReplicateRequest, ctx: grpc.ServicerContext,
                  logs: set[int] | None = None) -> pb.ReplicateResponse:
        """`logs`: gets the ids of the logs the request carries."""
        if logs is not None:
            logs.update(r.log_id for r in req.requests)
        if len(req.requests) > limits.REPLICATE_MESSAGES_MAX:
            raise BadRequest(f"{len(req.requests)} messages, the limit is {limits.REPLICATE_MESSAGES_MAX}",
                             field="requests")
        msgs = [self._issued(_within(f"requests[{i}]: ", codec.add_from_pb, r), f"requests[{i}]: ")
                for i, r in enumerate(req.requests)]
        replies = self.node.local_batch(msgs)
        return pb.ReplicateResponse(responses=[codec.add_reply_to_pb(r) for r in replies])

    def replicate_stream(self, requests: Iterator[pb.ReplicateRequest],
                         ctx: grpc.ServicerContext) -> Iterator[pb.ReplicateResponse]:
        """Replicate, each request on the stream answered in turn (runtime/call_stream.py);
        a request refused ends the stream with its status. When the stream ends, its logs'
        writer may be gone: the follower suspects it at once (log/takeover.py)."""
        logs: set[int] = set()
        try:
            for req in requests:
                yield self.replicate(req, ctx, logs)
        finally:
            self.node.writer_stream_ended(logs)

    def read_range(self, req: pb.ReadRangeRequest, ctx: grpc.ServicerContext) -> pb.ReadRangeResponse:
        msg = self._issued(codec.read_from_pb(req))
        return codec.read_reply_to_pb(self.node.local(msg))


def _within(prefix: str, fn: Callable[[Any], Any], req: Any) -> Any:
    """`fn(req)` for a part of a larger request: a refusal names the part."""
    try:
        return fn(req)
    except Refusal as e:
        raise e.within(prefix) from None


def _raw(b: bytes) -> bytes:
    return b


def service_handlers(node: Node) -> list[grpc.GenericRpcHandler]:
    """The Log and Replica services over `node`, each method through runtime/handlers.py
    (the simulation answers the log servers' calls through them too: tests/sim/writers.py)."""
    s = Services(node)
    log_service = grpc.method_handlers_generic_handler("midtown.log.v1.Log", {
        "Append": handlers.unary("Append", pb.AppendRequest, s.append),
        # Its messages are encoded once for every stream (log/read_cache.py): sent as they are.
        "Read": handlers.unary_stream("Read", pb.ReadRequest, s.read, serialize=_raw),
        "Truncate": handlers.unary("Truncate", pb.TruncateRequest, s.truncate),
        "Status": handlers.unary("Status", pb.StatusRequest, s.status),
        "Tail": handlers.unary("Tail", pb.TailRequest, s.tail),
    })
    replica_service = grpc.method_handlers_generic_handler("midtown.log.v1.Replica", {
        "Fence": handlers.unary("Fence", pb.FenceRequest, s.fence),
        "AddEntries": handlers.unary("AddEntries", pb.AddEntriesRequest, s.add_entries),
        "Replicate": handlers.unary("Replicate", pb.ReplicateRequest, s.replicate),
        "ReadRange": handlers.unary("ReadRange", pb.ReadRangeRequest, s.read_range),
        "ReplicateStream": handlers.stream_stream("ReplicateStream", pb.ReplicateRequest, s.replicate_stream),
    })
    return [log_service, replica_service]


THREADS = 64  # the gRPC server's workers


def build(server_id: int, addr: str, zk_hosts: str, data_dir: str) -> tuple[grpc.Server, Node]:
    """A log server's gRPC server (not listening yet) and its node (not started)."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=THREADS), options=limits.GRPC_OPTIONS,
                         maximum_concurrent_rpcs=2000)
    node = Node.open(server_id, addr, zk_hosts, data_dir, spares.linger_s_from_env(os.environ),
                     ensemble_change.enabled_from_env(os.environ), lease.lease_s_from_env(os.environ))
    server.add_generic_rpc_handlers(service_handlers(node))
    return server, node


def serve(server_id: int, port: int, zk_hosts: str, data_dir: str, host: str = "127.0.0.1",
          advertise: str | None = None) -> None:
    listen = f"{host}:{port}"
    addr = advertise or listen
    server, node = build(server_id, addr, zk_hosts, data_dir)
    add_health(server, node)
    serve_until_signal(server, listen, f"log server {server_id} ready on {addr}", node.start,
                       node.stop, grace_s=2.0, name="log server")


SERVICES = ["midtown.log.v1.Log", "midtown.log.v1.Replica"]


def add_health(server: grpc.Server, node: Node) -> None:
    """Health (SERVING once registered with a live ZooKeeper session) and reflection."""
    serve_health(server, SERVICES, node.ready, node._stop, THREADS)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m log.server", description="Midtown log server")
    ap.add_argument("--id", type=int, required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--zk", required=True, help="ZooKeeper HOST:PORT")
    ap.add_argument("--data", required=True, help="data directory")
    ap.add_argument("--host", default="127.0.0.1", help="address to listen on")
    ap.add_argument("--advertise", help="HOST:PORT peers and clients use (default: --host:--port)")
    ap.add_argument("--log-level", default="INFO")
    ap.add_argument("--metrics-port", type=int, default=0, help="serve Prometheus metrics (0: off)")
    transport.add_flags(ap)
    machines.add_flags(ap)
    a = ap.parse_args(argv)
    transport.use_flags(ap, a)
    domain = machines.flags_domain(ap, a)
    metrics.serve(a.metrics_port, a.host)
    log_to_stderr(f"log-server-{a.id}", a.log_level)
    # Hand the GIL over sooner: a woken thread (an RPC reply, an ack) otherwise waits up
    # to the default 5 ms while another thread computes.
    tune_runtime()
    trace_from_env(f"log server {a.id}")
    machines.claim_at_start(a.zk, [(machines.LOG_SERVERS, a.id)], domain)
    serve(a.id, a.port, a.zk, a.data, a.host, a.advertise)


if __name__ == "__main__":
    main()
