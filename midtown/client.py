"""The Python SDK: `from midtown import Client, AsyncClient`.

    c = Client(zk="127.0.0.1:2181")          # or Client(["127.0.0.1:7100", ...])
    c.put("users", "u42", "name", b"Ada")
    c.get("users", "u42", "name")            # Value(value=b'Ada', version=..., expires_at_ms=0)

Every call has a deadline (`timeout`, seconds) and is retried on UNAVAILABLE and
DEADLINE_EXCEEDED with the same request id, so a retry never applies twice: the store
returns the first outcome."""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypeVar

import grpc

from midtown import errors
from midtown.coalescing import Coalescer
from midtown.retries import Attempts, read_retry_or_raise
from midtown.routes import AVOID_S, ROUTED_METHODS, Routes
from midtown.watch import Change, WatchState
from midtown_pb import kv_pb2 as pb
from midtown_pb import kv_pb2_grpc
from runtime.transport import GRPC_OPTIONS

Key = str | bytes
T = TypeVar("T")
DISCOVERY_TTL_S = 5.0
# A watch's streams end after a minute (the coordinator's default), and are started again.
WATCH_STREAM_S = 90.0

def _b(k: Key, field: str = "key") -> bytes:
    """A key (or an id) as bytes; a wrong type is InvalidArgument naming the field."""
    if isinstance(k, str):
        return k.encode()
    if isinstance(k, bytes | bytearray | memoryview):
        return bytes(k)
    raise errors.InvalidArgument(f"{field}: expected str or bytes, got {type(k).__name__}")


def _value(v: object, field: str) -> bytes:
    if isinstance(v, bytes | bytearray | memoryview):
        return bytes(v)
    raise errors.InvalidArgument(f"{field}: expected bytes, got {type(v).__name__}"
                                 + (" (encode it: .encode())" if isinstance(v, str) else ""))


U64_MAX = 2**64 - 1
I64_MIN, I64_MAX = -(2**63), 2**63 - 1


def _int(n: object, field: str, lo: int, hi: int) -> int:
    if isinstance(n, bool) or not isinstance(n, int):
        raise errors.InvalidArgument(f"{field}: expected a whole number, got {n!r}")
    if not lo <= n <= hi:
        raise errors.InvalidArgument(f"{field}: {n} is out of range ({lo}..{hi})")
    return n


def _shard(shard: object) -> int:
    return _int(shard, "shard", 0, 2**32 - 1)


def _key(partition: Key, local: Key) -> pb.Key:
    return pb.Key(partition=_b(partition, "partition"), local=_b(local, "local"))


def _dataset(dataset: str) -> str:
    if not isinstance(dataset, str):
        raise errors.InvalidArgument(f"dataset: expected a name (str), got {type(dataset).__name__}")
    return dataset


def _consistency(c: str) -> Any:
    if c not in ("strong", "eventual"):
        raise errors.InvalidArgument(f"consistency: {c!r}; choose 'strong' or 'eventual'")
    return pb.EVENTUAL if c == "eventual" else pb.STRONG


@dataclass(frozen=True)
class Value:
    value: bytes
    version: int
    expires_at_ms: int = 0  # 0: never

    @staticmethod
    def of(m: pb.Value) -> Value:
        return Value(m.value, m.version, m.expires_at_ms)


@dataclass(frozen=True)
class CasResult:
    succeeded: bool
    current: Value | None  # the value found (after a failure) or written (after success)
    version: int  # the new version on success


@dataclass(frozen=True)
class Item:
    local_key: bytes
    value: Value


@dataclass(frozen=True)
class ScanPage:
    items: list[Item]
    next: bytes  # pass as `start` for the next page; b"" when done


