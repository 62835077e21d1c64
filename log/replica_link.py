"""The network port of the log's replication: the way from this server's writers to one
replica. It carries the model messages (log/messages.py: Fence, ReadRange, AddEntries) and
their replies; a backend that crosses a wire encodes them at its edge (log/codec.py).

Backends: `OwnReplica`, this server's own replica, in process; `GrpcReplicas`, a peer's,
by gRPC (a stub per peer, its address read from ZooKeeper and forgotten when unreachable,
and one long-lived ReplicateStream per peer, runtime/call_stream.py, which a watchdog
cancels when an answer is overdue); the simulator's (tests/sim/writers.py), a network that
delays, drops, duplicates and cuts off. log/peers.py sends through them."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any, Protocol

import grpc
from kazoo.client import KazooClient

from log import codec, limits
from log import zk as zkpaths
from log.messages import AddEntries, Fence, ReadRange
from midtown_pb import log_pb2 as pb
from midtown_pb import log_pb2_grpc
from runtime import loops, transport, world
from runtime.call_stream import CallStream, StreamFailed, watch
from runtime.refusals import BadRequest, Refusal

log = logging.getLogger("midtown.log.links")
_POOL = world.Pool("local-replica", 8)


class NoAnswer(Exception):
    """A call that got no answer: the replica is unreachable, or did not answer in time."""


class Refused(Exception):
    """A call the replica answered with an error (it is there, and said no)."""


class ReplicaLink(Protocol):
    """The way to one replica."""

    def call(self, msg: Fence | ReadRange | AddEntries, timeout_s: float) -> Any:
        """Send `msg` and wait for its reply; NoAnswer if none came within `timeout_s`,
        Refused if the replica answered with an error."""

    def ask(self, msg: Fence | ReadRange, reply: Callable[[Any], None]) -> None:
        """Send `msg` and return at once; `reply(answer)` runs when it comes (never, if it
        is lost: the writer's tick sends again)."""

    def replicate(self, msgs: list[AddEntries]) -> list[Any] | None:
        """Send `msgs` together and wait: their replies in order, or None if they were lost."""


class OwnReplica:
    """This server's own replica, in process: `local_batch` handles replica requests with
    one synced write for all (log/node.py)."""

    def __init__(self, local_batch: Callable[[list[Any]], list[Any]]) -> None:
        self.local_batch = local_batch

    def call(self, msg: Fence | ReadRange | AddEntries, timeout_s: float) -> Any:
        try:
            return self.local_batch([msg])[0]
        except Refusal as e:
            raise Refused(str(e)) from e

    def ask(self, msg: Fence | ReadRange, reply: Callable[[Any], None]) -> None:
        _POOL.submit(lambda: reply(self.local_batch([msg])[0]))

    def replicate(self, msgs: list[AddEntries]) -> list[Any] | None:
        return self.local_batch(msgs)


class GrpcReplicas:
    """Peers' replicas by gRPC, one link per peer."""

    def __init__(self, zk: KazooClient, stop: threading.Event) -> None:
        self.zk = zk
        self._links: dict[int, _GrpcReplica] = {}
        self._lock = world.lock()
        loops.forever("replica-streams", lambda: watch(self._streams, stop), stop)

    def link(self, server_id: int) -> _GrpcReplica:
        with self._lock:
            got = self._links.get(server_id)
            if got is None:
                got = self._links[server_id] = _GrpcReplica(self, server_id)
            return got

    def address(self, server_id: int) -> str | None:
        try:
            data, _ = self.zk.get(f"{zkpaths.SERVERS}/{server_id}")
            addr = json.loads(data)["addr"]
        except Exception:
            return None
        return addr if isinstance(addr, str) else None

    def _streams(self) -> list[CallStream]:
        with self._lock:
            links = list(self._links.values())
        return [s for x in links if (s := x.stream) is not None]


class _GrpcReplica:
    def __init__(self, replicas: GrpcReplicas, server_id: int) -> None:
        self.replicas = replicas
        self.server_id = server_id
        self._stub: Any = None
        self.stream: CallStream | None = None
        self._lock = world.lock()

    def stub(self) -> Any:
        """Its stub, the address read from ZooKeeper once (None: unknown)."""
        with self._lock:
            if self._stub is not None:
                return self._stub
        addr = self.replicas.address(self.server_id)
        if addr is None:
            return None
        stub = log_pb2_grpc.ReplicaStub(transport.channel(addr))
        with self._lock:
            self._stub = stub
        return stub

    def forget(self) -> None:
        """Unreachable: it may have restarted on a new address; read it again next time."""
        with self._lock:
            self._stub = None

    @staticmethod
    def _method(stub: Any, msg: Fence | ReadRange | AddEntries) -> tuple[Any, Any, Callable[[Any], Any]]:
        """The stub's method for `msg`, the request it sends and how its reply reads."""
        name, req, conv = on_the_wire(msg)
        return getattr(stub, name), req, conv

    def _answer(self, result: Callable[[], Any], conv: Callable[[Any], Any]) -> Any:
        return answer_of(self.server_id, result, conv, self.forget)

    def call(self, msg: Fence | ReadRange | AddEntries, timeout_s: float) -> Any:
        stub = self.stub()
        if stub is None:
            raise NoAnswer(f"log server {self.server_id}'s address is unknown")
        method, req, conv = self._method(stub, msg)
        return self._answer(lambda: method(req, timeout=timeout_s), conv)

    def ask(self, msg: Fence | ReadRange, reply: Callable[[Any], None]) -> None:
        stub = self.stub()
        if stub is None:
            return
        method, req, conv = self._method(stub, msg)

        def done(f: Any) -> None:
            try:
                rep = self._answer(f.result, conv)
            except (NoAnswer, Refused):
                return  # as if lost: the writer's tick sends again
            reply(rep)

        method.future(req, timeout=limits.REPLICA_RPC_TIMEOUT_S).add_done_callback(done)

    def replicate(self, msgs: list[AddEntries]) -> list[Any] | None:
        """On the peer's stream (opened if it has none)."""
        stream = self.stream
        if stream is None or stream.closed:
            stub = self.stub()
            if stub is None:
                return None
            stream = self.stream = CallStream(stub.ReplicateStream, limits.REPLICA_RPC_TIMEOUT_S)
        try:
            rep = stream.call(pb.ReplicateRequest(requests=[codec.add_to_pb(m) for m in msgs]))
        except StreamFailed as e:
            if e.code == grpc.StatusCode.UNAVAILABLE:
                self.forget()
            return None
        return [codec.add_reply_from_pb(r) for r in rep.responses]


def on_the_wire(msg: Fence | ReadRange | AddEntries) -> tuple[str, Any, Callable[[Any], Any]]:
    """The Replica service's method for `msg`, the request it sends and how its reply reads."""
    if isinstance(msg, Fence):
        return "Fence", codec.fence_to_pb(msg), codec.fence_reply_from_pb
    if isinstance(msg, AddEntries):
        return "AddEntries", codec.add_to_pb(msg), codec.add_reply_from_pb
    return "ReadRange", codec.read_to_pb(msg), codec.read_reply_from_pb


def answer_of(server_id: int, result: Callable[[], Any], conv: Callable[[Any], Any],
              forget: Callable[[], None]) -> Any:
    """A call's reply from replica `server_id`, read; NoAnswer if it got none (`forget()`
    its address when the server is unreachable: it may have restarted elsewhere) or one
    that cannot be, Refused if the replica answered with an error."""
    try:
        return conv(result())
    except grpc.RpcError as e:
        if e.code() == grpc.StatusCode.UNAVAILABLE:
            forget()
        if e.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
            raise NoAnswer(f"log server {server_id}: {e.code().name}") from e
        raise Refused(f"log server {server_id}: {e.code().name} {e.details()}") from e
    except BadRequest as e:
        log.warning("log server %d sent a reply that cannot be: %s", server_id, e)
        raise NoAnswer(f"log server {server_id} sent a reply that cannot be: {e}") from e
