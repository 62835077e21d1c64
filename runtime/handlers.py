"""How every gRPC method of the log servers, the storage nodes and the coordinators ends:
the one place where a refusal becomes a status (issue 34).

Each method is registered through `unary`, `unary_stream` or `stream_stream` here. The
request is parsed from its bytes (INVALID_ARGUMENT "request: not a valid X" when it is not
one) and handed to the method with the call's context. A `Refusal` (runtime/refusals.py)
raised anywhere below ends the call with its code, its "field: message" text and its
trailers; an expected fault (ZooKeeper or a peer away: runtime/faults.py) ends it with
UNAVAILABLE, logged as one line; any other exception ends it with INTERNAL naming the
method, and is logged with its traceback, never with gRPC's bare UNKNOWN. Nothing below
refuses through the context: cores raise Refusal (BadRequest for what a client sent),
shells let it through."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NoReturn

import grpc
from google.protobuf.message import DecodeError

from runtime import faults, tracing, world
from runtime.refusals import BadRequest, Refusal

log = logging.getLogger("midtown.handlers")
# Expected failures of calls, one line per method and episode (runtime/faults.py Calls).
_calls = faults.Calls(log, lambda: world.monotonic())

# (method name, code name) of each call as it ends: a server's request counter.
Outcome = Callable[[str, str], None]
# The INTERNAL text for a method (a server may say more: what a client should do).
Internal = Callable[[str], str]


def _serialize(m: Any) -> bytes:
    return m.SerializeToString()  # type: ignore[no-any-return]


def _identity(b: bytes) -> bytes:
    return b


def parse(cls: Any, raw: bytes) -> Any:
    """A request message from its bytes; BadRequest naming the type when they are not one."""
    try:
        return cls.FromString(raw)
    except DecodeError:
        raise BadRequest(f"not a valid {cls.__name__}", field="request") from None


def _internal_text(name: str) -> str:
    return f"{name}: internal error (the server's log has the details)"


def refusal_for(name: str, e: BaseException, internal: Internal | None = None,
                fault: Callable[[str], str] | None = None) -> Refusal:
    """What the exception `e` raised by method `name` ends its call with: a Refusal as it
    is; an expected fault (ZooKeeper or a peer away: runtime/faults.py) UNAVAILABLE, logged
    as one line (`fault(line)`: its text, "name: line; retry" by default); anything else
    INTERNAL (`internal(name)`: its text), logged with its traceback (a defect). A
    coordinator's Many item ends so too, as an answer of its own (coordinator/server.py)."""
    if isinstance(e, Refusal):
        return e
    if faults.expected(e):
        _calls.failed(name, e)
        line = faults.one_line(e)
        return Refusal(grpc.StatusCode.UNAVAILABLE, fault(line) if fault else f"{name}: {line}; retry")
    log.error("%s failed", name, exc_info=e)
    return Refusal(grpc.StatusCode.INTERNAL, (internal or _internal_text)(name))


def end(name: str, e: BaseException, ctx: grpc.ServicerContext, internal: Internal | None,
        outcome: Outcome | None) -> NoReturn:
    """End the call `ctx` for exception `e` raised by method `name`: the one place a
    refusal becomes a gRPC status."""
    if not isinstance(e, Refusal):
        if ctx.code() is not None:  # grpc's own abort, or a status the method set: decided already
            raise e
        if not ctx.is_active() and not faults.expected(e):
            raise e  # the call ended under the method (the client went away): no one to tell
        # (an expected fault after the client went away ends as one line and an abort no one
        # hears: raised, gRPC would log it with its traceback)
    r = refusal_for(name, e, internal)
    if outcome:
        outcome(name, r.code.name)
    r.abort(ctx)


def traced(name: str, ctx: grpc.ServicerContext, root: bool) -> Any:
    """The span of a call of method `name` while tracing is on (runtime/tracing.py): a child
    of the caller's when its metadata carries one, else (a `root` method: an operation a
    client asks for) a new trace sampled by this process's ratio, else none."""
    if not tracing.on():
        return tracing.OFF
    return tracing.served(name, ctx.invocation_metadata(), root)


def unary(name: str, cls: Any, fn: Callable[[Any, grpc.ServicerContext], Any], *,
          internal: Internal | None = None, outcome: Outcome | None = None,
          serialize: Callable[[Any], bytes] = _serialize, root: bool = False) -> grpc.RpcMethodHandler:
    """A unary method: `fn(request, ctx)` -> response. Traced (`traced`) while tracing is on."""
    def handle(raw: bytes, ctx: grpc.ServicerContext) -> Any:
        try:
            with traced(name, ctx, root):
                out = fn(parse(cls, raw), ctx)
        except Exception as e:
            end(name, e, ctx, internal, outcome)
        if outcome:
            outcome(name, "OK")
        return out
    return grpc.unary_unary_rpc_method_handler(handle, request_deserializer=_identity,
                                               response_serializer=serialize)


def _streamed(name: str, parts: Callable[[], Iterable[Any]], ctx: grpc.ServicerContext,
              internal: Internal | None, outcome: Outcome | None, root: bool) -> Iterator[Any]:
    try:
        with traced(name, ctx, root):
            yield from parts()
    except Exception as e:
        end(name, e, ctx, internal, outcome)
    if outcome:
        outcome(name, "OK")


def unary_stream(name: str, cls: Any, fn: Callable[[Any, grpc.ServicerContext], Iterable[Any]], *,
                 internal: Internal | None = None, outcome: Outcome | None = None,
                 serialize: Callable[[Any], bytes] = _serialize, root: bool = False) -> grpc.RpcMethodHandler:
    """A method answering with a stream: `fn(request, ctx)` -> its messages. A refusal
    before the first message or between two ends the stream with its status."""
    def handle(raw: bytes, ctx: grpc.ServicerContext) -> Iterator[Any]:
        return _streamed(name, lambda: fn(parse(cls, raw), ctx), ctx, internal, outcome, root)
    return grpc.unary_stream_rpc_method_handler(handle, request_deserializer=_identity,
                                                response_serializer=serialize)


def stream_stream(name: str, cls: Any,
                  fn: Callable[[Iterator[Any], grpc.ServicerContext], Iterable[Any]], *,
                  internal: Internal | None = None, outcome: Outcome | None = None,
                  serialize: Callable[[Any], bytes] = _serialize) -> grpc.RpcMethodHandler:
    """A method taking and answering streams: `fn(requests, ctx)` -> its messages, each
    request parsed as it is taken (one that is not a `cls` ends the call)."""
    def handle(raws: Iterator[bytes], ctx: grpc.ServicerContext) -> Iterator[Any]:
        return _streamed(name, lambda: fn((parse(cls, raw) for raw in raws), ctx), ctx, internal, outcome,
                         False)
    return grpc.stream_stream_rpc_method_handler(handle, request_deserializer=_identity,
                                                 response_serializer=serialize)
