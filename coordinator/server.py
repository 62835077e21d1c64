"""The coordinator process: the public KV service and the Callback service storage nodes
answer through. Stateless: any coordinator serves any request; a request's outcome lives
in the replicated dedup table, so a client retry with the same request id through any
coordinator returns the first outcome.

Run: python -m coordinator.server --id 0 --port P --zk ZK"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass
from functools import partial
from typing import Any

import grpc
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError
from prometheus_client import Counter, Histogram

from catalog.datasets import Dataset
from coordinator import bulk, eventual, limits, near_reads, shard_reads, watches
from coordinator import many as many_run
from coordinator.checks import (
    Code,
    check_batch,
    check_cas,
    check_event_id,
    check_key,
    check_local,
    check_op,
    check_partition,
    check_put_columns,
    check_ttl,
    check_value,
    validate_op,
)
from coordinator.node import Coordinator, reused_request_id
from coordinator.storage_link import StorageLink
from fleet.failure_domains import VALUE_RE
from log.client import LocalLog, LogLink
from midtown_pb import kv_pb2 as pb
from record import answer, codec
from record.answer import Answer
from record.model import (
    Delete,
    Get,
    Incr,
    Op,
    OpResult,
    OpStatus,
    Put,
    RecordResult,
    Scan,
)
from runtime import handlers, inprocess, metrics, tracing, transport, world
from runtime.health import serve_health
from runtime.process import Part, log_to_stderr, serve_all, trace_from_env, tune_runtime
from runtime.refusals import REFUSED, BadRequest, Refusal
from runtime.transport import GRPC_OPTIONS

log = logging.getLogger("midtown.coordinator")

REQUESTS = Counter("midtown_kv_requests_total", "KV requests by method and status", ["method", "code"])
LATENCY = Histogram("midtown_kv_request_seconds", "KV request latency, by method", ["method"],
                    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))


def _put_outcomes(a: Answer, rows: list[int], status: list[Any], position: list[int]) -> None:
    """A record of puts' answer, into the response's columns at `rows`."""
    for i, (duplicate, at) in zip(rows, answer.group_heads(a)):
        if duplicate:
            status[i] = pb.DUPLICATE
        position[i] = at


def _lww_value(v: pb.LwwValue) -> pb.Value:
    return pb.Value(value=v.value, version=v.version, expires_at_ms=v.expires_at_ms)


def single(r: RecordResult) -> Any:
    return r.results[0]


def op_error(status: OpStatus, field: str) -> Refusal:
    if status is OpStatus.NOT_AN_INTEGER:
        return Refusal(Code.FAILED_PRECONDITION, f"{field}: the stored value is not a decimal integer")
    if status is OpStatus.OVERFLOW:
        return Refusal(Code.OUT_OF_RANGE, f"{field}: the result does not fit in 64 bits")
    return Refusal(Code.FAILED_PRECONDITION, f"{field}: condition failed")


def _bulk_op(o: pb.Op, j: int, prefix: str) -> None:
    """An operation of a bulk write's group: as in a batch, reads excepted."""
    if o.WhichOneof("op") == "get":
        raise BadRequest(f"{prefix}ops[{j}]: get is not allowed in a bulk write")
    validate_op(o, j, prefix)


@dataclass(frozen=True, slots=True)
class Planned:
    """A single-key request on a strong dataset, checked and ready to run: a record of
    `ops`, or (`read`) a strong read of ops[0]; `finish` makes the response from the outcome
    (a RecordResult, or a read's (OpResult, position)), or raises the request's Refusal."""
    d: Dataset
    header: pb.RequestHeader
    pkey: bytes
    ops: list[Op]
    finish: Callable[[Any], Any]
    read: bool = False


def _get_response(o: tuple[OpResult, int]) -> pb.GetResponse:
    r, position = o
    return pb.GetResponse(found=r.found, value=codec.stored_to_pb(r.value), position=position)


def _put_response(r: RecordResult) -> pb.PutResponse:
    o = single(r)
    if o.value is None:  # the outcome of another operation (a read, a delete) under this id
        raise reused_request_id()
    return pb.PutResponse(version=o.value.version)


