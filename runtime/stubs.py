"""The shape of a server-to-server network port for one gRPC service: a unary call or a
server stream, named by method, to the process at an address, with the service's own
messages (`Calls`); and its gRPC backend (`Stubs`, a stub per address). A failed call
raises grpc.RpcError in every backend (`CallFailed` where no gRPC call was made), so a
caller handles one kind of failure whatever carries its calls. The storage nodes reach
their peers (storage_node/state.py peer_calls), and the coordinator the storage nodes
(coordinator/storage_link.py), this way."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol

import grpc

from runtime import tracing, transport, world


class Calls(Protocol):
    def call(self, addr: str, method: str, req: Any, timeout_s: float) -> Any:
        """The unary call `method` at `addr`: its answer (grpc.RpcError when it fails)."""

    def stream(self, addr: str, method: str, req: Any, timeout_s: float) -> tuple[Iterator[Any], Any]:
        """The server stream `method` at `addr`: its messages (grpc.RpcError when it fails),
        and its call to cancel (None where there is none)."""


class CallFailed(grpc.RpcError):
    """A call that failed without gRPC (an in-process or simulated backend), as gRPC's own
    error reports it: code(), details() and trailing_metadata()."""

    def __init__(self, code: grpc.StatusCode, details: str,
                 trailers: tuple[tuple[str, str], ...] = ()) -> None:
        super().__init__(f"{code.name}: {details}")
        self._code, self._details, self._trailers = code, details, trailers

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._trailers


class Stubs:
    """Every process serving one service, by gRPC: a channel and a stub per address."""

    def __init__(self, make_stub: Callable[[grpc.Channel], Any]) -> None:
        self._make = make_stub
        self._stubs: dict[str, Any] = {}
        self._channels: list[grpc.Channel] = []
        self._lock = world.lock()

    def stub(self, addr: str) -> Any:
        stub = self._stubs.get(addr)
        if stub is None:
            with self._lock:
                stub = self._stubs.get(addr)
                if stub is None:
                    ch = transport.channel(addr)
                    self._channels.append(ch)
                    stub = self._stubs[addr] = self._make(ch)
        return stub

    def call(self, addr: str, method: str, req: Any, timeout_s: float) -> Any:
        return getattr(self.stub(addr), method)(req, timeout=timeout_s, metadata=tracing.headers(None))

    def stream(self, addr: str, method: str, req: Any, timeout_s: float) -> tuple[Iterator[Any], Any]:
        call = getattr(self.stub(addr), method)(req, timeout=timeout_s, metadata=tracing.headers(None))
        return iter(call), call

    def close(self) -> None:
        for ch in self._channels:
            ch.close()