class Op(NamedTuple):
    """One operation of an atomic batch (see Client.batch). Immutable; a NamedTuple, built
    in a third of a frozen dataclass's time (a bulk write builds one per row)."""

    kind: str  # put | delete | cas | incr | get
    partition: bytes
    local: bytes
    value: bytes = b""
    ttl_ms: int = 0
    expected: bytes | None = None
    expect_absent: bool = False
    expected_version: int = 0
    delta: int = 0

    @staticmethod
    def put(partition: Key, local: Key, value: bytes, ttl_ms: int = 0) -> Op:
        return Op("put", _b(partition, "partition"), _b(local, "local"), value=_value(value, "value"),
                  ttl_ms=_int(ttl_ms, "ttl_ms", 0, U64_MAX))

    @staticmethod
    def delete(partition: Key, local: Key) -> Op:
        return Op("delete", _b(partition, "partition"), _b(local, "local"))

    @staticmethod
    def cas(partition: Key, local: Key, new_value: bytes, expected: bytes | None = None,
            expect_absent: bool = False, expected_version: int = 0) -> Op:
        return Op("cas", _b(partition, "partition"), _b(local, "local"), value=_value(new_value, "new_value"),
                  expected=None if expected is None else _value(expected, "expected"),
                  expect_absent=expect_absent,
                  expected_version=_int(expected_version, "expected_version", 0, U64_MAX))

    @staticmethod
    def incr(partition: Key, local: Key, delta: int = 1) -> Op:
        return Op("incr", _b(partition, "partition"), _b(local, "local"),
                  delta=_int(delta, "delta", I64_MIN, I64_MAX))

    @staticmethod
    def get(partition: Key, local: Key) -> Op:
        return Op("get", _b(partition, "partition"), _b(local, "local"))

    def to_pb(self) -> pb.Op:
        if self.kind == "put":
            return pb.Op(put=pb.PutOp(local_key=self.local, value=self.value, ttl_ms=self.ttl_ms))
        if self.kind == "delete":
            return pb.Op(delete=pb.DeleteOp(local_key=self.local))
        if self.kind == "incr":
            return pb.Op(incr=pb.IncrementOp(local_key=self.local, delta=self.delta))
        if self.kind == "get":
            return pb.Op(get=pb.GetOp(local_key=self.local))
        c = pb.CheckAndSetOp(local_key=self.local, new_value=self.value,
                             expected_version=self.expected_version)
        if self.expect_absent:
            c.expect_absent = True
        elif self.expected is not None:
            c.expected_value = self.expected
        return pb.Op(cas=c)


@dataclass(frozen=True)
class OpOutcome:
    ok: bool  # false: this check-and-set's condition failed, or an increment was refused
    found: bool
    value: Value | None


class Write(NamedTuple):
    """One item of a bulk write (Client.write_many): operations on one partitioning key,
    applied atomically, at most once per `event_id` within the dataset's dedup window."""

    ops: list[Op]
    event_id: bytes | str | None = None

    @staticmethod
    def put(partition: Key, local: Key, value: bytes, *, ttl_ms: int = 0,
            event_id: bytes | str | None = None) -> Write:
        return Write([Op.put(partition, local, value, ttl_ms)], event_id)

    @staticmethod
    def incr(partition: Key, local: Key, delta: int = 1, *, event_id: bytes | str | None = None) -> Write:
        return Write([Op.incr(partition, local, delta)], event_id)

    @staticmethod
    def insert(partition: Key, local: Key, value: bytes, *, event_id: bytes | str | None = None) -> Write:
        """Insert if absent (fails, rolled back, if the key exists)."""
        return Write([Op.cas(partition, local, value, expect_absent=True)], event_id)


@dataclass(frozen=True)
class WriteOutcome:
    status: str  # "applied" | "duplicate" (its event id was applied before) | "failed"
    error: str = ""  # why it failed (a condition, a non-integer, ...)
    results: list[OpOutcome] = field(default_factory=list)
    position: int = 0  # the log position that applied it (the first time, for a duplicate)


@dataclass(frozen=True)
class ShardItem:
    partition_key: bytes
    local_key: bytes
    value: Value


@dataclass(frozen=True)
class BatchResult:
    applied: bool  # all operations applied, or (false) none did
    results: list[OpOutcome]


class _Call(NamedTuple):
    """An operation as one call, checked and built: the method, its request, its timeout and
    how the response becomes the operation's result. `single`: a single-key operation,
    which may travel with others (coalescing). Client and AsyncClient run the same ones."""
    method: str
    req: Any
    timeout: float | None
    decode: Callable[[Any], Any]
    single: bool = False