def _delete_response(r: RecordResult) -> pb.DeleteResponse:
    return pb.DeleteResponse(position=r.position, deleted=int(bool(r.results and r.results[0].found)))


def _cas_response(r: RecordResult) -> pb.CheckAndSetResponse:
    o = single(r)
    ok = o.status is OpStatus.DONE
    return pb.CheckAndSetResponse(succeeded=ok, found=o.found, current=codec.stored_to_pb(o.value),
                                  version=o.value.version if ok and o.value is not None else 0)


def _increment_response(r: RecordResult) -> pb.IncrementResponse:
    o = single(r)
    if o.status is not OpStatus.DONE:
        raise op_error(o.status, "key")
    if o.value is None or not o.value.value.lstrip(b"-").isdigit():  # another operation's outcome
        raise reused_request_id()
    return pb.IncrementResponse(value=int(o.value.value), version=o.value.version)


# -------------------------------------------------------------------- the KV service
class KVService:
    def __init__(self, c: Coordinator) -> None:
        self.c = c

    @staticmethod
    def _deadline(ctx: grpc.ServicerContext) -> float:
        t = ctx.time_remaining()
        return min(t, 120.0) if t is not None else limits.DEFAULT_DEADLINE_S

    def _execute(self, d: Dataset | None, header: pb.RequestHeader, pkey: bytes, ops: list[Op],
                 ctx: grpc.ServicerContext) -> RecordResult:
        return self.c.execute(self.c.admission.need(d, header), header, pkey, ops, self._deadline(ctx))

    def _strong_read(self, d: Dataset | None, header: pb.RequestHeader, pkey: bytes, op: Op,
                     ctx: grpc.ServicerContext) -> tuple[OpResult, int]:
        return self.c.strong_read(self.c.admission.need(d, header), header, pkey, op, self._deadline(ctx))

    def _eventual(self, d: Dataset | None, header: pb.RequestHeader, what: str = "") -> Dataset | None:
        """The dataset if it is eventually consistent (None if strong); `what` names an
        operation only strong datasets have."""
        d = self.c.admission.need(d, header)
        if d.consistency != "eventual":
            return None
        if what:
            raise Refusal(Code.FAILED_PRECONDITION,
                        f"header.dataset: {d.name!r} is eventually consistent; {what} needs a "
                        "strong dataset (last-writer-wins replicas cannot compare and set)")
        return d

    def run(self, p: Planned, ctx: grpc.ServicerContext) -> Any:
        """A planned request, run on its own (KV.Many runs many together: coordinator/many.py)."""
        if p.read:
            return p.finish(self.c.strong_read(p.d, p.header, p.pkey, p.ops[0], self._deadline(ctx)))
        return p.finish(self.c.execute(p.d, p.header, p.pkey, p.ops, self._deadline(ctx)))

    def _planned(self, d: Dataset | None, header: pb.RequestHeader, pkey: bytes, ops: list[Op],
                 finish: Callable[[Any], Any], read: bool = False) -> Planned:
        return Planned(self.c.admission.need(d, header), header, pkey, ops, finish, read)

    # Each single-key request is checked and planned first (a Refusal naming the field if
    # it is bad); None: its dataset is eventually consistent (or the read asks for an
    # eventual read), and the handler goes to the replicas directly.
    def plan_get(self, req: pb.GetRequest, d: Dataset | None) -> Planned | None:
        pkey, lkey = check_key(req.key)
        near_reads.check_consistency(req.consistency, req.max_staleness_ms, "get")
        if self._eventual(d, req.header) is not None or req.consistency != pb.STRONG:
            return None
        return self._planned(d, req.header, pkey, [Get(lkey)], _get_response, read=True)

    def plan_put(self, req: pb.PutRequest, d: Dataset | None) -> Planned | None:
        pkey, lkey = check_key(req.key)
        check_value(req.value, "value")
        check_ttl(req.ttl_ms, "ttl_ms")
        if self._eventual(d, req.header) is not None:
            return None
        return self._planned(d, req.header, pkey, [Put(lkey, req.value, req.ttl_ms)], _put_response)

    def plan_delete(self, req: pb.DeleteRequest, d: Dataset | None) -> Planned | None:
        pkey, lkey = check_key(req.key)
        if self._eventual(d, req.header) is not None:
            return None
        return self._planned(d, req.header, pkey, [Delete(lkey)], _delete_response)

    def plan_check_and_set(self, req: pb.CheckAndSetRequest, d: Dataset | None) -> Planned:
        pkey, lkey = check_key(req.key)
        self._eventual(d, req.header, "check-and-set")
        which = req.WhichOneof("expect")
        check_cas(which, req.expected_version, "expect")
        check_value(req.new_value, "new_value")
        check_ttl(req.ttl_ms, "ttl_ms")
        op = pb.Op(cas=pb.CheckAndSetOp(local_key=lkey, expected_version=req.expected_version,
                                        new_value=req.new_value, delete=req.delete, ttl_ms=req.ttl_ms))
        if which == "expected_value":
            op.cas.expected_value = req.expected_value
        elif which == "expect_absent":
            op.cas.expect_absent = req.expect_absent
        return self._planned(d, req.header, pkey, [codec.op_from_pb(op)], _cas_response)

    def plan_increment(self, req: pb.IncrementRequest, d: Dataset | None) -> Planned:
        pkey, lkey = check_key(req.key)
        check_ttl(req.ttl_ms, "ttl_ms")
        self._eventual(d, req.header, "increment")
        return self._planned(d, req.header, pkey, [Incr(lkey, req.delta, req.ttl_ms)], _increment_response)

    def get(self, req: pb.GetRequest, ctx: grpc.ServicerContext, d: Dataset | None) -> pb.GetResponse:
        p = self.plan_get(req, d)
        if p is not None:
            return self.run(p, ctx)  # type: ignore[no-any-return]
        pkey, lkey = check_key(req.key)
        ed = self._eventual(d, req.header)
        if ed is not None:
            if req.consistency == pb.BOUNDED:
                near_reads.strong_dataset(ed)
            answers = self.c.eventual_read(ed, pkey, pb.LwwReadRequest(local_key=lkey),
                                           self._deadline(ctx), req.header.dc)
            v = eventual.winner(answers)
            if not eventual.live(v, world.wall_ms()):
                return pb.GetResponse(found=False)
            assert v is not None
            return pb.GetResponse(found=True, value=_lww_value(v))
        d = self.c.admission.need(d, req.header)  # an eventual or bounded read of a strong dataset
        if req.consistency == pb.BOUNDED:
            rr = near_reads.bounded_read(self.c, d, req.header.dc, pkey, Get(lkey), req.max_staleness_ms,
                                         self._deadline(ctx))
            if rr is None:  # no replica near the caller is recent enough: as a strong read
                return self.run(self._planned(d, req.header, pkey, [Get(lkey)], _get_response, read=True),
                                ctx)  # type: ignore[no-any-return]
        else:
            rr = self.c.read_replica(d, pkey, Get(lkey), self._deadline(ctx), dc=req.header.dc)
        return pb.GetResponse(found=rr.result.found, value=rr.result.value if rr.result.found else None,
                              position=rr.position, staleness_bound_ms=req.max_staleness_ms)

    def put(self, req: pb.PutRequest, ctx: grpc.ServicerContext, d: Dataset | None) -> pb.PutResponse:
        p = self.plan_put(req, d)
        if p is not None:
            return self.run(p, ctx)  # type: ignore[no-any-return]
        pkey, lkey = check_key(req.key)
        ed = self.c.admission.need(d, req.header)
        return pb.PutResponse(version=self.c.eventual_write(
            ed, pkey, lkey, req.value, req.ttl_ms, False, self._deadline(ctx), req.header.dc))

    def delete(self, req: pb.DeleteRequest, ctx: grpc.ServicerContext,
               d: Dataset | None) -> pb.DeleteResponse:
        p = self.plan_delete(req, d)
        if p is not None:
            return self.run(p, ctx)  # type: ignore[no-any-return]
        pkey, lkey = check_key(req.key)
        ed = self.c.admission.need(d, req.header)
        # Last writer wins: what a majority held just before, the best an eventual
        # dataset can say about what was there.
        before = eventual.winner(self.c.eventual_read(ed, pkey, pb.LwwReadRequest(local_key=lkey),
                                                      self._deadline(ctx), req.header.dc))
        self.c.eventual_write(ed, pkey, lkey, b"", 0, True, self._deadline(ctx), req.header.dc)
        return pb.DeleteResponse(deleted=int(eventual.live(before, world.wall_ms())))

    def check_and_set(self, req: pb.CheckAndSetRequest, ctx: grpc.ServicerContext,
                      d: Dataset | None) -> pb.CheckAndSetResponse:
        return self.run(self.plan_check_and_set(req, d), ctx)  # type: ignore[no-any-return]

    def increment(self, req: pb.IncrementRequest, ctx: grpc.ServicerContext,
                  d: Dataset | None) -> pb.IncrementResponse:
        return self.run(self.plan_increment(req, d), ctx)  # type: ignore[no-any-return]

    def batch(self, req: pb.BatchRequest, ctx: grpc.ServicerContext, d: Dataset | None) -> pb.BatchResponse:
        check_partition(req.partition_key, "partition_key")
        ops = check_batch(req.ops, "ops", check_op)
        self._eventual(d, req.header, "an atomic batch")
        r = self._execute(d, req.header, req.partition_key, ops, ctx)
        return pb.BatchResponse(applied=r.applied, results=[codec.op_result_to_pb(x) for x in r.results],
                                position=r.position)

    def write_many(self, req: pb.WriteManyRequest, ctx: grpc.ServicerContext,
                   d: Dataset | None) -> pb.WriteManyResponse:
        """Many independent groups in one call (coordinator/bulk.py): one record per shard,
        each group's own outcome (applied, duplicate, failed with the reason); single puts
        may come as columns (`puts`), answered as columns."""
        rows = check_put_columns(req.puts)
        n = len(req.groups) + rows
        if not n:
            raise BadRequest("groups: a bulk write needs at least one group or put")
        if n > limits.WRITE_MANY_GROUPS_MAX:
            raise BadRequest(f"groups: {n} groups and puts, the limit is "
                        f"{limits.WRITE_MANY_GROUPS_MAX} per call")
        self._eventual(d, req.header, "a bulk write")
        d = self.c.admission.need(d, req.header)
        for i, g in enumerate(req.groups):
            f = f"groups[{i}]"
            check_partition(g.partition_key, f"{f}.partition_key")
            check_event_id(g.event_id, f"{f}.event_id")
            check_batch(g.ops, f"{f}.ops", partial(_bulk_op, prefix=f"{f}."))
        planned = bulk.plan(d.id, d.ttl_ms, d.dedup_window_ms, d.dedup_max_ids, list(req.groups), req.puts,
                            d.shards(self.c.kv.shards), self.c.log_map, self.c.request_id(req.header),
                            self.c.callback_addr, limits.BULK_RECORD_BYTES, self.c.answered_beside,
                            self.c.answers.secret)
        results = self.c.run_records([(p.log_id, p.shard, p.request_id, p.payload) for p in planned],
                                     self._deadline(ctx))
        first = len(req.groups)
        outcomes: list[pb.WriteOutcome | None] = [None] * first
        status, position = [pb.APPLIED] * rows, [-1] * rows  # -1: no answer yet
        for p, r in zip(planned, results):
            if p.indexes[0] >= first:  # a record of puts
                _put_outcomes(r, [i - first for i in p.indexes], status, position)
                continue
            for i, g in zip(p.indexes, answer.groups_pb(r)):
                outcomes[i] = bulk.outcome(g)
        assert all(o is not None for o in outcomes) and all(p >= 0 for p in position)
        return pb.WriteManyResponse(outcomes=outcomes,  # type: ignore[arg-type]
                                    puts=pb.PutOutcomes(status=status, position=position) if rows else None)

    def shards(self, req: pb.ShardsRequest, ctx: grpc.ServicerContext,
               d: Dataset | None) -> pb.ShardsResponse:
        self.c.admission.need(d, req.header)
        return pb.ShardsResponse(shards=self.c.kv.shards)

    def scan_shard(self, req: pb.ScanShardRequest, ctx: grpc.ServicerContext, d: Dataset | None) -> Any:
        d = self.c.admission.need(d, req.header)
        return shard_reads.scan_shard(self.c, req, d, self._deadline(ctx))

    def shard_splits(self, req: pb.ShardSplitsRequest, ctx: grpc.ServicerContext,
                     d: Dataset | None) -> pb.ShardSplitsResponse:
        d = self.c.admission.need(d, req.header)
        return shard_reads.shard_splits(self.c, req, d, self._deadline(ctx))  # type: ignore[no-any-return]

    def watch(self, req: pb.WatchRequest, ctx: grpc.ServicerContext, d: Dataset | None) -> Any:
        d = self.c.admission.need(d, req.header)
        return watches.watch(self.c, req, d, self._deadline(ctx), lambda: ctx.is_active())

    def scan(self, req: pb.ScanRequest, ctx: grpc.ServicerContext, d: Dataset | None) -> pb.ScanResponse:
        check_partition(req.partition_key, "partition_key")
        check_local(req.start, "start")
        check_local(req.end, "end")
        if req.limit > limits.SCAN_LIMIT_MAX:
            raise BadRequest(f"limit: {req.limit}, the limit is {limits.SCAN_LIMIT_MAX}")
        near_reads.check_consistency(req.consistency, req.max_staleness_ms, "scan")
        op = Scan(req.start, req.end, req.limit or limits.SCAN_LIMIT_DEFAULT)
        ed = self._eventual(d, req.header)
        if ed is not None:
            if req.consistency == pb.BOUNDED:
                near_reads.strong_dataset(ed)
            asked = op.limit + limits.EVENTUAL_SCAN_SLACK  # room for tombstones and expired values
            answers = self.c.eventual_read(
                ed, req.partition_key,
                pb.LwwReadRequest(scan=True, start=req.start, end=req.end, limit=asked),
                self._deadline(ctx), req.header.dc)
            page, nxt = eventual.scan_page(answers, asked, op.limit, world.wall_ms())
            return pb.ScanResponse(items=[pb.Item(local_key=it.local_key, value=_lww_value(it.value))
                                          for it in page], next=nxt)
        if req.consistency == pb.EVENTUAL:
            d = self.c.admission.need(d, req.header)
            rr = self.c.read_replica(d, req.partition_key, op, self._deadline(ctx), dc=req.header.dc)
            return pb.ScanResponse(items=rr.result.items, next=rr.result.next)
        if req.consistency == pb.BOUNDED:
            d = self.c.admission.need(d, req.header)
            near = near_reads.bounded_read(self.c, d, req.header.dc, req.partition_key, op,
                                           req.max_staleness_ms, self._deadline(ctx))
            if near is not None:
                return pb.ScanResponse(items=near.result.items, next=near.result.next,
                                       staleness_bound_ms=req.max_staleness_ms)
        o, _ = self._strong_read(d, req.header, req.partition_key, op, ctx)
        return pb.ScanResponse(items=[pb.Item(local_key=k, value=codec.stored_to_pb(v)) for k, v in o.items],
                               next=o.next)


