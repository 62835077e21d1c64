"""Every SDK operation as one call, checked and built but not sent: `Operations` holds the
operations (get, put, cas, ...) with their checks, requests and the decoding of their
answers; a subclass says how a built `Call` runs. Client runs them on blocking gRPC stubs
(midtown/client.py), AsyncClient on grpc.aio (midtown/aio.py): the same code builds both,
so arguments, errors and results are the same."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any, NamedTuple

import grpc

from midtown import errors
from midtown.checks import (
    I64_MAX,
    I64_MIN,
    U64_MAX,
    Key,
    to_bytes,
    to_consistency,
    to_dataset,
    to_int,
    to_key,
    to_shard,
    to_staleness,
    to_value,
)
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
    arrow_batch,
    outcomes,
    shard_items,
)
from midtown.retries import read_retry_or_raise
from midtown.watch import WatchState
from midtown_pb import kv_pb2 as pb
from runtime import world


class Call(NamedTuple):
    """An operation as one call, checked and built: the method, its request, its timeout and
    how the response becomes the operation's result. `single`: a single-key operation,
    which may travel with others (coalescing). Client and AsyncClient run the same ones."""
    method: str
    req: Any
    timeout: float | None
    decode: Callable[[Any], Any]
    single: bool = False


class PagedScan:
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
        self._since = world.monotonic()

    def page(self, m: pb.ScanShardResponse) -> ShardPage:
        self.attempt, self._backoff, self._since = 0, 0.05, world.monotonic()
        if m.next:
            self.req.token = m.next
        else:
            self.done = True
        if self.req.arrow:
            return ShardPage(m.position, [], m.next, arrow_batch(m.arrow))
        return ShardPage(m.position, shard_items(m), m.next)

    def failed(self, e: grpc.RpcError) -> float:
        """After a failed stream: raise its error unless a retry may cure it and there is
        time; else the seconds to wait first."""
        read_retry_or_raise(e, self.attempt, self.retries, self._since + self.wait_s)
        self.attempt += 1
        wait, self._backoff = self._backoff, min(self._backoff * 2, 1.0)
        return wait


class Operations:
    """The operations, each built into a `Call` and handed to `_do`, which a subclass
    defines: run it and return its decoded result (Client, AsyncClient's builder)."""

    dc = ""  # the caller's data center (Client(dc=...)): its reads are served there

    def _do(self, c: Call) -> Any:
        raise NotImplementedError

    def header(self, dataset: str, request_id: bytes | None,
               event_id: bytes | str | None = None) -> pb.RequestHeader:
        """A call's header: it names this client's data center, where replicas serve
        bounded and eventual reads and an eventual dataset's writes wait for a majority."""
        to_dataset(dataset)
        if request_id is not None:
            request_id = to_value(request_id, "request_id")
        # An id we make up now has never been seen: say so (puts and deletes answer sooner).
        return pb.RequestHeader(dataset=dataset, request_id=request_id or world.unique_id(),
                                first_attempt=request_id is None, dc=self.dc,
                                event_id=to_bytes(event_id, "event_id") if event_id is not None else b"")

    def read_header(self, dataset: str) -> pb.RequestHeader:
        return self.header(dataset, None)

    # ------------------------------------------------------------ operations

    def get(self, dataset: str, partition: Key, local: Key = b"", *, consistency: str = "strong",
            max_staleness_ms: int | None = None, timeout: float | None = None) -> Value | None:
        """`consistency`: "strong" (linearizable), "eventual" (one replica's state), or
        "bounded" with `max_staleness_ms`: a replica in this client's data center (`dc`) if
        it has applied the shard's log up to no more than that long ago, else as strong; the
        Value's `staleness_bound_ms` says which (the bound, or 0)."""
        return self._do(Call("Get", pb.GetRequest(
            header=self.read_header(dataset), key=to_key(partition, local),
            consistency=to_consistency(consistency, bounded=True),
            max_staleness_ms=to_staleness(consistency, max_staleness_ms)), timeout,
            lambda r: Value.of(r.value, r.staleness_bound_ms) if r.found else None, True))

    def put(self, dataset: str, partition: Key, local: Key, value: bytes, *, ttl_ms: int = 0,
            request_id: bytes | None = None, event_id: bytes | str | None = None,
            timeout: float | None = None) -> int:
        """Returns the new version. With `event_id`, applied at most once per event id within
        the dataset's dedup window; a repeat returns the first put's version."""
        return self._do(Call("Put", pb.PutRequest(
            header=self.header(dataset, request_id, event_id),
            key=to_key(partition, local), value=to_value(value, "value"),
            ttl_ms=to_int(ttl_ms, "ttl_ms", 0, U64_MAX)), timeout, lambda r: int(r.version), True))

    def delete(self, dataset: str, partition: Key, local: Key = b"", *,
               request_id: bytes | None = None, timeout: float | None = None) -> int:
        """Returns how many keys were deleted: 1, or 0 when there was none."""
        return self._do(Call("Delete", pb.DeleteRequest(
            header=self.header(dataset, request_id), key=to_key(partition, local)),
            timeout, lambda r: int(r.deleted), True))

    def cas(self, dataset: str, partition: Key, local: Key, new_value: bytes = b"", *,
            expected: bytes | None = None, expect_absent: bool = False, expected_version: int = 0,
            delete: bool = False, ttl_ms: int = 0, request_id: bytes | None = None,
            timeout: float | None = None) -> CasResult:
        req = pb.CheckAndSetRequest(
            header=self.header(dataset, request_id), key=to_key(partition, local),
            expected_version=to_int(expected_version, "expected_version", 0, U64_MAX),
            new_value=to_value(new_value, "new_value"), delete=bool(delete),
            ttl_ms=to_int(ttl_ms, "ttl_ms", 0, U64_MAX))
        if expect_absent:
            req.expect_absent = True
        elif expected is not None:
            req.expected_value = to_value(expected, "expected")
        return self._do(Call("CheckAndSet", req, timeout, lambda r: CasResult(
            r.succeeded, Value.of(r.current) if r.HasField("current") else None, r.version), True))

    def incr(self, dataset: str, partition: Key, local: Key, delta: int = 1, *, ttl_ms: int = 0,
             request_id: bytes | None = None, event_id: bytes | str | None = None,
             timeout: float | None = None) -> int:
        """Returns the new value. With `event_id`, counted at most once per event id within
        the dataset's dedup window; a repeat returns the value the first one produced."""
        return self._do(Call("Increment", pb.IncrementRequest(
            header=self.header(dataset, request_id, event_id),
            key=to_key(partition, local), delta=to_int(delta, "delta", I64_MIN, I64_MAX),
            ttl_ms=to_int(ttl_ms, "ttl_ms", 0, U64_MAX)), timeout, lambda r: int(r.value), True))

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
        return self._do(Call("Batch", pb.BatchRequest(
            header=self.header(dataset, request_id, event_id), partition_key=ops[0].partition,
            ops=[o.to_pb() for o in ops]), timeout, lambda r: BatchResult(r.applied, outcomes(r.results))))

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
            eid = to_bytes(w.event_id, f"writes[{i}].event_id") if w.event_id is not None else b""
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
            done = [WriteOutcome(names[o.status], o.error, outcomes(o.results), o.position)
                    for o in r.outcomes]
            status, position = list(r.puts.status), list(r.puts.position)
            if len(done) != len(groups) or len(status) != len(pkeys) or len(position) != len(pkeys):
                raise errors.MidtownError(f"the coordinator answered {len(done)} groups and {len(status)} "
                                          f"puts for {len(groups)} and {len(pkeys)}")
            return [done[k] if kind == "g" else WriteOutcome(names[status[k]], position=position[k])
                    for kind, k in where]

        return self._do(Call("WriteMany", pb.WriteManyRequest(
            header=self.header(dataset, request_id), groups=groups, puts=puts), timeout, decode))

    def shards(self, dataset: str, *, timeout: float | None = None) -> int:
        """How many shards the cluster has (a dataset's keys are spread over all of them)."""
        return self._do(Call("Shards", pb.ShardsRequest(header=self.header(dataset, None)), timeout,
                              lambda r: int(r.shards)))

    def shard_splits(self, dataset: str, shard: int, *, split_bytes: int = 0, consistency: str = "strong",
                     partition_key: Key | None = None, timeout: float | None = None) -> ShardSplits:
        """The keys of `dataset` in `shard` (of `partition_key` only) cut into key ranges of
        about `split_bytes` (0: 512 MiB), all to be read from one view at one position:
        `scan_shard(dataset, shard, token=split.token)` reads one, and each its own part."""
        req = pb.ShardSplitsRequest(header=self.header(dataset, None), shard=to_shard(shard),
                                    split_bytes=to_int(split_bytes, "split_bytes", 0, 2**64 - 1),
                                    consistency=to_consistency(consistency))
        if partition_key is not None:
            req.partition_key = to_bytes(partition_key, "partition_key")
        return self._do(Call("ShardSplits", req, timeout, ShardSplits.of))

    def scan_shard_request(self, dataset: str, shard: int, consistency: str, page: int, max_bytes: int,
                            partition_key: Key | None, token: bytes,
                            arrow: bool = False) -> pb.ScanShardRequest:
        if not isinstance(arrow, bool):
            raise errors.InvalidArgument(f"arrow: {arrow!r} is not True or False")
        if arrow and importlib.util.find_spec("pyarrow") is None:
            raise errors.InvalidArgument("arrow: pages as Arrow batches need pyarrow in this Python "
                                         "(pip install pyarrow)")
        req = pb.ScanShardRequest(header=self.header(dataset, None), shard=to_shard(shard),
                                  page=to_int(page, "page", 1, 2**32 - 1),
                                  max_bytes=to_int(max_bytes, "max_bytes", 0, 2**32 - 1),
                                  token=to_bytes(token, "token"), consistency=to_consistency(consistency),
                                  arrow=arrow)
        if partition_key is not None:
            req.partition_key = to_bytes(partition_key, "partition_key")
        return req

    def scan(self, dataset: str, partition: Key, *, start: Key = b"", end: Key = b"",
             limit: int = 100, consistency: str = "strong", max_staleness_ms: int | None = None,
             timeout: float | None = None) -> ScanPage:
        """`consistency` and `max_staleness_ms`: as get's (the page's `staleness_bound_ms`)."""
        return self._do(Call("Scan", pb.ScanRequest(
            header=self.read_header(dataset), partition_key=to_bytes(partition, "partition"),
            start=to_bytes(start, "start"), end=to_bytes(end, "end"),
            limit=to_int(limit, "limit", 1, 2**32 - 1),
            consistency=to_consistency(consistency, bounded=True),
            max_staleness_ms=to_staleness(consistency, max_staleness_ms)), timeout,
            lambda r: ScanPage([Item(i.local_key, Value.of(i.value)) for i in r.items], r.next,
                               r.staleness_bound_ms)))

    def positions_request(self, dataset: str, partition_key: Key | None, timeout: float) -> pb.WatchRequest:
        """A watch from "now" whose first message (every shard's start) is all that is wanted."""
        req = self.watch_state(dataset, "now", partition_key, None, timeout).request()
        req.duration_ms = 1
        return req

    def watch_state(self, dataset: str, start: str | dict[int, int], partition_key: Key | None,
                    until: dict[int, int] | None, timeout: float) -> WatchState:
        """A watch's checked start, and where it stands as its streams come and go."""
        pk = None if partition_key is None else to_bytes(partition_key, "partition_key")
        return WatchState(self.header(dataset, None), start, pk, timeout, until)
