"""The callee's side of a call on the simulated network: answered by the callee's own gRPC
service, as its process registers it (runtime/handlers.py: the request parsed from its
bytes and checked, the method run, a refusal made a status with its trailers, the answer
serialized), and read back from its bytes as the caller's stub reads it. The call's
deadline is carried (the context's time_remaining), and its cancellation (is_active is
false once the caller cancelled, or past the deadline).

The storage nodes' and coordinators' calls (tests/sim/nodes.py) and the log servers'
(tests/sim/writers.py) all come here; the network around them (delays, losses, processes
down, paused or cut off) is theirs."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import grpc

from runtime import world
from runtime.stubs import CallFailed

PEER = "ipv4:10.0.0.9:5000"  # the caller's address, as a handler reads it (a rate limiter's key)


class Aborted(Exception):
    """A call its handler ended with a status (grpc.ServicerContext.abort raises)."""


class Context:
    """What a handler reads of its call (grpc.ServicerContext): the deadline (None: none),
    the metadata (a user's token), the peer; and its abort."""

    def __init__(self, deadline: float | None, metadata: Any = ()) -> None:
        self.deadline, self.metadata = deadline, tuple(metadata or ())
        self.trailers: tuple[tuple[str, str], ...] = ()
        self.cancelled = False

    def time_remaining(self) -> float | None:
        return None if self.deadline is None else max(0.0, self.deadline - world.monotonic())

    def invocation_metadata(self) -> tuple[Any, ...]:
        return self.metadata

    def peer(self) -> str:
        return PEER

    def set_trailing_metadata(self, trailers: Any) -> None:
        self.trailers = tuple(trailers)

    def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise Aborted(CallFailed(code, details, self.trailers))

    def code(self) -> None:
        return None

    def is_active(self) -> bool:
        return not self.cancelled and (self.deadline is None or world.monotonic() < self.deadline)


class _Details:
    def __init__(self, method: str, metadata: Any) -> None:
        self.method, self.invocation_metadata = method, tuple(metadata or ())


def method(services: Sequence[grpc.GenericRpcHandler], path: str,
           metadata: Any = ()) -> grpc.RpcMethodHandler:
    """The handler that serves `path` ("/package.Service/Method") among `services`."""
    for s in services:
        h = s.service(_Details(path, metadata))
        if h is not None:
            return h
    raise AssertionError(f"no service serves {path}")


def unary(services: Sequence[grpc.GenericRpcHandler], path: str, req: Any, ctx: Context,
          parse: Callable[[bytes], Any] | None = None) -> Any:
    """A unary call's answer (`parse`d from its bytes; by default as the response's own
    type), or the CallFailed it ended with."""
    h = method(services, path, ctx.metadata)
    try:
        out = h.unary_unary(req.SerializeToString(), ctx)
    except Aborted as e:  # the call's status, with its trailers
        return e.args[0]
    raw = h.response_serializer(out)
    return (parse or type(out).FromString)(raw)


def streamed(services: Sequence[grpc.GenericRpcHandler], path: str, req: Any, ctx: Context,
             parse: Callable[[bytes], Any] | None = None) -> Iterator[Any]:
    """A server-streaming call's messages as they come (each `parse`d from its bytes), the
    last a CallFailed if the call ended with a status."""
    h = method(services, path, ctx.metadata)
    try:
        for m in h.unary_stream(req.SerializeToString(), ctx):
            yield (parse or type(m).FromString)(h.response_serializer(m))
    except Aborted as e:
        yield e.args[0]


def answered(services: Sequence[grpc.GenericRpcHandler], path: str, req: Any, ctx: Context,
             parse: Callable[[bytes], Any] | None = None) -> Any:
    """A call's answer whatever its kind: a unary call's answer, a server-streaming call's
    messages together (a list); or the CallFailed it ended with."""
    if method(services, path, ctx.metadata).unary_stream is None:
        return unary(services, path, req, ctx, parse)
    got = list(streamed(services, path, req, ctx, parse))
    return got[-1] if got and isinstance(got[-1], CallFailed) else got