class Shell:
    """The coordinator's gRPC services: each RPC is a method here or on KVService, taken
    through runtime/handlers.py (the request parsed, a Refusal made its status), admitted
    (its dataset looked up once, its rate, rights and quota checked), timed and counted.
    Many's items are admitted one by one; Deliver (the Callback service) is not."""

    def __init__(self, c: Coordinator) -> None:
        self.c = c
        self.kv = kv = KVService(c)
        self.single = {"get": kv.get, "put": kv.put, "delete": kv.delete,
                       "check_and_set": kv.check_and_set, "increment": kv.increment}
        self.plans: dict[str, Callable[[Any, Dataset | None], Planned | None]] = {
            "get": kv.plan_get, "put": kv.plan_put, "delete": kv.plan_delete,
            "check_and_set": kv.plan_check_and_set, "increment": kv.plan_increment}
        self.pool = world.Pool("many", limits.MANY_THREADS)

    # ------------------------------------------------------------ what every call goes through
    def internal_text(self, name: str) -> str:
        return (f"coordinator {self.c.coord_id}: internal error in {name} (its log has the details); the "
                "outcome is unknown: retry with the same header.request_id")

    def guarded(self, name: str, thunk: Callable[[], Any]) -> Any:
        """`thunk()`; whatever goes wrong in it is a Refusal."""
        try:
            return thunk()
        except (KazooException, KazooTimeoutError) as e:
            # ZooKeeper trouble (a lost session, a connection being re-established)
            # while looking up a dataset, a user or the members: nothing was appended.
            raise Refusal(Code.UNAVAILABLE, f"coordinator {self.c.coord_id}: ZooKeeper is unavailable "
                          f"({type(e).__name__}); the request was not applied; retry") from None
        except Exception as e:  # a peer or the log away: UNAVAILABLE, else INTERNAL (a defect)
            raise handlers.refusal_for(name, e, self.internal_text, lambda line: (
                f"coordinator {self.c.coord_id}: {name}: {line}; the outcome is unknown: retry with the "
                "same header.request_id")) from None

    def admit(self, name: str, req: Any, ctx: grpc.ServicerContext) -> Dataset | None:
        """The request's dataset (looked up once, then every check and the call take it),
        once the request is admitted: its rate, its rights and its dataset's quota."""
        a = self.c.admission
        write = name not in ("get", "scan")
        d = a.lookup(req.header, write)
        a.check_rate(d, ctx.peer())
        a.authorize(d, ctx, write=write)
        a.check_quota(d, req)
        return d

    def admitted(self, fn: Callable[..., Any], req: Any, ctx: grpc.ServicerContext) -> Any:
        """`fn(req, ctx, dataset)` once the request is admitted."""
        return self.guarded(fn.__name__, lambda: fn(req, ctx, self._admit(fn.__name__, req, ctx)))

    def _admit(self, name: str, req: Any, ctx: grpc.ServicerContext) -> Any:
        with tracing.span("admission"):
            return self.admit(name, req, ctx)

    @staticmethod
    def outcome(method: str, code: str) -> None:
        REQUESTS.labels(method=method, code=code).inc()

    # ------------------------------------------------------------ KV.Many and Callback.Deliver
    def many(self, req: pb.ManyRequest, ctx: grpc.ServicerContext) -> pb.ManyResponse:
        """Each item admitted and checked as its own call would be, then run together: the
        writes through the one write path (Coordinator.run_writes: one append per log), the
        strong reads in one ReadIndex round per log (coordinator/many.py); items of eventual
        datasets (and eventual reads) on a pool, as their own calls. One answer each, in
        order; one that fails fails alone."""
        if not req.items:
            raise BadRequest("items: a call needs at least one item")
        if len(req.items) > limits.MANY_ITEMS_MAX:
            raise BadRequest(f"items: {len(req.items)} items, the limit is {limits.MANY_ITEMS_MAX}")
        c = self.c
        answers: list[pb.ManyAnswer | None] = [None] * len(req.items)
        writes: list[tuple[int, str, Planned]] = []
        reads: list[tuple[int, str, Planned]] = []
        alone: list[tuple[int, str, futures.Future[Any]]] = []
        for i, item in enumerate(req.items):
            which = item.WhichOneof("call")
            if which is None:
                answers[i] = pb.ManyAnswer(code=Code.INVALID_ARGUMENT.value[0],
                                           message=f"items[{i}]: no call in it")
                continue
            fn, sub = self.single[which], getattr(item, which)
            try:
                d, p = self.guarded(fn.__name__, partial(self._plan_admitted, which, sub, ctx))
            except Refusal as e:
                answers[i] = self._many_answer(which, e)
                continue
            if p is None:
                run_alone = partial(fn, sub, ctx, d)
                alone.append((i, which, self.pool.submit(self.guarded, fn.__name__, run_alone)))
            else:
                (reads if p.read else writes).append((i, which, p))
        deadline_s = self.kv._deadline(ctx)
        for batch, run in ((writes, lambda: c.run_writes(
                                [(p.d, p.header, p.pkey, p.ops) for _, _, p in writes], deadline_s)),
                           (reads, lambda: many_run.run_reads(
                                c, [(p.d, p.header, p.pkey, p.ops[0]) for _, _, p in reads], deadline_s))):
            if not batch:
                continue
            try:
                outcomes = self.guarded("many", run)
            except Refusal as e:  # the whole batch (too many requests in flight, say)
                outcomes = [e] * len(batch)
            for (i, which, p), o in zip(batch, outcomes):
                answers[i] = self._many_answer(which, o if isinstance(o, Refusal) else partial(p.finish, o))
        for i, which, f in alone:
            try:
                answers[i] = self._many_answer(which, f.result)
            except Refusal as e:
                answers[i] = self._many_answer(which, e)
        return pb.ManyResponse(answers=answers)  # type: ignore[arg-type]  # each one set

    def _plan_admitted(self, which: str, req: Any,
                       ctx: grpc.ServicerContext) -> tuple[Dataset | None, Planned | None]:
        """A Many item admitted and planned (None: it runs as its own call would)."""
        d = self.admit(self.single[which].__name__, req, ctx)
        return d, self.plans[which](req, d)

    def _many_answer(self, which: str, out: Refusal | Callable[[], Any]) -> pb.ManyAnswer:
        """An item's answer: its response (`out()`), or its Refusal (raised or given)."""
        name = self.single[which].__name__
        try:
            if isinstance(out, Refusal):
                raise out
            response = self.guarded(name, out)
        except Refusal as e:
            self.outcome(name, e.code.name)
            return pb.ManyAnswer(code=e.code.value[0], message=e.text,
                                 refused=dict(e.trailers).get(REFUSED, ""))
        self.outcome(name, "OK")
        a = pb.ManyAnswer()
        getattr(a, which).CopyFrom(response)
        return a

    def deliver(self, req: pb.DeliverRequest, ctx: grpc.ServicerContext) -> pb.DeliverResponse:
        """Storage nodes' answers to this coordinator's records."""
        self.c.deliver(list(req.results))
        return pb.DeliverResponse()

    # ------------------------------------------------------------ registration
    def _method(self, cls: Any, fn: Callable[..., Any], admit: bool = True,
                stream: bool = False, root: bool = True) -> grpc.RpcMethodHandler:
        """`fn` (request, context[, dataset]) -> response, registered through
        runtime/handlers.py: admitted first (unless `admit` is false), timed, its outcome
        counted; a stream's refusal before its first part or between two ends it with that
        status."""
        name = fn.__name__

        def timed(req: Any, ctx: grpc.ServicerContext) -> Any:
            with LATENCY.labels(method=name).time():
                return self.admitted(fn, req, ctx) if admit else fn(req, ctx)
        register = handlers.unary_stream if stream else handlers.unary
        # an operation a client asks for (`root`) starts a trace here when its caller sent none
        return register(name, cls, timed, internal=self.internal_text, outcome=self.outcome, root=root)

    def handlers(self) -> tuple[grpc.GenericRpcHandler, grpc.GenericRpcHandler]:
        """The KV service's handlers and the Callback service's."""
        kv, m = self.kv, self._method
        return (
            grpc.method_handlers_generic_handler("midtown.kv.v1.KV", {
                "Get": m(pb.GetRequest, kv.get), "Put": m(pb.PutRequest, kv.put),
                "Delete": m(pb.DeleteRequest, kv.delete),
                "CheckAndSet": m(pb.CheckAndSetRequest, kv.check_and_set),
                "Increment": m(pb.IncrementRequest, kv.increment),
                "Batch": m(pb.BatchRequest, kv.batch), "Scan": m(pb.ScanRequest, kv.scan),
                "WriteMany": m(pb.WriteManyRequest, kv.write_many),
                "Many": m(pb.ManyRequest, self.many, admit=False),
                "Shards": m(pb.ShardsRequest, kv.shards),
                "ScanShard": m(pb.ScanShardRequest, kv.scan_shard, stream=True),
                "ShardSplits": m(pb.ShardSplitsRequest, kv.shard_splits),
                "Watch": m(pb.WatchRequest, kv.watch, stream=True),
            }),
            grpc.method_handlers_generic_handler("midtown.kv.v1.Callback", {
                "Deliver": m(pb.DeliverRequest, self.deliver, admit=False, root=False)}),
        )