def _outcomes(results: Any) -> list[OpOutcome]:
    return [OpOutcome(x.status == pb.DONE, x.found, Value.of(x.value) if x.HasField("value") else None)
            for x in results]


def shard_items(m: pb.ScanShardResponse) -> list[ShardItem]:
    return [ShardItem(i.partition_key, i.local_key, Value.of(i.value)) for i in m.items]


@dataclass(frozen=True)
class ShardPage:
    """One page of a shard scan: the log position its state stands at, its items in key
    order, and where the scan goes on (`Client.scan_shard(token=next)`; b"" on the last)."""
    position: int
    items: list[ShardItem]
    next: bytes


@dataclass(frozen=True)
class ShardSplit:
    token: bytes  # Client.scan_shard(token=...) reads this split
    bytes: int  # its keys and values, as stored
    keys: int


@dataclass(frozen=True)
class ShardSplits:
    position: int  # every split is read from the state at this log position
    splits: list[ShardSplit]

    @staticmethod
    def of(r: pb.ShardSplitsResponse) -> ShardSplits:
        return ShardSplits(r.position, [ShardSplit(s.token, s.bytes, s.keys) for s in r.splits])


class _PagedScan:
    """Where a paged shard scan stands, for Client and AsyncClient: the request to send next
    (from the last page's `next` once a page came), and whether a failure may be retried:
    up to `retries` times in a row without a page, for at most `wait_s` since the last page."""

    def __init__(self, req: pb.ScanShardRequest, retries: int, wait_s: float) -> None:
        self.req = req
        self.retries = retries
        self.wait_s = wait_s
        self.attempt = 0
        self.done = False
        self._backoff = 0.05
        self._since = time.monotonic()

    def page(self, m: pb.ScanShardResponse) -> ShardPage:
        self.attempt, self._backoff, self._since = 0, 0.05, time.monotonic()
        if m.next:
            self.req.token = m.next
        else:
            self.done = True
        return ShardPage(m.position, shard_items(m), m.next)

    def failed(self, e: grpc.RpcError) -> float:
        """After a failed stream: raise its error unless a retry may cure it and there is
        time; else the seconds to wait first."""
        read_retry_or_raise(e, self.attempt, self.retries, self._since + self.wait_s)
        self.attempt += 1
        wait, self._backoff = self._backoff, min(self._backoff * 2, 1.0)
        return wait


class Watcher:
    """The changes of a watch (Client.watch), as an iterator; `positions`: the resume point
    (every change below it, per shard, has been handed over); `close()`: end it, from any
    thread."""

    def __init__(self, client: Client, state: WatchState) -> None:
        self.state = state
        self.call: Any = None
        self._it = client._watch_streams(self)

    @property
    def positions(self) -> dict[int, int]:
        return dict(self.state.positions or {})

    def __iter__(self) -> Watcher:
        return self

    def __next__(self) -> Change:
        return next(self._it)

    def close(self) -> None:
        self.state.closed = True
        if self.call is not None:
            self.call.cancel()

    def __enter__(self) -> Watcher:
        return self

    def __exit__(self, *a: object) -> None:
        self.close()


