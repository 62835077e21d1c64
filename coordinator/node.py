"""A coordinator's state and work, behind its gRPC shell (coordinator/server.py): a
request becomes a record appended to the log of its shard; the storage nodes' answers come
back through the callback service and wake the request that waits; strong reads go by
ReadIndex; eventual datasets are read and written at their replicas directly."""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Sequence
from concurrent import futures
from dataclasses import dataclass
from typing import TypeAlias

from prometheus_client import Counter

from catalog import registry
from catalog.datasets import Dataset
from catalog.log_map import LogMap
from catalog.log_map import first as first_log_map
from catalog.registry import KvTopology
from coordinator import append_rounds as rounds
from coordinator import eventual, limits
from coordinator.admission import Admission
from coordinator.answers import Answers
from coordinator.appender import Appender, Placed, Sealed
from coordinator.checks import (
    Code,
    check_partition,
)
from coordinator.readindex import ReadBatcher
from coordinator.records import record_for
from coordinator.replicas import Replicas
from coordinator.storage_link import StorageLink
from log.client import LocalLog, LogClient, LogLink
from midtown_pb import kv_pb2 as pb
from record import answer, codec
from record.answer import Answer
from record.model import (
    Op,
    OpResult,
    Put,
    Record,
    RecordResult,
    Stored,
)
from runtime import inprocess, tracing, world
from runtime.group_commit import GroupTimeout
from runtime.process import through_zk_loss
from runtime.refusals import BadRequest, Refusal

log = logging.getLogger("midtown.coordinator")

# Metrics (prometheus_client: the standard exposition format, served with --metrics-port).
EVENTUAL_REPAIRS = Counter("midtown_eventual_read_repairs_total",
                           "Replicas of an eventual dataset sent a newer value by a read")
STRONG_READS = Counter("midtown_strong_reads_total",
                       "Strong reads, by path: the log writer's read lease (lease), a ReadIndex "
                       "round (read_index; neither appends to the log) or through the log (log)",
                       ["path"])
READ_ROUNDS = Counter("midtown_read_index_rounds_total",
                      "ReadIndex rounds (a read index asked, then one read at a replica for the "
                      "round's reads)")


Write: TypeAlias = tuple[Dataset, pb.RequestHeader, bytes, list[Op]]  # dataset, header, partition key, ops


@dataclass(frozen=True, slots=True)
class Appending:
    """A record about to be appended: its log, shard, request id and encoding. `wait`: it
    names this coordinator's callback, and its answer is awaited."""
    log_id: int
    shard: int
    request_id: bytes
    payload: bytes
    wait: bool = True


