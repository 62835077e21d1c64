"""The Python SDK: `from midtown import Client, AsyncClient`.

    c = Client(zk="127.0.0.1:2181")          # or Client(["127.0.0.1:7100", ...])
    c.put("users", "u42", "name", b"Ada")
    c.get("users", "u42", "name")            # Value(value=b'Ada', version=..., expires_at_ms=0)

Every call has a deadline (`timeout`, seconds) and is retried on UNAVAILABLE and
DEADLINE_EXCEEDED with the same request id, so a retry never applies twice: the store
returns the first outcome.

The operations are built and checked in midtown/operations.py (shared with AsyncClient),
sent where midtown/endpoints.py says, and retried as midtown/retries.py says; this module
runs them on blocking gRPC stubs."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import grpc

from midtown.checks import Key, to_bytes, to_dc
from midtown.coalescing import Coalescer
from midtown.endpoints import Endpoints
from midtown.model import (  # noqa: F401  (the SDK's types, importable from here as before)
    BatchResult,
    CasResult,
    Item,
    Op,
    OpOutcome,
    ScanPage,
    ShardItem,
    ShardPage,
    ShardSplit,
    ShardSplits,
    Value,
    Write,
    WriteOutcome,
)
from midtown.operations import Call, Operations, PagedScan
from midtown.retries import Attempts
from midtown.watch import Change, WatchState
from midtown_pb import kv_pb2_grpc
from runtime import tracing, world
from runtime.transport import CLIENT_GRPC_OPTIONS

# Each failed attempt of a call, at DEBUG (the coordinator, why, the time left): where a
# slow call spent its deadline (tests/integration/quiet_machines.py writes them to a file).
log = logging.getLogger("midtown.client")

# A watch's streams end after a minute (the coordinator's default), and are started again.
WATCH_STREAM_S = 90.0


class Watcher:
    """The changes of a watch (Client.watch), as an iterator; `positions`: the resume point
    (every change below it, per shard, has been handed over); `close()`: end it, from any
    thread."""

    def __init__(self, state: WatchState, streams: Callable[[Watcher], Iterator[Change]]) -> None:
        self.state = state
        self.call: Any = None
        self._it = streams(self)

    @property
    def positions(self) -> dict[int, int]:
        return dict(self.state.positions or {})

    def __iter__(self) -> Watcher:
        return self

    def __next__(self) -> Change:
        return next(self._it)

    def close(self) -> None:
        self.state.end()
        if self.call is not None:
            self.call.cancel()

    def __enter__(self) -> Watcher:
        return self

    def __exit__(self, *a: object) -> None:
        self.close()


class Client(Operations):
    def __init__(self, coordinators: str | list[str] | None = None, *, zk: str | None = None,
                 timeout: float = 10.0, retries: int = 8, token: str | None = None,
                 tls_ca: bytes | str | None = None, coalesce: bool = True, route: bool = True,
                 known_down_s: float | None = None, link: Callable[[str], Any] | None = None,
                 dc: str | None = None) -> None:
        """`token`: a user's token (`midtown user add`), for datasets with an access list.
        `tls_ca`: call over TLS, trusting this CA (PEM bytes, or the path of a PEM file).
        `coalesce`: single-key operations that threads issue while a call is in flight go
        together in the next call (midtown/coalescing.py); a lone caller is not delayed.
        `route` (with `zk`): send a key's operations to the coordinator beside its log's
        writer where there is one (the host layout; midtown/routes.py).
        `known_down_s`: raise Unavailable once ZooKeeper, or every coordinator tried, has
        refused connections for this long (a wrong address, a stopped cluster), as the
        `midtown` command does with 1 s; by default (None) a call retries until its deadline,
        riding out a coordinator's restart. A server that does not answer is waited for.
        `link`: the way to a coordinator, a KV stub for its address (by default one on a gRPC
        channel; the seeded simulation, tests/sim/clients.py, gives one on its network).
        `dc`: the data center this client runs in: it calls the coordinators registered
        there first (with zk=), and bounded reads are served by replicas there (get and scan
        with consistency="bounded")."""
        self.dc = to_dc(dc)
        self.endpoints = Endpoints(coordinators, zk, timeout=timeout, retries=retries, token=token,
                                   tls_ca=tls_ca, route=route, known_down_s=known_down_s, dc=self.dc)
        self._link = link
        self._stubs: dict[str, kv_pb2_grpc.KVStub] = {}
        self._channels: list[grpc.Channel] = []
        self._lock = world.lock()
        self._coalescer = Coalescer(self._call) if coalesce else None

    @property
    def timeout(self) -> float:
        """The default deadline of a call, in seconds."""
        return self.endpoints.timeout

    @property
    def retries(self) -> int:
        return self.endpoints.retries

    @property
    def coalescing(self) -> tuple[int, int]:
        """(calls, operations) the coalescer has sent: how well operations travel together."""
        c = self._coalescer
        return (c.calls, c.operations) if c is not None else (0, 0)

    def close(self) -> None:
        for ch in self._channels:
            ch.close()
        self.endpoints.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *a: object) -> None:
        self.close()

    def coordinators(self, refresh: bool = False) -> list[str]:
        """The coordinators to use: the addresses given, or those registered in ZooKeeper."""
        return self.endpoints.coordinators(refresh)

    def coordinator_for(self, dataset: str, partition: Key) -> str | None:
        """The coordinator this client sends the writes (put, delete, CAS, increment,
        batch) on `partition` of `dataset` to first: the one beside its log's writer (host
        layout), or None (any coordinator). Reads go to any coordinator. Routes are read in
        the background: None at first."""
        return self.endpoints.coordinator_for(dataset, partition)

    # ------------------------------------------------------------ running a call
    def _stub(self, addr: str) -> kv_pb2_grpc.KVStub:
        with self._lock:
            s = self._stubs.get(addr)
            if s is None and self._link is not None:
                s = self._stubs[addr] = self._link(addr)
            elif s is None:
                creds = self.endpoints.credentials
                ch = (grpc.insecure_channel(addr, options=CLIENT_GRPC_OPTIONS) if creds is None
                      else grpc.secure_channel(addr, creds, options=CLIENT_GRPC_OPTIONS))
                self._channels.append(ch)
                s = self._stubs[addr] = kv_pb2_grpc.KVStub(ch)
            return s

    def _do(self, c: Call) -> Any:
        """Run a built operation (AsyncClient runs the same ones on grpc.aio). A single-key
        one is coalesced with the other threads' (midtown/coalescing.py) unless the client
        was made with coalesce=False. Traced as the method's name (runtime/tracing.py)."""
        with tracing.span(c.method):
            return self._done(c)

    def _done(self, c: Call) -> Any:
        if not c.single:
            return c.decode(self._call(c.method, c.req, c.timeout))
        t = self.endpoints.deadline(c.timeout)
        to = self.endpoints.route_of(c.method, c.req)
        if self._coalescer is None:
            return c.decode(self._call(c.method, c.req, t, to))
        return c.decode(self._coalescer.call(c.method, c.req, t, to))

    def _call(self, method: str, req: Any, timeout: float | None, to: str | None = None,
              first_message: bool = False) -> Any:
        """Call with retries under one deadline; the request id stays the same. `to`: the
        coordinator to try first (a route), else one at random. `first_message`: a streaming
        call, of which the first message is the answer (the rest is cancelled)."""
        ends = self.endpoints
        # midtown/retries.py
        attempts = Attempts(method, ends.retries, ends.deadline(timeout), ends.known_down_s)
        addr = to or ends.pick(ends.coordinators(wait_s=attempts.left()))
        while True:
            left = attempts.start(req)
            try:
                with tracing.span("attempt", to=addr):
                    call = getattr(self._stub(addr), method)(req, timeout=left, metadata=ends.metadata)
                    if not first_message:
                        return call
                    try:
                        return next(call)
                    finally:
                        call.cancel()
            except grpc.RpcError as e:
                log.debug("%s attempt %d at %s: %s, %.2fs left", method, attempts.attempt + 1, addr,
                          e.code().name, attempts.left())
                if attempts.unanswered(e):
                    ends.unanswered(addr)
                switch, pause = attempts.failed(e, ends.known_down(addr, e))
                if switch:
                    addr = ends.switch(addr, ends.coordinators(refresh=True, wait_s=attempts.left()))
                world.sleep(pause)

    # ------------------------------------------------------------ operations of many calls
    def scan_shard(self, dataset: str, shard: int, *, consistency: str = "strong", page: int = 1000,
                   max_bytes: int = 0, partition_key: Key | None = None, token: bytes = b"",
                   timeout: float | None = None, arrow: bool = False) -> Iterator[ShardPage]:
        """Every live key of `dataset` in `shard` (of `partition_key` only, if given), page by
        page, all from one replica's view of its state at one log position (each page says
        it). Strong: that position is at or after every write acknowledged before the call.
        Pages hold at most `page` items and `max_bytes` bytes (0: 1 MiB); they are read as
        they are consumed, so memory stays at a page whatever the shard's size. A broken
        stream goes on from the last page's `next` (while the view lasts: 5 minutes idle);
        `token`: go on from a page's `next`, or read one split of `shard_splits`.
        `timeout`: how long to wait for a page (60 s at least by default). `arrow`: each page's
        items as one pyarrow.RecordBatch (`ShardPage.arrow`: partition_key, local_key, value,
        version, expires_at, null when none), built by the storage node, instead of `items`."""
        return self._shard_pages(PagedScan(self.scan_shard_request(dataset, shard, consistency, page,
                                                                   max_bytes, partition_key, token, arrow),
                                           self.retries, timeout or max(self.timeout, 60.0)))

    def _shard_pages(self, scan: PagedScan) -> Iterator[ShardPage]:
        ends = self.endpoints
        while True:
            addr = ends.pick(ends.coordinators(refresh=scan.attempt > 0))
            try:
                for m in self._stub(addr).ScanShard(scan.req, timeout=scan.wait_s, metadata=ends.metadata):
                    yield scan.page(m)
                    if scan.done:
                        return
                raise AssertionError("a shard scan's stream ended before its last page")
            except grpc.RpcError as e:
                world.sleep(scan.failed(e))

    def positions(self, dataset: str, *, partition_key: Key | None = None,
                  timeout: float | None = None) -> dict[int, int]:
        """Where each shard of `dataset` (or the partitioning key's shard) stands now: every
        write acknowledged before the call is below it. A watch from these positions gets
        every later change; `watch(dataset, start=a, until=b)` reads those between two."""
        req = self.positions_request(dataset, partition_key, self.endpoints.deadline(timeout))
        m = self._call("Watch", req, timeout, first_message=True)
        return dict(m.positions)

    def watch(self, dataset: str, start: str | dict[int, int] = "now", *,
              partition_key: Key | None = None, until: dict[int, int] | None = None,
              timeout: float | None = None) -> Watcher:
        """Every committed change of a strong dataset (of `partition_key` only, if given), in
        log order per shard, from `start`: "now" (after every write acknowledged before the
        call) or positions per shard (a Watcher's `positions`, kept from before). Iterate the
        Watcher for its changes; it waits for new ones until closed. A position no longer
        held (older than the cluster's change retention, an hour by default) raises
        OutOfRange naming the first one held. `until`: end positions per shard of `start`:
        the watch ends once it has handed over every change below them (a closed range, read
        the same every time: Spark's streaming reads use it). `timeout`: how long the cluster
        may be unreachable before the watch raises (60 s at least by default). docs/api.md."""
        state = self.watch_state(dataset, start, partition_key, until, timeout or max(self.timeout, 60.0))
        return Watcher(state, self._watch_streams)

    def _watch_streams(self, w: Watcher) -> Iterator[Change]:
        try:
            yield from self._watched(w)
        finally:
            w.state.end()

    def _watched(self, w: Watcher) -> Iterator[Change]:
        state, ends = w.state, self.endpoints
        while not state.closed:
            addr = ends.pick(ends.coordinators(refresh=state.avoid is not None), failed=state.avoid)
            try:
                w.call = call = self._stub(addr).Watch(state.request(), timeout=WATCH_STREAM_S,
                                                       metadata=state.metadata(ends.token_metadata))
                if state.closed:  # closed while the call was made: close() found none to cancel
                    call.cancel()
                for m in call:
                    yield from state.take(m)
                    if state.done():
                        w.call.cancel()
                        return
                state.avoid = None
            except grpc.RpcError as e:
                wait = state.failed(e, addr)
                if wait is None:
                    return
                world.sleep(wait)

    def scan_all(self, dataset: str, partition: Key, *, start: Key = b"", end: Key = b"",
                 page: int = 100, consistency: str = "strong") -> Iterator[Item]:
        cur = to_bytes(start)
        while True:
            p = self.scan(dataset, partition, start=cur, end=end, limit=page, consistency=consistency)
            yield from p.items
            if not p.next:
                return
            cur = p.next