class Client:
    def __init__(self, coordinators: str | list[str] | None = None, *, zk: str | None = None,
                 timeout: float = 10.0, retries: int = 8, token: str | None = None,
                 tls_ca: bytes | str | None = None, coalesce: bool = True, route: bool = True) -> None:
        """`token`: a user's token (`midtown user add`), for datasets with an access list.
        `tls_ca`: call over TLS, trusting this CA (PEM bytes, or the path of a PEM file).
        `coalesce`: single-key operations that threads issue while a call is in flight go
        together in the next call (midtown/coalescing.py); a lone caller is not delayed.
        `route` (with `zk`): send a key's operations to the coordinator beside its log's
        writer where there is one (the host layout; midtown/routes.py)."""
        if coordinators is None and zk is None:
            raise ValueError("give coordinator addresses or zk='HOST:PORT' for discovery")
        self._creds = None
        if tls_ca is not None:
            if isinstance(tls_ca, str):
                try:
                    with open(tls_ca, "rb") as f:
                        tls_ca = f.read()
                except OSError as e:
                    raise ValueError(f"tls_ca: {e}") from None
            self._creds = grpc.ssl_channel_credentials(root_certificates=tls_ca)
        self._metadata = (("authorization", f"Bearer {token}"),) if token else None
        self._unreached: dict[str, float] = {}  # coordinator -> until when it is passed over (_pick)
        self._zk_hosts = zk
        self._fixed = [coordinators] if isinstance(coordinators, str) else list(coordinators or [])
        self.timeout = timeout
        self.retries = retries
        self._stubs: dict[str, kv_pb2_grpc.KVStub] = {}
        self._channels: list[grpc.Channel] = []
        self._zk: Any = None
        self._found: tuple[float, list[str]] = (0.0, [])
        self._lock = threading.Lock()
        self._coalescer = Coalescer(self._call) if coalesce else None
        self._routes = Routes(self._session) if zk is not None and route and not self._fixed else None

    @property
    def coalescing(self) -> tuple[int, int]:
        """(calls, operations) the coalescer has sent: how well operations travel together."""
        c = self._coalescer
        return (c.calls, c.operations) if c is not None else (0, 0)

    def close(self) -> None:
        if self._routes is not None:
            self._routes.stop()
        for ch in self._channels:
            ch.close()
        if self._zk is not None:
            self._zk.stop()
            self._zk.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *a: object) -> None:
        self.close()

    # ------------------------------------------------------------ plumbing
    def coordinators(self, refresh: bool = False) -> list[str]:
        """The coordinators to use: the addresses given, or those registered in ZooKeeper
        (looked up at most every DISCOVERY_TTL_S, or at once after a failure)."""
        found = self._known_coordinators(refresh)
        if found is None:
            from catalog import registry  # ZooKeeper's client loads for a Client given zk= only
            zk = self._session()
            try:
                found = list(registry.members(zk, registry.COORDINATORS).values())
            except Exception as e:  # the session is being re-established: a retryable error
                raise errors.Unavailable(f"ZooKeeper at {self._zk_hosts} did not answer "
                                         f"({type(e).__name__}); retry") from None
            with self._lock:
                self._found = (time.monotonic(), found)
        if not found:
            raise errors.Unavailable("no coordinator is registered in ZooKeeper")
        return found

    def _known_coordinators(self, refresh: bool = False) -> list[str] | None:
        """The coordinators given, or unless `refresh` those found in ZooKeeper less than
        DISCOVERY_TTL_S ago (None: look them up)."""
        if self._fixed:
            return self._fixed
        at, found = self._found
        return found if not refresh and found and time.monotonic() - at <= DISCOVERY_TTL_S else None

    def _session(self) -> Any:
        """The ZooKeeper session, connected on first use (Unavailable if it cannot be)."""
        from catalog import connect as zkpaths  # ZooKeeper's client loads for a Client given zk= only
        with self._lock:
            if self._zk is None:
                wait = min(zkpaths.CONNECT_TIMEOUT_S, self.timeout)
                try:
                    self._zk = zkpaths.connect(self._zk_hosts, connect_timeout_s=wait)  # type: ignore[arg-type]
                except Exception:
                    raise errors.Unavailable(f"cannot reach ZooKeeper at {self._zk_hosts} within "
                                             f"{wait:g}s") from None
            return self._zk

    def _stub(self, addr: str) -> kv_pb2_grpc.KVStub:
        with self._lock:
            s = self._stubs.get(addr)
            if s is None:
                ch = (grpc.insecure_channel(addr, options=GRPC_OPTIONS) if self._creds is None
                      else grpc.secure_channel(addr, self._creds, options=GRPC_OPTIONS))
                self._channels.append(ch)
                s = self._stubs[addr] = kv_pb2_grpc.KVStub(ch)
            return s

    def _timeout(self, timeout: float | None) -> float:
        if timeout is not None and not (isinstance(timeout, int | float) and timeout > 0):
            raise errors.InvalidArgument(f"timeout: {timeout!r}, must be a number of seconds above 0")
        return timeout or self.timeout

    def _single(self, method: str, req: Any, timeout: float | None) -> Any:
        """A single-key operation: coalesced with the other threads' (midtown/coalescing.py)
        unless the client was made with coalesce=False."""
        t = self._timeout(timeout)
        to = self._route_of(method, req)
        if self._coalescer is None:
            return self._call(method, req, t, to)
        return self._coalescer.call(method, req, t, to)

    def _pick(self, addrs: list[str], failed: str | None = None) -> str:
        """A coordinator at random, passing over those a call could not reach in the last
        AVOID_S while others remain (`failed`: one just now). A paused coordinator is found
        out by keepalive in about 2 s (runtime/transport.py), and a new call to it would
        wait on its connection until the deadline."""
        now = time.monotonic()
        if failed is not None:
            self._unreached[failed] = now + AVOID_S
        ok = [a for a in addrs if self._unreached.get(a, 0.0) <= now]
        return random.choice(ok or addrs)

    def _route_of(self, method: str, req: Any) -> str | None:
        """The coordinator a single-key request goes to first (None: any): routes are for
        the operations that append (ROUTED_METHODS)."""
        r = self._routes
        if r is None or method not in ROUTED_METHODS:
            return None
        return r.coordinator_for(req.header.dataset, req.key.partition)

    def coordinator_for(self, dataset: str, partition: Key) -> str | None:
        """The coordinator this client sends the writes (put, delete, CAS, increment,
        batch) on `partition` of `dataset` to first: the one beside its log's writer (host
        layout), or None (any coordinator). Reads go to any coordinator. Routes are read in
        the background: None at first."""
        r = self._routes
        return None if r is None else r.coordinator_for(_dataset(dataset), _b(partition, "partition"))

    def _call(self, method: str, req: Any, timeout: float | None, to: str | None = None,
              first_message: bool = False) -> Any:
        """Call with retries under one deadline; the request id stays the same. `to`: the
        coordinator to try first (a route), else one at random. `first_message`: a streaming
        call, of which the first message is the answer (the rest is cancelled)."""
        attempts = Attempts(method, self.retries, self._timeout(timeout))  # midtown/retries.py
        addr = to or self._pick(self.coordinators())
        while True:
            left = attempts.start(req)
            try:
                call = getattr(self._stub(addr), method)(req, timeout=left, metadata=self._metadata)
                if not first_message:
                    return call
                try:
                    return next(call)
                finally:
                    call.cancel()
            except grpc.RpcError as e:
                switch, pause = attempts.failed(e)
                if switch:
                    addr = self._switch(addr, self.coordinators(refresh=True))
                time.sleep(pause)

    def _switch(self, failed: str, coordinators: list[str]) -> str:
        """Another coordinator than `failed`, which was unavailable (and is no route now)."""
        if self._routes is not None:
            self._routes.failed(failed)
        return self._pick(coordinators, failed=failed)

    def _do(self, c: _Call) -> Any:
        """Run a built operation (AsyncClient runs the same ones on grpc.aio)."""
        return c.decode(self._single(c.method, c.req, c.timeout) if c.single
                        else self._call(c.method, c.req, c.timeout))

    @staticmethod
    def _header(dataset: str, request_id: bytes | None,
                event_id: bytes | str | None = None) -> pb.RequestHeader:
        _dataset(dataset)
        if request_id is not None:
            request_id = _value(request_id, "request_id")
        # An id we make up now has never been seen: say so (puts and deletes answer sooner).
        return pb.RequestHeader(dataset=dataset, request_id=request_id or uuid.uuid4().bytes,
                                first_attempt=request_id is None,
                                event_id=_b(event_id, "event_id") if event_id is not None else b"")

    # ------------------------------------------------------------ operations
    def get(self, dataset: str, partition: Key, local: Key = b"", *, consistency: str = "strong",
            timeout: float | None = None) -> Value | None:
        return self._do(_Call("Get", pb.GetRequest(
            header=self._header(dataset, None), key=_key(partition, local),
            consistency=_consistency(consistency)), timeout,
            lambda r: Value.of(r.value) if r.found else None, True))

    def put(self, dataset: str, partition: Key, local: Key, value: bytes, *, ttl_ms: int = 0,
            request_id: bytes | None = None, event_id: bytes | str | None = None,
            timeout: float | None = None) -> int:
        """Returns the new version. With `event_id`, applied at most once per event id within
        the dataset's dedup window; a repeat returns the first put's version."""
        return self._do(_Call("Put", pb.PutRequest(
            header=self._header(dataset, request_id, event_id),
            key=_key(partition, local), value=_value(value, "value"),
            ttl_ms=_int(ttl_ms, "ttl_ms", 0, U64_MAX)), timeout, lambda r: int(r.version), True))

    def delete(self, dataset: str, partition: Key, local: Key = b"", *,
               request_id: bytes | None = None, timeout: float | None = None) -> int:
        """Returns how many keys were deleted: 1, or 0 when there was none."""
        return self._do(_Call("Delete", pb.DeleteRequest(
            header=self._header(dataset, request_id), key=_key(partition, local)),
            timeout, lambda r: int(r.deleted), True))

    def cas(self, dataset: str, partition: Key, local: Key, new_value: bytes = b"", *,
            expected: bytes | None = None, expect_absent: bool = False, expected_version: int = 0,
            delete: bool = False, ttl_ms: int = 0, request_id: bytes | None = None,
            timeout: float | None = None) -> CasResult:
        req = pb.CheckAndSetRequest(
            header=self._header(dataset, request_id), key=_key(partition, local),
            expected_version=_int(expected_version, "expected_version", 0, U64_MAX),
            new_value=_value(new_value, "new_value"), delete=bool(delete),
            ttl_ms=_int(ttl_ms, "ttl_ms", 0, U64_MAX))
        if expect_absent:
            req.expect_absent = True
        elif expected is not None:
            req.expected_value = _value(expected, "expected")
        return self._do(_Call("CheckAndSet", req, timeout, lambda r: CasResult(
            r.succeeded, Value.of(r.current) if r.HasField("current") else None, r.version), True))

    def incr(self, dataset: str, partition: Key, local: Key, delta: int = 1, *, ttl_ms: int = 0,
             request_id: bytes | None = None, event_id: bytes | str | None = None,
             timeout: float | None = None) -> int:
        """Returns the new value. With `event_id`, counted at most once per event id within
        the dataset's dedup window; a repeat returns the value the first one produced."""
        return self._do(_Call("Increment", pb.IncrementRequest(
            header=self._header(dataset, request_id, event_id),
            key=_key(partition, local), delta=_int(delta, "delta", I64_MIN, I64_MAX),
            ttl_ms=_int(ttl_ms, "ttl_ms", 0, U64_MAX)), timeout, lambda r: int(r.value), True))

    def batch(self, dataset: str, ops: list[Op], *, request_id: bytes | None = None,
              event_id: bytes | str | None = None, timeout: float | None = None) -> BatchResult:
        """Operations on one partitioning key, applied atomically: all or none."""
        if not ops:
            raise errors.InvalidArgument("ops: a batch needs at least one operation")
        for i, op in enumerate(ops):
            if op.partition != ops[0].partition:
                raise errors.InvalidArgument(
                    f"ops[{i}].partition: a batch covers one partitioning key "
                    f"({ops[0].partition!r}), got {op.partition!r}")
        return self._do(_Call("Batch", pb.BatchRequest(
            header=self._header(dataset, request_id, event_id), partition_key=ops[0].partition,
            ops=[o.to_pb() for o in ops]), timeout, lambda r: BatchResult(r.applied, _outcomes(r.results))))

    def write_many(self, dataset: str, writes: list[Write], *, request_id: bytes | None = None,
                   timeout: float | None = None) -> list[WriteOutcome]:
        """Many independent writes in one call, each on its own partitioning key with its own
        event id: one outcome each, in order. The coordinator appends one record per shard.
        Retried as a whole with the same request id (nothing applies twice): a retry after
        an unknown outcome returns the first outcomes. Up to 20,000 writes per call."""
        if not writes:
            raise errors.InvalidArgument("writes: a bulk write needs at least one write")
        groups: list[pb.WriteGroup] = []
        where: list[tuple[str, int]] = []  # each write's place: a group (g) or a put row (p)
        pkeys: list[bytes] = []
        lkeys: list[bytes] = []
        values: list[bytes] = []
        eids: list[bytes] = []
        ttls: list[int] = []
        for i, w in enumerate(writes):
            if not w.ops:
                raise errors.InvalidArgument(f"writes[{i}].ops: a write needs at least one operation")
            eid = _b(w.event_id, f"writes[{i}].event_id") if w.event_id is not None else b""
            op = w.ops[0]
            if len(w.ops) == 1 and op.kind == "put":  # the common one travels as columns
                where.append(("p", len(pkeys)))
                pkeys.append(op.partition)
                lkeys.append(op.local)
                values.append(op.value)
                eids.append(eid)
                ttls.append(op.ttl_ms)
                continue
            for j, o in enumerate(w.ops):
                if o.partition != op.partition:
                    raise errors.InvalidArgument(
                        f"writes[{i}].ops[{j}].partition: one write covers one partitioning key "
                        f"({op.partition!r}), got {o.partition!r}")
            where.append(("g", len(groups)))
            groups.append(pb.WriteGroup(partition_key=op.partition, ops=[o.to_pb() for o in w.ops],
                                        event_id=eid))
        puts = pb.PutColumns(partition_keys=pkeys, local_keys=lkeys, values=values,
                             event_ids=eids if any(eids) else [], ttl_ms=ttls if any(ttls) else [])
        def decode(r: pb.WriteManyResponse) -> list[WriteOutcome]:
            names = {pb.APPLIED: "applied", pb.DUPLICATE: "duplicate", pb.FAILED: "failed"}
            done = [WriteOutcome(names[o.status], o.error, _outcomes(o.results), o.position)
                    for o in r.outcomes]
            status, position = list(r.puts.status), list(r.puts.position)
            if len(done) != len(groups) or len(status) != len(pkeys) or len(position) != len(pkeys):
                raise errors.MidtownError(f"the coordinator answered {len(done)} groups and {len(status)} "
                                          f"puts for {len(groups)} and {len(pkeys)}")
            return [done[k] if kind == "g" else WriteOutcome(names[status[k]], position=position[k])
                    for kind, k in where]

        return self._do(_Call("WriteMany", pb.WriteManyRequest(
            header=self._header(dataset, request_id), groups=groups, puts=puts), timeout, decode))

    def shards(self, dataset: str, *, timeout: float | None = None) -> int:
        """How many shards the cluster has (a dataset's keys are spread over all of them)."""
        return self._do(_Call("Shards", pb.ShardsRequest(header=self._header(dataset, None)), timeout,
                              lambda r: int(r.shards)))

    def scan_shard(self, dataset: str, shard: int, *, consistency: str = "strong", page: int = 1000,
                   max_bytes: int = 0, partition_key: Key | None = None, token: bytes = b"",
                   timeout: float | None = None) -> Iterator[ShardPage]:
        """Every live key of `dataset` in `shard` (of `partition_key` only, if given), page by
        page, all from one replica's view of its state at one log position (each page says
        it). Strong: that position is at or after every write acknowledged before the call.
        Pages hold at most `page` items and `max_bytes` bytes (0: 1 MiB); they are read as
        they are consumed, so memory stays at a page whatever the shard's size. A broken
        stream goes on from the last page's `next` (while the view lasts: 5 minutes idle);
        `token`: go on from a page's `next`, or read one split of `shard_splits`.
        `timeout`: how long to wait for a page (60 s at least by default)."""
        return self._shard_pages(_PagedScan(self._scan_shard_request(dataset, shard, consistency, page,
                                                                     max_bytes, partition_key, token),
                                            self.retries, timeout or max(self.timeout, 60.0)))

    def _shard_pages(self, scan: _PagedScan) -> Iterator[ShardPage]:
        while True:
            addr = self._pick(self.coordinators(refresh=scan.attempt > 0))
            try:
                for m in self._stub(addr).ScanShard(scan.req, timeout=scan.wait_s, metadata=self._metadata):
                    yield scan.page(m)
                    if scan.done:
                        return
                raise AssertionError("a shard scan's stream ended before its last page")
            except grpc.RpcError as e:
                time.sleep(scan.failed(e))

    def shard_splits(self, dataset: str, shard: int, *, split_bytes: int = 0, consistency: str = "strong",
                     partition_key: Key | None = None, timeout: float | None = None) -> ShardSplits:
        """The keys of `dataset` in `shard` (of `partition_key` only) cut into key ranges of
        about `split_bytes` (0: 512 MiB), all to be read from one view at one position:
        `scan_shard(dataset, shard, token=split.token)` reads one, and each its own part."""
        req = pb.ShardSplitsRequest(header=self._header(dataset, None), shard=_shard(shard),
                                    split_bytes=_int(split_bytes, "split_bytes", 0, 2**64 - 1),
                                    consistency=_consistency(consistency))
        if partition_key is not None:
            req.partition_key = _b(partition_key, "partition_key")
        return self._do(_Call("ShardSplits", req, timeout, ShardSplits.of))

    def _scan_shard_request(self, dataset: str, shard: int, consistency: str, page: int, max_bytes: int,
                            partition_key: Key | None, token: bytes) -> pb.ScanShardRequest:
        req = pb.ScanShardRequest(header=self._header(dataset, None), shard=_shard(shard),
                                  page=_int(page, "page", 1, 2**32 - 1),
                                  max_bytes=_int(max_bytes, "max_bytes", 0, 2**32 - 1),
                                  token=_b(token, "token"), consistency=_consistency(consistency))
        if partition_key is not None:
            req.partition_key = _b(partition_key, "partition_key")
        return req

    def positions(self, dataset: str, *, partition_key: Key | None = None,
                  timeout: float | None = None) -> dict[int, int]:
        """Where each shard of `dataset` (or the partitioning key's shard) stands now: every
        write acknowledged before the call is below it. A watch from these positions gets
        every later change; `watch(dataset, start=a, until=b)` reads those between two."""
        pk = None if partition_key is None else _b(partition_key, "partition_key")
        state = WatchState(self._header(dataset, None), "now", pk, self._timeout(timeout))
        req = state.request()
        req.duration_ms = 1  # the first message (every shard's start) is all that is wanted
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
        pk = None if partition_key is None else _b(partition_key, "partition_key")
        state = WatchState(self._header(dataset, None), start, pk, timeout or max(self.timeout, 60.0), until)
        return Watcher(self, state)

    def _watch_streams(self, w: Watcher) -> Iterator[Change]:
        state = w.state
        while not state.closed:
            addr = self._pick(self.coordinators(refresh=state.avoid is not None), failed=state.avoid)
            try:
                w.call = call = self._stub(addr).Watch(state.request(), timeout=WATCH_STREAM_S,
                                                       metadata=self._metadata)
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
                time.sleep(wait)

    def scan(self, dataset: str, partition: Key, *, start: Key = b"", end: Key = b"",
             limit: int = 100, consistency: str = "strong", timeout: float | None = None) -> ScanPage:
        return self._do(_Call("Scan", pb.ScanRequest(
            header=self._header(dataset, None), partition_key=_b(partition, "partition"),
            start=_b(start, "start"), end=_b(end, "end"), limit=_int(limit, "limit", 1, 2**32 - 1),
            consistency=_consistency(consistency)), timeout,
            lambda r: ScanPage([Item(i.local_key, Value.of(i.value)) for i in r.items], r.next)))

    def scan_all(self, dataset: str, partition: Key, *, start: Key = b"", end: Key = b"",
                 page: int = 100, consistency: str = "strong") -> Iterator[Item]:
        cur = _b(start)
        while True:
            p = self.scan(dataset, partition, start=cur, end=end, limit=page, consistency=consistency)
            yield from p.items
            if not p.next:
                return
            cur = p.next
