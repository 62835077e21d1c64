"""The simulated network's backends of the storage side's ports (tests/sim/nodes.py): the
storage nodes' answers to the coordinator, their calls to each other and the coordinator's
to them, the SDK's calls to the coordinator, and a storage node's log link noting which of
its disks each position it publishes was sent from. Each call is answered in the callee's
process by its own gRPC service (tests/sim/grpc_port.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent import futures
from typing import TYPE_CHECKING, Any

import grpc

from log.client import Appended, LogClient
from log.seals import UNTAGGED, Tags
from runtime import world
from runtime.stubs import CallFailed
from runtime.transport import KEEPALIVE_MS
from storage_node import server as storage_server
from storage_node.callbacks import Answer, encoded
from tests.sim import grpc_port
from tests.sim.writers import _LogLink, carry

if TYPE_CHECKING:
    from tests.sim.nodes import NodeSim

SLOW_COPY_S = 3.0  # (slow) a shard copy over a slow link comes up to this late
# A stream's bytes per simulated second: a shard here is a few KB, and its copy takes about
# as long as a real one of many MB, so the destination's tail moves on while it comes in.
STREAM_BYTES_PER_S = 4000
WRITES = ("Put", "CheckAndSet", "Batch", "Delete")  # the KV methods the clients write with
_MANY = {"get": "Get", "put": "Put", "delete": "Delete", "check_and_set": "CheckAndSet",
         "increment": "Increment"}  # a Many item's call: its method


class _Answers:
    """The storage nodes' answers port (storage_node/callbacks.py AnswerLink) on the simulated
    network: each batch reaches the coordinator after a delay, or is lost now and then (the
    coordinator's client then retries)."""

    def __init__(self, sim: NodeSim) -> None:
        self.sim = sim

    def near(self, addr: str) -> bool:
        return False

    def send(self, addr: str, results: list[Answer]) -> None:
        sim = self.sim
        frm = sim.here()

        def carry() -> None:
            to = sim.dc_of(sim.coordinator_proc) if frm is not None else None
            sim.delay(frm, to)
            if sim.rng.random() < sim.cfg.drop or sim.dc_cut(frm, to):
                return
            for r, _secret in results:
                sim.answered.setdefault(r.request_id, []).append(r)
            proc, c = sim.coordinator_proc, sim.coordinator
            if proc is None:
                return  # down: the connection refused
            with sim.sched.process(proc):
                world.spawn("deliver", lambda: c.deliver(encoded(results)))
        with sim.sched.process("network"):
            world.spawn("answers", carry)


def unary(sim: NodeSim, addr: str, proc: Callable[[], str | None], answer: Callable[[], Any],
          timeout_s: float) -> Any:
    """A unary call to the process `proc()` (None: down) on the simulated network, answered
    there by `answer()` (an exception: its error): its answer, or CallFailed as gRPC fails
    it: UNAVAILABLE when the process is down (connection refused) or dies meanwhile (its
    connection reset: gRPC's keepalive sees it within a second), DEADLINE_EXCEEDED when no
    answer comes in time. Between data centers cut off from each other the connection's
    keepalive pings go unanswered: the call fails UNAVAILABLE once they were cut a second
    (runtime/transport.py KEEPALIVE_MS; checked every half second)."""
    reply: futures.Future[Any] = world.future()
    refused = CallFailed(grpc.StatusCode.UNAVAILABLE, f"{addr}: connection refused")
    callee = proc()
    ends = (sim.here(), sim.dc_of(callee))
    carry(sim, reply, proc, answer, lambda: reply.set_exception(refused), lambda: True, lossy=False)
    deadline = world.monotonic() + timeout_s
    cut_since: float | None = None
    while True:
        try:
            return reply.result(max(0.0, min(0.5, deadline - world.monotonic())))
        except futures.TimeoutError:
            if callee in sim.sched.dead:
                raise CallFailed(grpc.StatusCode.UNAVAILABLE, f"{addr}: connection reset") from None
            cut_since = (cut_since or world.monotonic()) if sim.dc_cut(*ends) else None
            if cut_since is not None and world.monotonic() - cut_since >= KEEPALIVE_MS / 1000:
                lost = CallFailed(grpc.StatusCode.UNAVAILABLE, f"{addr}: keepalive ping unanswered")
                reply.set_exception(lost)  # the connection closed: nothing of the call gets through now
                raise lost from None
            if world.monotonic() >= deadline:
                raise CallFailed(grpc.StatusCode.DEADLINE_EXCEEDED, f"{addr}: no answer") from None


class _PeerCalls:
    """The storage nodes' way to their peers (runtime/stubs.py Calls) on the simulated
    network, through the peer's own gRPC service as its process serves it
    (storage_node/server.py, through runtime/handlers.py: the request checked and parsed
    from its bytes, a refusal made a status with its trailers, the answer serialized),
    after a delay: a peer that is down refuses (UNAVAILABLE), as one that dies meanwhile
    does (its connection reset), one that does not answer in time fails DEADLINE_EXCEEDED.
    A stream's messages are made whole there and sent back together."""

    def __init__(self, sim: NodeSim) -> None:
        self.sim = sim

    def call(self, addr: str, method: str, req: Any, timeout_s: float) -> Any:
        sim, to = self.sim, int(addr.split(":")[1])

        def answer() -> Any:
            node = sim.storage[to]
            service = sim.storage_services.get(id(node))
            if service is None or service[0] is not node:
                service = sim.storage_services[id(node)] = (node, storage_server.service_handlers(node))
            return grpc_port.answered([service[1]], f"/midtown.kv.v1.Storage/{method}", req,
                                      grpc_port.Context(world.monotonic() + timeout_s))
        return unary(sim, addr, lambda: sim.storage_proc(to) if to in sim.storage else None, answer,
                     timeout_s)

    def stream(self, addr: str, method: str, req: Any, timeout_s: float) -> tuple[Iterator[Any], Any]:
        messages = self.call(addr, method, req, timeout_s)
        world.sleep(sum(m.ByteSize() for m in messages) / STREAM_BYTES_PER_S)
        if method == "Snapshot" and self.sim.slow and self.sim.rng.random() < 0.5:
            world.sleep(self.sim.rng.uniform(0, SLOW_COPY_S))  # a slow link: the copy comes late
        return iter(messages), None


class _StorageLink(_PeerCalls):
    """The coordinator's way to the storage nodes (coordinator/storage_link.py) on the
    simulated network: none is in its process."""

    def near(self, addr: str) -> bool:
        return False

    def beside(self, log_id: int) -> int | None:
        return None


class _KvStub:
    """The SDK's way to a coordinator (midtown/client.py `link`) on the simulated network:
    a unary call of the KV service, answered in the coordinator's process by its own gRPC
    handler (coordinator/server.py Shell, through runtime/handlers.py: the request parsed
    from its bytes, admitted, run; a refusal made a status with its trailers)."""

    def __init__(self, sim: NodeSim, addr: str, client: str) -> None:
        self.sim, self.addr, self.client = sim, addr, client

    def __getattr__(self, method: str) -> Callable[..., Any]:
        sim = self.sim

        def call(req: Any, timeout: float | None = None, metadata: Any = None) -> Any:
            timeout_s = 60.0 if timeout is None else timeout
            # (method, request) of each write it carries: a Many call (the SDK's coalescing
            # of several callers' operations) carries one each
            writes = ([(_MANY[i.WhichOneof("call")], getattr(i, i.WhichOneof("call"))) for i in req.items]
                      if method == "Many" else [(method, req)])
            for m, r in writes:
                if m in WRITES:  # each request id the write went under, and the SDK's retries
                    sent = sim.sent.setdefault(self.client, [])
                    if r.header.request_id not in sent:
                        sent.append(r.header.request_id)
                    sim.counts["retries"] += not r.header.first_attempt

            def answer() -> Any:
                return grpc_port.unary([sim.kv_handlers], f"/midtown.kv.v1.KV/{method}", req,
                                       grpc_port.Context(world.monotonic() + timeout_s, metadata))
            out = unary(sim, self.addr, lambda: sim.coordinator_proc, answer, timeout_s)
            answers = ([getattr(a, a.WhichOneof("response")) if a.WhichOneof("response") else None
                        for a in out.answers] if method == "Many" else [out])
            for (m, r), a in zip(writes, answers):
                if m in WRITES and a:  # (1); a Many item refused has no response
                    sim.told[r.header.request_id] = (m, a)
            return out
        return call


class _DiskTaggedLink(_LogLink):
    """Storage node `n`'s log link, noting which of its disks each payload it appends was
    sent from (check (3): a position counts against the disk that published it)."""

    def __init__(self, sim: NodeSim, n: int) -> None:
        super().__init__(sim)
        self.sent, self.n, self.disk = sim.sent_from_disk, n, sim.disk_generation(n)

    def append(self, addr: str, log_id: int, payloads: list[bytes], timeout_s: float,
               tags: Tags = UNTAGGED) -> Any:
        for p in payloads:  # (a node publishes the same position into each log: keyed by log too)
            self.sent.setdefault((self.n, log_id, p), []).append(self.disk)
        return super().append(addr, log_id, payloads, timeout_s, tags)


class CheckedLogClient(LogClient):
    """The coordinator's log client, checking the ReadIndex rule (log/read_index.py) on
    every round it makes: the index covers every append this client heard acknowledged
    before the round began (one heard acknowledged was acknowledged by the writer before)."""

    def __init__(self, violations: list[str], acked: dict[int, list[tuple[float, int]]],
                 **kw: Any) -> None:
        super().__init__(**kw)
        self._violations = violations
        self._acked = acked  # log -> (when heard, last position), shared by its restarts

    def append(self, log_id: int, payloads: list[bytes], *args: Any, **kw: Any) -> Appended:
        got = super().append(log_id, payloads, *args, **kw)
        self._acked.setdefault(log_id, []).append((world.monotonic(), got.first_position + got.count - 1))
        return got

    def read_index(self, log_id: int) -> int | None:
        start = world.monotonic()
        before = max((p for t, p in self._acked.get(log_id, ()) if t < start), default=-1)
        idx = super().read_index(log_id)
        if idx is not None and idx < before:
            self._violations.append(f"a ReadIndex round of log {log_id} started at {start:.3f} s "
                                    f"returned {idx}, below position {before}, acknowledged before it")
        return idx