class Coordinator:
    def __init__(self, coord_id: int, addr: str, logs: LogClient, log_count: int, kv: KvTopology,
                 callback_addr: str = "", local_log: inprocess.Local[LocalLog] | None = None,
                 storage_link: StorageLink | None = None, log_map: LogMap | None = None) -> None:
        """A coordinator from its parts, with no I/O of its own (Coordinator.open opens
        them): `logs`, the log client (and its ZooKeeper session, logs.zk); `log_count`,
        `kv` and `log_map` (which log carries each shard; None: shard mod the key-value
        logs), the topology as read at start."""
        self.coord_id = coord_id
        self.addr = addr  # where clients call it (registered in ZooKeeper)
        self.callback_addr = callback_addr or addr  # where storage nodes answer it
        self.logs = logs
        # The log server of this process, if any (the host layout); its storage node is
        # reached through self.replicas.
        self.local_log: inprocess.Local[LocalLog] = local_log or inprocess.Local()
        self.zk = self.logs.zk
        self.log_count = log_count
        self.kv = kv
        self.log_map = log_map or first_log_map(kv.shards, min(kv.logs, self.log_count))
        self.admission = Admission(self.zk)
        self.replicas = Replicas(self.zk, storage_link)
        self._appenders: dict[int, Appender] = {}
        self._lock = world.lock()
        # Records this coordinator appended with its callback address, by request id: their
        # log and shard. An answer for anything else did not come from a storage node
        # applying our record, and is dropped before it can wake a waiter or be compared.
        self.answers = Answers(self.replicas.members_or_last)
        self._reads = ReadBatcher(self.read_round)
        self.clock = eventual.HybridClock(coord_id & 0xFF)  # versions of eventual datasets
        self.stopped = world.event()
        self.dc = ""  # the data center it runs in ("": unnamed); clients there prefer it

    @classmethod
    def open(cls, coord_id: int, addr: str, zk_hosts: str, callback_addr: str = "",
             log_link: LogLink | None = None, local_log: inprocess.Local[LocalLog] | None = None,
             storage_link: StorageLink | None = None) -> Coordinator:
        """The shell: connect to ZooKeeper and the logs (`log_link`: the log client's way to
        the log servers; in the host layout, the one of this process directly) and read the topology (exits if
        the cluster has none)."""
        logs = LogClient(zk_hosts, link=log_link, local_log=local_log)
        kv = registry.read_kv(logs.zk)
        if kv is None:
            raise SystemExit("no key-value topology in ZooKeeper (midtown cluster init)")
        log_count = logs.topology().logs
        return cls(coord_id, addr, logs, log_count, kv, callback_addr, local_log, storage_link,
                   registry.read_log_map(logs.zk, kv, log_count))

    def start(self) -> None:
        self.admission.start()
        # Beside a log server (the host layout), say which: clients send a key to the
        # coordinator beside its log's writer (midtown/routes.py), whose append is a call.
        beside = {"log": min(self.local_log.addrs)} if self.local_log.addrs else {}
        # ... and its data center: an SDK client there calls it first (midtown/endpoints.py).
        where = {"dc": self.dc} if self.dc else {}
        self.membership = through_zk_loss(lambda: registry.register(
            self.zk, registry.COORDINATORS, self.coord_id, self.addr, **beside, **where), "registering")

    def stop(self) -> None:
        self.stopped.set()
        self.membership.stop()

    def ready(self) -> bool:
        """Serving: a live ZooKeeper session (datasets, users and members are looked up
        there), registered under it."""
        if self.zk.state != "CONNECTED" or not hasattr(self, "membership"):
            return False
        return self.zk.exists(self.membership.path) is not None

    # ---------------------------------------------------------------- plumbing
    def appender(self, log_id: int) -> Appender:
        a = self._appenders.get(log_id)
        if a is None:
            with self._lock:
                a = self._appenders.get(log_id)
                if a is None:
                    a = self._appenders[log_id] = Appender(self.logs, log_id, self.answered_beside)
        return a

    def request_id(self, header: pb.RequestHeader) -> bytes:
        rid = header.request_id
        if len(rid) > limits.REQUEST_ID_BYTES_MAX:
            raise BadRequest(f"{len(rid)} bytes, the limit is {limits.REQUEST_ID_BYTES_MAX}",
                             field="header.request_id")
        return rid or uuid.uuid4().bytes

    def plan(self, d: Dataset, header: pb.RequestHeader, pkey: bytes, ops: list[Op]) -> tuple[Record, bool]:
        """The record for a single-key request, and whether it is answered at the log's
        acknowledgement (then the record names no callback).

        A plain put on a client's first attempt (its request id is new) is answered as soon
        as the log acknowledges it (DESIGN.md allows it): its outcome cannot depend on the
        state, and its version is the entry's position + 1. A retry waits for the storage
        node, which returns the first outcome; a delete waits too (its outcome says whether
        there was a key to delete). An operation with an event id travels as a record of
        one group (at most once per event id)."""
        rid = self.request_id(header)
        early = (header.first_attempt and bool(header.request_id) and len(ops) == 1
                 and isinstance(ops[0], Put) and not header.event_id)
        rec = record_for(d, rid, "" if early else self.callback_addr, pkey, tuple(ops), header.event_id,
                         self.kv.shards)
        if not early and self.answered_beside(self.log_of(rec), rec.shard):
            rec = dataclasses.replace(rec, answered_beside=True)
        return rec, early

    def answered_beside(self, log_id: int, shard: int) -> bool:
        """Whether the storage node of this process (the host layout), a member that holds
        `shard`, applies `log_id` as this process's log writer commits it: then it alone
        answers our records of that shard (Record.answered_beside), and the other replicas
        make no call for most.
        If it stops applying the log that way (the writer moved), it still answers, from its
        stream; until then, a request waits for it as for any answer, within its deadline."""
        node = self.replicas.link.beside(log_id)
        return node is not None and node in self.replicas.holders(shard)

    def encode(self, rec: Record) -> bytes:
        """The record as a log entry's payload, with its answer secret (Answers.secret)."""
        payload = codec.record_to_bytes(
            dataclasses.replace(rec, answer_secret=self.answers.secret(rec.request_id)))
        if len(payload) > limits.RECORD_BYTES_MAX:  # the checks of each field keep within it
            raise BadRequest(f"request: its record is {len(payload)} bytes, "
                        f"the limit is {limits.RECORD_BYTES_MAX}")
        return payload

    @property
    def kv_logs(self) -> int:
        """The logs that carry shards (the first kv_logs of the cluster's)."""
        return self.log_map.logs

    def log_of(self, rec: Record) -> int:
        return self.log_map.log_of(rec.shard)

    def execute(self, d: Dataset, header: pb.RequestHeader, pkey: bytes, ops: list[Op],
                deadline_s: float) -> RecordResult:
        """One write: a batch of one (run_writes). Its Refusal is raised."""
        r = self.run_writes([(d, header, pkey, ops)], deadline_s)[0]
        if isinstance(r, Refusal):
            raise r
        return r

    def run_writes(self, writes: Sequence[Write], deadline_s: float) -> list[RecordResult | Refusal]:
        """The write path, for one write or a client's coalesced ones (coordinator/many.py):
        each write's record is built (plan), all records of one log go in one Append, and
        each write's result is taken at the log's acknowledgement (a plain put on a first
        attempt) or from a storage node's answer. A write appended more than once (its log
        writer retried) is asked again with its request id, within the same deadline: only
        the storage nodes know which copy counts. Each write fails alone, with the Refusal
        in its place."""
        deadline = world.monotonic() + deadline_s
        out: list[RecordResult | Refusal | None] = [None] * len(writes)
        planned: list[tuple[int, Record]] = []
        appending: list[Appending] = []
        for i, (d, header, pkey, ops) in enumerate(writes):
            try:
                rec, early = self.plan(d, header, pkey, ops)
                appending.append(Appending(self.log_of(rec), rec.shard, rec.request_id, self.encode(rec),
                                           not early))
            except Refusal as e:
                out[i] = e
                continue
            planned.append((i, rec))
        answers = self.append_and_wait(appending, deadline_s)
        again: list[Write] = []
        again_at: list[int] = []
        for (i, rec), a, r in zip(planned, appending, answers):
            if isinstance(r, Refusal):
                out[i] = r
            elif a.wait:
                out[i] = self.outcome(rec, r)  # type: ignore[arg-type]
            else:
                d = writes[i][0]
                known = early_result(rec, r, d.ttl_ms)  # type: ignore[arg-type]
                if known is not None:
                    out[i] = known
                else:
                    again.append((d, pb.RequestHeader(dataset=d.name, request_id=rec.request_id),
                                  rec.partition_key, list(rec.ops)))
                    again_at.append(i)
        if again:
            for i, r in zip(again_at, self.run_writes(again, max(0.0, deadline - world.monotonic()))):
                out[i] = r
        return out  # type: ignore[return-value]

    @staticmethod
    def outcome(rec: Record, a: Answer) -> RecordResult:
        """A storage node's answer to a single-key record, as the request's result: a
        record of one group (an event id) says whether it was a duplicate, with the first
        outcome."""
        r = answer.decoded(a)
        if not rec.groups:
            if len(r.results) != len(rec.ops):
                raise reused_request_id()
            return r
        if not r.groups:
            raise reused_request_id()
        ops = rec.groups[0].ops
        g = r.groups[0]
        # A group's results leave out what the writer knows (storage_node/apply.py): a
        # put's value is its own, its version the group's position + 1.
        full = g.results or tuple(OpResult(found=True) for _ in ops)  # held, no increment
        results = tuple(OpResult(found=True, value=Stored(op.value, g.position + 1))
                        if isinstance(op, Put) and res.value is None else res
                        for op, res in zip(ops, full))
        return RecordResult(r.request_id, r.log_id, g.position, r.shard, r.digest, r.node_id,
                            g.applied, g.duplicate, results)

    def run_records(self, records: list[tuple[int, int, bytes, bytes]],
                    deadline_s: float) -> list[Answer]:
        """Append records (log, shard, request id, encoded record) that name this
        coordinator's callback, and wait for a storage node's answer to each (record/answer.py).
        All records of one log go in one append. The first failure is raised."""
        out = self.append_and_wait([Appending(*r) for r in records], deadline_s)
        for o in out:
            if isinstance(o, Refusal):
                raise o
        return out  # type: ignore[return-value]

    def append_and_wait(self, records: list[Appending], deadline_s: float) -> list[Answer | Placed | Refusal]:
        """Append records, all of one log in one append (group commit when alone), and
        for each: the storage node's answer if it names this coordinator's callback (`wait`),
        else where the log placed it; or the Refusal that ended it (its log was unavailable,
        or no answer came in time). Each record fails alone.

        Each record goes to its shard's log as the shard -> log map says when it is sent,
        named with the shard's generation there (log/seals.py). A log that refuses an append
        because a record in it is of a shard handed over (or whose map here is older) has
        sequenced nothing of it: the map is read again and each record sent where it now
        says, under the same request id. A shard whose hand-off is under way holds its
        records until it is done (docs/log.md, "Adding logs and handing shards over")."""
        waiting = [i for i, r in enumerate(records) if r.wait]
        waiters = self.answers.expect([(records[i].log_id, records[i].shard, records[i].request_id)
                                       for i in waiting])
        deadline = world.monotonic() + deadline_s
        out: list[Answer | Placed | Refusal | None] = [None] * len(records)
        shards, waits = [r.shard for r in records], [r.wait for r in records]
        try:
            todo, backoff, first = list(range(len(records))), rounds.BACKOFF_FIRST_S, True
            resent: set[int] = set()  # refused as sealed: an attempt before may have landed
            while todo:
                r = rounds.route(self.log_map, shards, todo)
                again = list(r.held)
                for log_id, idx in r.by_log.items():
                    got: list[Placed] | Sealed | Refusal
                    try:
                        # (A lone record's first append is given the whole deadline_s, as it
                        # always was: noticed, left for the simulation's next recalibration.)
                        left = max(0.0, deadline - world.monotonic())
                        with tracing.span("append", log=log_id, records=len(idx)):
                            got = self._append_to(log_id, [records[i] for i in idx],
                                                  [g for g, _, _ in r.stints[log_id]],
                                                  deadline_s if len(idx) == 1 and first else left)
                    except (Sealed, Refusal) as e:
                        got = e
                    d = rounds.answered(got, idx, waits, r.stints[log_id], resent)
                    for i, o in d.out.items():
                        out[i] = o
                    again += d.again
                    resent.update(d.again)
                todo, first = sorted(again), False
                left = deadline - world.monotonic()
                step = rounds.next_step(todo, left)
                if step is rounds.Step.GIVE_UP:
                    for i in todo:
                        out[i] = rounds.held_too_long(records[i].shard)
                    break
                if step is rounds.Step.AGAIN:
                    world.sleep(min(backoff, left))
                    backoff = rounds.next_backoff(backoff)
                    self.refresh_log_map()
            for i, w in zip(waiting, waiters):
                if out[i] is not None:  # its append failed
                    continue
                try:
                    with tracing.span("storage answer", shard=records[i].shard):
                        out[i] = w.result(max(0.0, deadline - world.monotonic()))
                except futures.TimeoutError:
                    out[i] = rounds.no_answer()
            return out  # type: ignore[return-value]
        finally:
            self.answers.forget([records[i].request_id for i in waiting], waiters)

    def refresh_log_map(self) -> None:
        """Read the shard -> log map again (a log refused a record: its shard moved)."""
        try:
            m = registry.read_log_map(self.zk, self.kv, self.log_count)
        except Exception as e:  # ZooKeeper does not answer now: the next try reads again
            log.warning("the shard -> log map could not be read: %s", e)
            return
        if m.version >= self.log_map.version:
            self.log_map = m

    def _append_to(self, log_id: int, records: list[Appending], generations: list[int],
                   deadline_s: float) -> list[Placed]:
        """Append `records` to `log_id` (one alone by group commit, more in one append of
        their own). Sealed if the log refused them (nothing of them appended); Refusal."""
        try:
            if len(records) == 1:
                r = records[0]
                return [self.appender(log_id).append(r.payload, deadline_s, r.shard, generations[0])]
            return self.appender(log_id).append_many(
                [(r.payload, 0.0, r.shard, g) for r, g in zip(records, generations)], deadline_s)
        except Refusal as e:
            raise Refusal(Code.UNAVAILABLE, f"the log is unavailable ({e.message}); retry") from None
        except GroupTimeout:
            raise Refusal(Code.DEADLINE_EXCEEDED,
                        "the log did not take the request in time (it was not applied); retry "
                        "with the same header.request_id") from None

    def deliver(self, results: Sequence[Answer]) -> None:
        """Storage nodes' answers (coordinator/answers.py)."""
        self.answers.deliver(results)

    def read_index(self, log_id: int) -> int | None:
        return self.read_index_by(log_id)[0]

    def read_index_by(self, log_id: int) -> tuple[int | None, str]:
        """A strong read's index and how it was had: the lease or a round
        (LogClient.read_index_by)."""
        return self.logs.read_index_by(log_id)

    def strong_read(self, d: Dataset, header: pb.RequestHeader, pkey: bytes, op: Op,
                    deadline_s: float) -> tuple[OpResult, int]:
        """A linearizable read without a log append: wait until a replica has applied up
        to the read index, then read it there. Falls back to a read through the log."""
        log_id, req = self.read_request(d, pkey, op)
        rr = self._reads.get(log_id, req)
        if rr is not None:  # (counted by read_round)
            return codec.op_result_from_pb(rr.result), rr.position
        STRONG_READS.labels(path="log").inc()
        r = self.execute(d, read_header(header), pkey, [op], deadline_s)
        return r.results[0], r.position

    def read_request(self, d: Dataset, pkey: bytes, op: Op) -> tuple[int, pb.ReadRequest]:
        """A strong read's log and the storage read it asks for (Refusal: a bad key)."""
        check_partition(pkey, "key.partition")
        shard = d.shard_of(pkey, self.kv.shards)
        return self.log_map.log_of(shard), pb.ReadRequest(dataset=d.id, shard=shard, partition_key=pkey,
                                                           op=codec.op_to_pb(op))

    def read_round(self, log_id: int, reqs: list[pb.ReadRequest]) -> list[pb.ReadResponse] | None:
        """One ReadIndex round for the reads of one log: the index, then one ReadMany at a
        replica that has applied that far (another if one fails)."""
        READ_ROUNDS.inc()
        with tracing.span("read index", log=log_id):
            idx, path = self.read_index_by(log_id)
            tracing.add(by=path)
        if idx is None:
            return None
        # One ReadMany per replica set among the reads (one in all unless replica sets
        # place the shards on fewer nodes than all).
        sets = self.replicas.sets()
        groups: dict[tuple[int, ...], list[int]] = {}
        for i, r in enumerate(reqs):
            groups.setdefault(sets.of(r.shard) if sets is not None and r.shard < len(sets.sets) else (),
                              []).append(i)
        out: list[pb.ReadResponse | None] = [None] * len(reqs)
        for idxs in groups.values():
            many = pb.ReadManyRequest(log_id=log_id, min_position=idx + 1,
                                      wait_ms=limits.READ_APPLY_WAIT_MS, requests=[reqs[i] for i in idxs])
            with tracing.span("replica read", reads=len(idxs)):
                got = self.replicas.first_answer("ReadMany", many, limits.READ_CALL_TIMEOUT_S,
                                                 reqs[idxs[0]].shard, prefer=self.dc)
            if got is None:
                return None
            for i, resp in zip(idxs, got.responses):
                out[i] = resp
        STRONG_READS.labels(path=path).inc(len(reqs))
        return out  # type: ignore[return-value]

    def read_replica(self, d: Dataset, pkey: bytes, op: Op, deadline_s: float,
                     min_position: int = 0, wait_ms: int = 0, dc: str = "") -> pb.ReadResponse:
        """A read from one storage replica (another if it fails), those in data center `dc`
        (the caller's) first."""
        shard = d.shard_of(pkey, self.kv.shards)
        req = pb.ReadRequest(dataset=d.id, shard=shard, partition_key=pkey, op=codec.op_to_pb(op),
                             min_position=min_position, wait_ms=wait_ms)
        with tracing.span("replica read"):
            r = self.replicas.first_answer("Read", req, deadline_s, shard, dc)
        if r is None:
            raise Refusal(Code.UNAVAILABLE, "no storage node answered; retry")
        return r  # type: ignore[no-any-return]


    # ------------------------------------------------------------ eventual datasets
    def eventual_write(self, d: Dataset, pkey: bytes, lkey: bytes, value: bytes, ttl_ms: int,
                       deleted: bool, deadline_s: float, dc: str = "") -> int:
        """Write to every replica, done once a majority has it, of those in the caller's
        data center `dc` (or this coordinator's) when the shard has some there
        (coordinator/eventual.py local_quorum)."""
        version = self.clock.next()
        v = eventual.stamp(value, version, ttl_ms or d.ttl_ms, deleted)
        req = pb.LwwWriteRequest(dataset=d.id, shard=d.shard_of(pkey, self.kv.shards),
                                 partition_key=pkey, local_key=lkey, value=v)
        counted, n = self._quorum_of(req.shard, dc)
        ok = self.replicas.fan_out("LwwWrite", req, deadline_s, eventual.quorum(n), req.shard, counted)
        short = eventual.write_shortfall(sum(1 for a, _ in ok if counted is None or a in counted), n)
        if short is not None:
            raise Refusal(Code.UNAVAILABLE, short)
        return version

    def _quorum_of(self, shard: int, dc: str) -> tuple[set[str] | None, int]:
        """For an eventual dataset's call: the addresses whose answers count (None: any) and
        the replica count its majority is of. From data center `dc` (the caller's, else this
        coordinator's), the shard's replicas there when it has some (local_quorum); with no
        data center, or in a cluster that names none, every replica as before."""
        where = dc or self.dc
        sets = self.replicas.sets()
        ids = sets.of(shard) if sets is not None and shard < len(sets.sets) else self.kv.storage_nodes
        if not where:
            return None, self.replicas.copies(shard) or len(self.kv.storage_nodes)
        dcs = self.replicas.data_centers(dc)  # (a caller's data center no node names: refused)
        local, n = eventual.local_quorum(ids, dcs, where)
        if len(local) == len(ids):
            return None, n  # every replica there, or none of them: every replica's answer counts
        holders = self.replicas.holders(shard)
        return {holders[i] for i in local if i in holders}, n

    def eventual_read(self, d: Dataset, pkey: bytes, req: pb.LwwReadRequest,
                      deadline_s: float, dc: str = "") -> list[pb.LwwReadResponse]:
        """A majority of the replicas' answers (of those in the caller's data center `dc`, or
        this coordinator's, when the shard has some there); those among them that hold an
        older version of a single key get the newest written back (read repair)."""
        req.dataset, req.shard, req.partition_key = d.id, d.shard_of(pkey, self.kv.shards), pkey
        counted, n = self._quorum_of(req.shard, dc)
        ok = self.replicas.fan_out("LwwRead", req, deadline_s, eventual.quorum(n), req.shard, counted)
        ok = [(a, r) for a, r in ok if counted is None or a in counted]
        short = eventual.read_shortfall(len(ok), n)
        if short is not None:
            raise Refusal(Code.UNAVAILABLE, short)
        best = eventual.winner([r for _, r in ok]) if not req.scan else None
        if best is not None:
            fix = pb.LwwWriteRequest(dataset=req.dataset, shard=req.shard, partition_key=pkey,
                                     local_key=req.local_key, value=best)
            for addr, r in ok:
                if eventual.needs_repair(r, best):
                    EVENTUAL_REPAIRS.inc()
                    self.replicas.send(addr, "LwwWrite", fix, limits.REPAIR_TIMEOUT_S)
        return [r for _, r in ok]

