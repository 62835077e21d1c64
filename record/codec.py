"""Protobuf <-> storage model, at the edge. Decoding validates: a record that does not
decode is applied as a no-op by every replica alike (it cannot wedge the log)."""

from __future__ import annotations

from midtown_pb import kv_pb2 as pb
from record.model import (
    Cas,
    Delete,
    Drop,
    Get,
    Group,
    GroupResult,
    HandOff,
    Incr,
    Op,
    Open,
    OpResult,
    OpStatus,
    Position,
    Put,
    PutRow,
    Record,
    RecordResult,
    Scan,
    Stored,
)
from runtime.refusals import BadRequest


def stored_to_pb(s: Stored | None) -> pb.Value | None:
    if s is None:
        return None
    return pb.Value(value=s.value, version=s.version, expires_at_ms=s.expires_at_ms)


def stored_from_pb(v: pb.Value) -> Stored:
    return Stored(v.value, v.version, v.expires_at_ms)


def op_from_pb(o: pb.Op) -> Op:
    kind = o.WhichOneof("op")
    if kind == "put":  # the common one: each field read once (upb field access costs)
        p = o.put
        return Put(p.local_key, p.value, p.ttl_ms)
    if kind == "delete":
        return Delete(o.delete.local_key)
    if kind == "cas":
        c = o.cas
        which = c.WhichOneof("expect")
        return Cas(
            c.local_key,
            expected_value=c.expected_value if which == "expected_value" else None,
            expect_absent=which == "expect_absent" and c.expect_absent,
            expected_version=c.expected_version,
            new_value=c.new_value,
            delete=c.delete,
            ttl_ms=c.ttl_ms,
        )
    if kind == "incr":
        return Incr(o.incr.local_key, o.incr.delta, o.incr.ttl_ms)
    if kind == "get":
        return Get(o.get.local_key)
    if kind == "scan":
        return Scan(o.scan.start, o.scan.end, o.scan.limit)
    if kind == "position":
        return Position(o.position.node_id, o.position.position)
    if kind == "drop":
        return Drop(tuple(o.drop.shards))
    if kind == "hand_off":
        return HandOff(o.hand_off.to_log, o.hand_off.from_position,
                       o.hand_off.generation if o.hand_off.HasField("generation") else None)
    if kind == "open":
        return Open(o.open.generation)
    raise BadRequest("ops[]: an operation must be one of put, delete, cas, incr, get, scan")


def op_to_pb(op: Op) -> pb.Op:
    if isinstance(op, Put):
        return pb.Op(put=pb.PutOp(local_key=op.local_key, value=op.value, ttl_ms=op.ttl_ms))
    if isinstance(op, Delete):
        return pb.Op(delete=pb.DeleteOp(local_key=op.local_key))
    if isinstance(op, Cas):
        c = pb.CheckAndSetOp(local_key=op.local_key, expected_version=op.expected_version,
                             new_value=op.new_value, delete=op.delete, ttl_ms=op.ttl_ms)
        if op.expect_absent:
            c.expect_absent = True
        elif op.expected_value is not None:
            c.expected_value = op.expected_value
        return pb.Op(cas=c)
    if isinstance(op, Incr):
        return pb.Op(incr=pb.IncrementOp(local_key=op.local_key, delta=op.delta, ttl_ms=op.ttl_ms))
    if isinstance(op, Get):
        return pb.Op(get=pb.GetOp(local_key=op.local_key))
    if isinstance(op, Position):
        return pb.Op(position=pb.PositionOp(node_id=op.node_id, position=op.position))
    if isinstance(op, Drop):
        return pb.Op(drop=pb.DropOp(shards=list(op.shards)))
    if isinstance(op, HandOff):
        return pb.Op(hand_off=pb.HandOffOp(to_log=op.to, from_position=op.from_position,
                                           generation=op.generation))
    if isinstance(op, Open):
        return pb.Op(open=pb.OpenOp(generation=op.generation))
    return pb.Op(scan=pb.ScanOp(start=op.start, end=op.end, limit=op.limit))


def put_columns(rows: list[PutRow] | tuple[PutRow, ...]) -> pb.PutColumns:
    """Rows as columns; the event id and TTL columns stay empty when no row has one."""
    pkeys, lkeys, values, ttls, eids = (list(c) for c in zip(*rows)) if rows else ([], [], [], [], [])
    return pb.PutColumns(partition_keys=pkeys, local_keys=lkeys, values=values,
                         event_ids=eids if any(eids) else [], ttl_ms=ttls if any(ttls) else [])


