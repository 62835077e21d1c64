"""The SDK on asyncio: `AsyncClient`, the same operations as `Client`, as coroutines, on
grpc's asyncio API (no thread waits for a call).

    async with AsyncClient(["127.0.0.1:7100"]) as db:
        await db.put("users", "u42", "name", b"Ada")
        v = await db.get("users", "u42", "name")

Each operation is checked and built exactly as Client builds it (the same code: an
operation is a `_Call`, which Client runs on blocking stubs and this runs on grpc.aio
stubs), so arguments, errors, retries (same request id, one deadline) and results are the
same. The single-key operations of an event loop's coroutines are coalesced as a Client's
threads' are (midtown/coalescing.py, AsyncCoalescer): while a call is in flight, new ones
queue and travel together in the next call."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc

from midtown import errors
from midtown.client import (
    WATCH_STREAM_S,
    Client,
    Item,
    ShardPage,
    _b,
    _Call,
    _mark_retry,
    _PagedScan,
    retry_or_raise,
)
from midtown.coalescing import AsyncCoalescer
from midtown.watch import Change, WatchState
from midtown_pb import kv_pb2_grpc
from runtime.transport import GRPC_OPTIONS


class _Builder(Client):
    """Client's operations, built and checked but not run: each returns its _Call."""

    def _do(self, c: _Call) -> Any:
        return c


class AsyncClient:
    def __init__(self, coordinators: str | list[str] | None = None, *, zk: str | None = None,
                 timeout: float = 10.0, retries: int = 8, token: str | None = None,
                 tls_ca: bytes | str | None = None, coalesce: bool = True, route: bool = True) -> None:
        """The same arguments as Client's."""
        self._b = _Builder(coordinators, zk=zk, timeout=timeout, retries=retries, token=token,
                           tls_ca=tls_ca, coalesce=False, route=route)
        self._stubs: dict[str, kv_pb2_grpc.KVStub] = {}
        self._channels: list[grpc.aio.Channel] = []
        self._coalescer = AsyncCoalescer(self._call) if coalesce else None

    @property
    def coalescing(self) -> tuple[int, int]:
        """(calls, operations) the coalescer has sent."""
        c = self._coalescer
        return (c.calls, c.operations) if c is not None else (0, 0)

    async def close(self) -> None:
        for ch in self._channels:
            await ch.close()
        if self._b._routes is not None:
            self._b._routes.stop()
        if self._b._zk is not None:
            await asyncio.to_thread(self._b.close)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *a: object) -> None:
        await self.close()

    def __getattr__(self, name: str) -> Callable[..., Any]:
        """Client's operations (get, put, delete, cas, incr, batch, write_many, shards,
        scan), as coroutines."""
        if name.startswith("_"):  # the methods of its own (scan_shard, scan_all, ...) come first
            raise AttributeError(name)
        build = getattr(self._b, name)
        if not callable(build):
            raise AttributeError(name)

        async def operation(*args: Any, **kwargs: Any) -> Any:
            c: _Call = build(*args, **kwargs)
            to = self._b._route_of(c.method, c.req) if c.single else None
            if c.single and self._coalescer is not None:
                return c.decode(await self._coalescer.call(c.method, c.req, self._b._timeout(c.timeout), to))
            return c.decode(await self._call(c.method, c.req, c.timeout, to))

        return operation

    def coordinator_for(self, dataset: str, partition: str | bytes) -> str | None:
        """As Client.coordinator_for (no I/O: routes are read in the background)."""
        return self._b.coordinator_for(dataset, partition)

    # ------------------------------------------------------------ plumbing
    async def coordinators(self, refresh: bool = False) -> list[str]:
        found = self._b._known_coordinators(refresh)
        if found is not None:  # no thread hop while the list is fresh
            return found
        return await asyncio.to_thread(self._b.coordinators, refresh)  # ZooKeeper: blocking

    def _stub(self, addr: str) -> kv_pb2_grpc.KVStub:
        s = self._stubs.get(addr)
        if s is None:
            creds = self._b._creds
            ch = (grpc.aio.insecure_channel(addr, options=GRPC_OPTIONS) if creds is None
                  else grpc.aio.secure_channel(addr, creds, options=GRPC_OPTIONS))
            self._channels.append(ch)
            s = self._stubs[addr] = kv_pb2_grpc.KVStub(ch)
        return s

    async def _call(self, method: str, req: Any, timeout: float | None, to: str | None = None) -> Any:
        """Call with retries under one deadline; the request id stays the same (as Client._call)."""
        deadline = time.monotonic() + self._b._timeout(timeout)
        addr = to or self._b._pick(await self.coordinators())
        backoff = 0.02
        for attempt in range(self._b.retries + 1):
            left = deadline - time.monotonic()
            if left <= 0:
                raise errors.DeadlineExceeded(f"{method}: no answer within the deadline")
            try:
                if attempt:
                    _mark_retry(req)
                return await getattr(self._stub(addr), method)(req, timeout=left, metadata=self._b._metadata)
            except grpc.RpcError as e:
                if retry_or_raise(e, attempt, self._b.retries):
                    if self._b._routes is not None:
                        self._b._routes.failed(addr)
                    addr = self._b._pick(await self.coordinators(refresh=True), failed=addr)
                await asyncio.sleep(min(backoff * (1 + random.random()),
                                        max(0.0, deadline - time.monotonic())))
                backoff = min(backoff * 2, 1.0)
        raise AssertionError("unreachable")

    # ------------------------------------------------------------ multi-call operations
    async def scan_shard(self, dataset: str, shard: int, *, consistency: str = "strong", page: int = 1000,
                         max_bytes: int = 0, partition_key: str | bytes | None = None, token: bytes = b"",
                         timeout: float | None = None) -> AsyncIterator[ShardPage]:
        """As Client.scan_shard: the pages as they come."""
        scan = _PagedScan(self._b._scan_shard_request(dataset, shard, consistency, page, max_bytes,
                                                      partition_key, token),
                          self._b.retries, timeout or max(self._b.timeout, 60.0))
        while True:
            addr = self._b._pick(await self.coordinators(refresh=scan.attempt > 0))
            try:
                async for m in self._stub(addr).ScanShard(scan.req, timeout=scan.wait_s,
                                                          metadata=self._b._metadata):
                    yield scan.page(m)
                    if scan.done:
                        return
                raise AssertionError("a shard scan's stream ended before its last page")
            except grpc.RpcError as e:
                await asyncio.sleep(scan.failed(e))

    async def positions(self, dataset: str, *, partition_key: str | bytes | None = None,
                        timeout: float | None = None) -> dict[int, int]:
        """As Client.positions (one short call, made on a thread)."""
        return await asyncio.to_thread(self._b.positions, dataset, partition_key=partition_key,
                                       timeout=timeout)

    def watch(self, dataset: str, start: str | dict[int, int] = "now", *,
              partition_key: str | bytes | None = None, until: dict[int, int] | None = None,
              timeout: float | None = None) -> AsyncWatcher:
        """As Client.watch: `async for change in db.watch(...)`; the watcher's `positions`
        is the resume point, `close()` ends it."""
        b = self._b
        pk = None if partition_key is None else _b(partition_key, "partition_key")
        return AsyncWatcher(self, WatchState(b._header(dataset, None), start, pk,
                                             timeout or max(b.timeout, 60.0), until))

    async def scan_all(self, dataset: str, partition: str | bytes, *, start: str | bytes = b"",
                       end: str | bytes = b"", page: int = 100,
                       consistency: str = "strong") -> AsyncIterator[Item]:
        """As Client.scan_all: every item of a partition, page by page."""
        cur = _b(start)
        while True:
            p = await self.scan(dataset, partition, start=cur, end=end, limit=page, consistency=consistency)
            for item in p.items:
                yield item
            if not p.next:
                return
            cur = p.next