# -------------------------------------------------------------------- validation
def reused_request_id() -> Refusal:
    """The first outcome kept for a request id does not answer this request: the id was
    used before for another one (a client's bug: ids are per request, retries excepted)."""
    return Refusal(Code.FAILED_PRECONDITION, "header.request_id: used before by another request, whose "
                   "outcome is kept for it and does not answer this one; give each request its own id")


def read_header(header: pb.RequestHeader) -> pb.RequestHeader:
    """A strong read sent through the log: its dataset and request id, no event id."""
    return pb.RequestHeader(dataset=header.dataset, request_id=header.request_id)


def early_result(rec: Record, placed: Placed, default_ttl_ms: int) -> RecordResult | None:
    """The outcome of a plain put or delete as apply will compute it (storage_node/apply.py):
    a put's position is its shard's (its log position, plus the shard's version base in
    the log for a shard handed over from another: the log took the record only in the stint
    the coordinator's map named, log/seals.py), its version that + 1, its log time at least
    the shard's floor there. None when the log client retried the append after an unknown
    outcome: an earlier copy may sit at a lower position, and that copy is the one applied
    (the later one is a duplicate), so the position in hand proves nothing."""
    if placed.maybe_earlier_copy:
        return None
    assert len(rec.ops) == 1
    op = rec.ops[0]
    if isinstance(op, Put):
        ttl = op.ttl_ms or default_ttl_ms
        ts = max(placed.timestamp_ms, placed.ts_floor)
        value = Stored(op.value, placed.position + placed.version_base + 1, ts + ttl if ttl else 0)
        res = OpResult(found=True, value=value)
    else:
        res = OpResult()
    position = placed.position + placed.version_base
    return RecordResult(rec.request_id, placed.log_id, position, rec.shard, 0, -1, True, False, (res,))


