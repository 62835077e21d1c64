"""The SDK on asyncio: `AsyncClient`, the same operations as `Client`, as coroutines, on
grpc's asyncio API (no thread waits for a call).

    async with AsyncClient(["127.0.0.1:7100"]) as db:
        await db.put("users", "u42", "name", b"Ada")
        v = await db.get("users", "u42", "name")

Each operation is a typed coroutine with Client's signature, checked and built exactly as
Client builds it (the same code: an operation is a `_Call`, which Client runs on blocking
stubs and this runs on grpc.aio stubs), so arguments, errors and results are the same, and
so are retries: one policy for both (midtown/retries.py: the same request id, one
deadline). The single-key operations of an event loop's coroutines are coalesced as a Client's
threads' are (midtown/coalescing.py, AsyncCoalescer): while a call is in flight, new ones
queue and travel together in the next call."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc

from midtown.checks import Key, to_bytes, to_dc
from midtown.client import WATCH_STREAM_S
from midtown.coalescing import AsyncCoalescer
from midtown.endpoints import Endpoints
from midtown.model import (
    BatchResult,
    CasResult,
    Item,
    Op,
    ScanPage,
    ShardPage,
    ShardSplits,
    Value,
    Write,
    WriteOutcome,
)
from midtown.operations import Call, Operations, PagedScan
from midtown.retries import Attempts
from midtown.watch import Change, WatchState
from midtown_pb import kv_pb2_grpc
from runtime import tracing
from runtime.transport import CLIENT_GRPC_OPTIONS


class _Builder(Operations):
    """The operations, built and checked but not run: each returns its Call."""

    def _do(self, c: Call) -> Any:
        return c


class AsyncClient:
    def __init__(self, coordinators: str | list[str] | None = None, *, zk: str | None = None,
                 timeout: float = 10.0, retries: int = 8, token: str | None = None,
                 tls_ca: bytes | str | None = None, coalesce: bool = True, route: bool = True,
                 known_down_s: float | None = None, dc: str | None = None) -> None:
        """The same arguments as Client's."""
        self._b = _Builder()
        self._b.dc = to_dc(dc)  # as Client's
        self.endpoints = Endpoints(coordinators, zk, timeout=timeout, retries=retries, token=token,
                                   tls_ca=tls_ca, route=route, known_down_s=known_down_s, dc=self._b.dc)
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
        if self.endpoints.has_session:
            await asyncio.to_thread(self.endpoints.close)  # a ZooKeeper session's close blocks
        else:
            self.endpoints.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *a: object) -> None:
        await self.close()

    # ------------------------------------------------------------ operations (as Client's)
    async def get(self, dataset: str, partition: Key, local: Key = b"", *, consistency: str = "strong",
                  max_staleness_ms: int | None = None, timeout: float | None = None) -> Value | None:
        return await self._run(self._b.get(dataset, partition, local, consistency=consistency,
                                           max_staleness_ms=max_staleness_ms, timeout=timeout))

    async def put(self, dataset: str, partition: Key, local: Key, value: bytes, *, ttl_ms: int = 0,
                  request_id: bytes | None = None, event_id: bytes | str | None = None,
                  timeout: float | None = None) -> int:
        """The new version (Client.put)."""
        return await self._run(self._b.put(dataset, partition, local, value, ttl_ms=ttl_ms,
                                           request_id=request_id, event_id=event_id, timeout=timeout))

    async def delete(self, dataset: str, partition: Key, local: Key = b"", *,
                     request_id: bytes | None = None, timeout: float | None = None) -> int:
        """How many keys were deleted: 1, or 0 when there was none."""
        return await self._run(self._b.delete(dataset, partition, local, request_id=request_id,
                                              timeout=timeout))

    async def cas(self, dataset: str, partition: Key, local: Key, new_value: bytes = b"", *,
                  expected: bytes | None = None, expect_absent: bool = False, expected_version: int = 0,
                  delete: bool = False, ttl_ms: int = 0, request_id: bytes | None = None,
                  timeout: float | None = None) -> CasResult:
        return await self._run(self._b.cas(dataset, partition, local, new_value, expected=expected,
                                           expect_absent=expect_absent, expected_version=expected_version,
                                           delete=delete, ttl_ms=ttl_ms, request_id=request_id,
                                           timeout=timeout))

    async def incr(self, dataset: str, partition: Key, local: Key, delta: int = 1, *, ttl_ms: int = 0,
                   request_id: bytes | None = None, event_id: bytes | str | None = None,
                   timeout: float | None = None) -> int:
        """The new value (Client.incr)."""
        return await self._run(self._b.incr(dataset, partition, local, delta, ttl_ms=ttl_ms,
                                            request_id=request_id, event_id=event_id, timeout=timeout))

    async def batch(self, dataset: str, ops: list[Op], *, request_id: bytes | None = None,
                    event_id: bytes | str | None = None, timeout: float | None = None) -> BatchResult:
        """Operations on one partitioning key, applied atomically: all or none."""
        return await self._run(self._b.batch(dataset, ops, request_id=request_id, event_id=event_id,
                                             timeout=timeout))

    async def write_many(self, dataset: str, writes: list[Write], *, request_id: bytes | None = None,
                         timeout: float | None = None) -> list[WriteOutcome]:
        """Many independent writes in one call (Client.write_many)."""
        return await self._run(self._b.write_many(dataset, writes, request_id=request_id, timeout=timeout))

    async def shards(self, dataset: str, *, timeout: float | None = None) -> int:
        return await self._run(self._b.shards(dataset, timeout=timeout))

    async def shard_splits(self, dataset: str, shard: int, *, split_bytes: int = 0,
                           consistency: str = "strong", partition_key: Key | None = None,
                           timeout: float | None = None) -> ShardSplits:
        return await self._run(self._b.shard_splits(dataset, shard, split_bytes=split_bytes,
                                                    consistency=consistency, partition_key=partition_key,
                                                    timeout=timeout))

    async def scan(self, dataset: str, partition: Key, *, start: Key = b"", end: Key = b"",
                   limit: int = 100, consistency: str = "strong", max_staleness_ms: int | None = None,
                   timeout: float | None = None) -> ScanPage:
        return await self._run(self._b.scan(dataset, partition, start=start, end=end, limit=limit,
                                            consistency=consistency, max_staleness_ms=max_staleness_ms,
                                            timeout=timeout))

    async def _run(self, c: object) -> Any:
        """Run an operation Client built and checked (its _Call: _Builder returns it in
        place of the result) on grpc.aio: coalesced if it is single-key."""
        assert isinstance(c, Call), c
        with tracing.span(c.method):  # runtime/tracing.py
            return await self._ran(c)

    async def _ran(self, c: Call) -> Any:
        to = self.endpoints.route_of(c.method, c.req) if c.single else None
        if c.single and self._coalescer is not None:
            t = self.endpoints.deadline(c.timeout)
            return c.decode(await self._coalescer.call(c.method, c.req, t, to))
        return c.decode(await self._call(c.method, c.req, c.timeout, to))

    def coordinator_for(self, dataset: str, partition: str | bytes) -> str | None:
        """As Client.coordinator_for (no I/O: routes are read in the background)."""
        return self.endpoints.coordinator_for(dataset, partition)

    # ------------------------------------------------------------ plumbing
    async def coordinators(self, refresh: bool = False, wait_s: float | None = None) -> list[str]:
        found = self.endpoints.known(refresh)
        if found is not None:  # no thread hop while the list is fresh
            return found
        # it waits (at most wait_s) only when no coordinator is known yet
        return await asyncio.to_thread(self.endpoints.coordinators, refresh, wait_s)

    def _stub(self, addr: str) -> kv_pb2_grpc.KVStub:
        s = self._stubs.get(addr)
        if s is None:
            creds = self.endpoints.credentials
            ch = (grpc.aio.insecure_channel(addr, options=CLIENT_GRPC_OPTIONS) if creds is None
                  else grpc.aio.secure_channel(addr, creds, options=CLIENT_GRPC_OPTIONS))
            self._channels.append(ch)
            s = self._stubs[addr] = kv_pb2_grpc.KVStub(ch)
        return s

    async def _call(self, method: str, req: Any, timeout: float | None, to: str | None = None,
                    first_message: bool = False) -> Any:
        """Call with retries under one deadline; the request id stays the same (as Client's).
        `first_message`: a streaming call, of which the first message is the answer."""
        ends = self.endpoints
        # midtown/retries.py
        attempts = Attempts(method, ends.retries, ends.deadline(timeout), ends.known_down_s)
        addr = to or ends.pick(await self.coordinators(wait_s=attempts.left()))
        while True:
            left = attempts.start(req)
            try:
                with tracing.span("attempt", to=addr):
                    call = getattr(self._stub(addr), method)(req, timeout=left, metadata=ends.metadata)
                    if not first_message:
                        return await call
                    try:
                        return await call.read()
                    finally:
                        call.cancel()
            except grpc.RpcError as e:
                if attempts.unanswered(e):
                    ends.unanswered(addr)
                down = (await asyncio.to_thread(ends.known_down, addr, e)
                        if ends.known_down_s is not None else None)
                switch, pause = attempts.failed(e, down)
                if switch:
                    addr = ends.switch(addr, await self.coordinators(refresh=True, wait_s=attempts.left()))
                await asyncio.sleep(pause)

    # ------------------------------------------------------------ multi-call operations
    async def scan_shard(self, dataset: str, shard: int, *, consistency: str = "strong", page: int = 1000,
                         max_bytes: int = 0, partition_key: str | bytes | None = None, token: bytes = b"",
                         timeout: float | None = None, arrow: bool = False) -> AsyncIterator[ShardPage]:
        """As Client.scan_shard: the pages as they come."""
        ends = self.endpoints
        scan = PagedScan(self._b.scan_shard_request(dataset, shard, consistency, page, max_bytes,
                                                    partition_key, token, arrow),
                         ends.retries, timeout or max(ends.timeout, 60.0))
        while True:
            addr = ends.pick(await self.coordinators(refresh=scan.attempt > 0))
            try:
                async for m in self._stub(addr).ScanShard(scan.req, timeout=scan.wait_s,
                                                          metadata=ends.metadata):
                    yield scan.page(m)
                    if scan.done:
                        return
                raise AssertionError("a shard scan's stream ended before its last page")
            except grpc.RpcError as e:
                await asyncio.sleep(scan.failed(e))

    async def positions(self, dataset: str, *, partition_key: str | bytes | None = None,
                        timeout: float | None = None) -> dict[int, int]:
        """As Client.positions: the first message of a watch from now."""
        req = self._b.positions_request(dataset, partition_key, self.endpoints.deadline(timeout))
        return dict((await self._call("Watch", req, timeout, first_message=True)).positions)

    def watch(self, dataset: str, start: str | dict[int, int] = "now", *,
              partition_key: str | bytes | None = None, until: dict[int, int] | None = None,
              timeout: float | None = None) -> AsyncWatcher:
        """As Client.watch: `async for change in db.watch(...)`; the watcher's `positions`
        is the resume point, `close()` ends it."""
        state = self._b.watch_state(dataset, start, partition_key, until,
                                    timeout or max(self.endpoints.timeout, 60.0))
        return AsyncWatcher(state, self._watch_streams)

    async def _watch_streams(self, w: AsyncWatcher) -> AsyncIterator[Change]:
        try:
            async for c in self._watched(w):
                yield c
        finally:
            w.state.end()

    async def _watched(self, w: AsyncWatcher) -> AsyncIterator[Change]:
        state, ends = w.state, self.endpoints
        while not state.closed:
            addr = ends.pick(await self.coordinators(refresh=state.avoid is not None), failed=state.avoid)
            try:
                w.call = call = self._stub(addr).Watch(state.request(), timeout=WATCH_STREAM_S,
                                                       metadata=state.metadata(ends.token_metadata))
                if state.closed:  # closed while the call was made: close() found none to cancel
                    call.cancel()
                async for m in call:
                    for change in state.take(m):
                        yield change
                    if state.done():
                        w.call.cancel()
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

    async def scan_all(self, dataset: str, partition: str | bytes, *, start: str | bytes = b"",
                       end: str | bytes = b"", page: int = 100,
                       consistency: str = "strong") -> AsyncIterator[Item]:
        """As Client.scan_all: every item of a partition, page by page."""
        cur = to_bytes(start)
        while True:
            p = await self.scan(dataset, partition, start=cur, end=end, limit=page, consistency=consistency)
            for item in p.items:
                yield item
            if not p.next:
                return
            cur = p.next


class AsyncWatcher:
    """Client.watch's Watcher on asyncio: an async iterator of changes."""

    def __init__(self, state: WatchState, streams: Callable[[AsyncWatcher], AsyncIterator[Change]]) -> None:
        self.state = state
        self.call: Any = None
        self._streams = streams

    @property
    def positions(self) -> dict[int, int]:
        return dict(self.state.positions or {})

    def close(self) -> None:
        self.state.end()
        if self.call is not None:
            self.call.cancel()

    def __aiter__(self) -> AsyncIterator[Change]:
        return self._streams(self)