def put_rows(c: pb.PutColumns) -> tuple[PutRow, ...]:
    """The rows of well-formed columns (checked by the coordinator; a record whose columns
    disagree in length does not decode, and is a no-op on every replica)."""
    n = len(c.partition_keys)
    eids = c.event_ids or [b""] * n
    ttls = c.ttl_ms or [0] * n
    if not len(c.local_keys) == len(c.values) == len(eids) == len(ttls) == n:
        raise BadRequest("puts: columns of different lengths")
    return tuple(zip(c.partition_keys, c.local_keys, c.values, ttls, eids))


def record_to_bytes(r: Record) -> bytes:
    return pb.Record(
        request_id=r.request_id, callback=r.callback, dataset=r.dataset, shard=r.shard,
        partition_key=r.partition_key, ops=[op_to_pb(o) for o in r.ops],
        default_ttl_ms=r.default_ttl_ms,
        groups=[pb.Group(partition_key=g.partition_key, ops=[op_to_pb(o) for o in g.ops],
                         event_id=g.event_id) for g in r.groups],
        dedup_window_ms=r.dedup_window_ms, dedup_max_ids=r.dedup_max_ids,
        puts=put_columns(r.puts) if r.puts else None, answered_beside=r.answered_beside,
        answer_secret=r.answer_secret,
    ).SerializeToString()


def record_from_bytes(b: bytes) -> Record:
    m = pb.Record.FromString(b)
    return Record(m.request_id, m.callback, m.dataset, m.shard, m.partition_key,
                  tuple(map(op_from_pb, m.ops)), m.default_ttl_ms,
                  tuple([Group(g.partition_key, tuple(map(op_from_pb, g.ops)), g.event_id)
                         for g in m.groups]),
                  m.dedup_window_ms, m.dedup_max_ids,
                  put_rows(m.puts) if m.HasField("puts") else (), m.answered_beside, m.answer_secret)


def op_result_to_pb(r: OpResult) -> pb.OpResult:
    return pb.OpResult(
        status=r.status.name, found=r.found, value=stored_to_pb(r.value),
        items=[pb.Item(local_key=k, value=stored_to_pb(v)) for k, v in r.items], next=r.next,
    )


def op_result_from_pb(m: pb.OpResult) -> OpResult:
    return OpResult(
        OpStatus(m.status), m.found, stored_from_pb(m.value) if m.HasField("value") else None,
        tuple((i.local_key, stored_from_pb(i.value)) for i in m.items), m.next,
    )


def group_result_to_pb(g: GroupResult) -> pb.GroupResult:
    return pb.GroupResult(applied=g.applied, duplicate=g.duplicate, position=g.position,
                          results=[op_result_to_pb(x) for x in g.results])


def group_result_from_pb(m: pb.GroupResult) -> GroupResult:
    return GroupResult(m.applied, m.duplicate, tuple(op_result_from_pb(x) for x in m.results),
                       m.position)


def result_to_pb(r: RecordResult) -> pb.RecordResult:
    m = pb.RecordResult(
        request_id=r.request_id, log_id=r.log_id, position=r.position, shard=r.shard,
        digest=r.digest, node_id=r.node_id, applied=r.applied, duplicate=r.duplicate,
        results=[op_result_to_pb(x) for x in r.results],
    )
    if all(g.applied and not g.duplicate and not g.results and g.position == r.position for g in r.groups):
        m.groups_all_applied = len(r.groups)  # the common answer, without a message per group
    else:
        m.groups.extend(group_result_to_pb(g) for g in r.groups)
    return m


def groups_of(m: pb.RecordResult) -> list[pb.GroupResult]:
    """A record result's groups, spelt out."""
    if m.groups_all_applied:
        return [pb.GroupResult(applied=True, position=m.position)] * m.groups_all_applied
    return list(m.groups)


def result_from_pb(m: pb.RecordResult) -> RecordResult:
    groups = (tuple(GroupResult(True, False, (), m.position) for _ in range(m.groups_all_applied))
              if m.groups_all_applied else tuple(group_result_from_pb(g) for g in m.groups))
    return RecordResult(m.request_id, m.log_id, m.position, m.shard, m.digest, m.node_id,
                        m.applied, m.duplicate, tuple(op_result_from_pb(x) for x in m.results), groups)