@dataclass
class Built:
    """A coordinator's two gRPC servers, both bound, not started: `client` (the KV service,
    on the port clients use) and `internal` (the Callback service storage nodes answer on,
    an internal port: runtime/transport.py), and the coordinator (not started)."""
    client: grpc.Server
    internal: grpc.Server
    coordinator: Coordinator
    callback_addr: str


def build(coord_id: int, addr: str, zk_hosts: str, listen: str,
          client_rate_limit: float = limits.CLIENT_RATE_LIMIT_DEFAULT,
          callback_listen: str = "", log_link: LogLink | None = None,
          local_log: inprocess.Local[LocalLog] | None = None,
          storage_link: StorageLink | None = None) -> Built:
    """Bind the callback port first (port 0 in `callback_listen`, or none: any free port)
    so that records can name it, then the client port. The callback service is never on the
    client port: answers are taken only from the internal network (and, with mutual TLS,
    only from holders of a cluster certificate)."""
    host = listen.rsplit(":", 1)[0]
    internal = grpc.server(futures.ThreadPoolExecutor(max_workers=limits.CALLBACK_THREADS),
                           options=GRPC_OPTIONS)
    cb_port = transport.listen(internal, callback_listen or f"{host}:0")
    callback_addr = f"{addr.rsplit(':', 1)[0]}:{cb_port}"
    c = Coordinator.open(coord_id, addr, zk_hosts, callback_addr, log_link, local_log, storage_link)
    c.admission.client_rate_limit = client_rate_limit
    kv, cb = Shell(c).handlers()
    internal.add_generic_rpc_handlers([cb])
    serve_health(internal, ["midtown.kv.v1.Callback"], c.ready, c.stopped, limits.CALLBACK_THREADS)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=limits.CLIENT_THREADS), options=GRPC_OPTIONS,
                         maximum_concurrent_rpcs=limits.PENDING_MAX)
    server.add_generic_rpc_handlers([kv])
    serve_health(server, ["midtown.kv.v1.KV"], c.ready, c.stopped, limits.CLIENT_THREADS)
    transport.listen(server, listen, internal=False)
    return Built(server, internal, c, callback_addr)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m coordinator.server")
    ap.add_argument("--id", type=int, required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--zk", required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--advertise")
    ap.add_argument("--metrics-port", type=int, default=0, help="serve Prometheus metrics (0: off)")
    ap.add_argument("--client-rate-limit", type=float, default=limits.CLIENT_RATE_LIMIT_DEFAULT,
                    help="requests/s per client connection (0: none)")
    ap.add_argument("--callback-port", type=int, default=0,
                    help="the internal port storage nodes answer on (default: any free port)")
    ap.add_argument("--dc", default="", help="the data center it runs in: SDK clients that name it "
                    "(Client(dc=...)) call it first")
    transport.add_flags(ap)  # with --tls-cert/--tls-key: clients must call over TLS
    a = ap.parse_args(argv)
    if a.dc and not VALUE_RE.match(a.dc):
        ap.error(f"--dc: {a.dc!r} is not a data center's name (letters, digits, '.', '_', '-')")
    creds = transport.use_flags(ap, a)
    if a.metrics_port:
        metrics.serve(a.metrics_port, a.host)
    log_to_stderr(f"coordinator-{a.id}")
    tune_runtime()
    trace_from_env(f"coordinator {a.id}")
    listen = f"{a.host}:{a.port}"
    b = build(a.id, a.advertise or listen, a.zk, listen, a.client_rate_limit,
              f"{a.host}:{a.callback_port}")
    b.coordinator.dc = a.dc
    how = "" if creds is None else " (TLS" + (", mutual TLS inside the cluster)" if creds.mutual else ")")
    serve_all([Part(b.internal, "", lambda: None, lambda: None, name="coordinator's callback port"),
               Part(b.client, "", b.coordinator.start, b.coordinator.stop, name="coordinator")],
              f"coordinator {a.id} ready on {listen}{how}; answers on {b.callback_addr}")


if __name__ == "__main__":
    main()