class AsyncWatcher:
    """Client.watch's Watcher on asyncio: an async iterator of changes."""

    def __init__(self, client: AsyncClient, state: WatchState) -> None:
        self._c = client
        self.state = state
        self.call: Any = None

    @property
    def positions(self) -> dict[int, int]:
        return dict(self.state.positions or {})

    def close(self) -> None:
        self.state.closed = True
        if self.call is not None:
            self.call.cancel()

    def __aiter__(self) -> AsyncIterator[Change]:
        return self._changes()

    async def _changes(self) -> AsyncIterator[Change]:
        state, b = self.state, self._c._b
        while not state.closed:
            addr = b._pick(await self._c.coordinators(refresh=state.avoid is not None), failed=state.avoid)
            try:
                self.call = call = self._c._stub(addr).Watch(state.request(), timeout=WATCH_STREAM_S,
                                                             metadata=b._metadata)
                if state.closed:  # closed while the call was made: close() found none to cancel
                    call.cancel()
                async for m in call:
                    for change in state.take(m):
                        yield change
                    if state.done():
                        self.call.cancel()
                        return
                state.avoid = None
            except grpc.RpcError as e:
                wait = state.failed(e, addr)
                if wait is None:
                    return
                await asyncio.sleep(wait)
            except asyncio.CancelledError:
                if state.closed:
                    return
                raise
