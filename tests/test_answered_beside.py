"""Records answered beside their coordinator (the host layout): the storage node in the
coordinator's process answers them; the other replicas that answer the shard send one
answer in DIGEST_SAMPLE, so the replicas' digests are still compared, at a sixteenth of
the calls."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from catalog import log_map
from coordinator import bulk
from midtown_pb import kv_pb2 as pb
from record import codec
from record.model import Put, Record
from storage_node.apply_loop import answers_now
from storage_node.limits import DIGEST_SAMPLE


@given(st.integers(min_value=0, max_value=2**40))
def test_a_record_not_answered_beside_is_answered_at_every_position(position: int) -> None:
    assert answers_now(False, position)


def test_the_other_replicas_answer_one_record_in_the_sample_at_any_run_of_positions() -> None:
    for start in range(0, 100):
        answered = [p for p in range(start, start + DIGEST_SAMPLE) if answers_now(True, p)]
        assert len(answered) == 1  # every run of DIGEST_SAMPLE positions holds one comparison


def test_the_flag_survives_the_record_encoding() -> None:
    rec = Record(b"rid", "127.0.0.1:1", "d", 3, b"p", (Put(b"k", b"v"),), answered_beside=True)
    assert codec.record_from_bytes(codec.record_to_bytes(rec)).answered_beside
    plain = Record(b"rid", "127.0.0.1:1", "d", 3, b"p", (Put(b"k", b"v"),))
    assert not codec.record_from_bytes(codec.record_to_bytes(plain)).answered_beside


def test_a_bulk_write_marks_the_records_of_the_logs_answered_beside_only() -> None:
    groups = [pb.WriteGroup(partition_key=f"p{i}".encode(), event_id=f"e{i}".encode(),
                            ops=[pb.Op(put=pb.PutOp(local_key=b"k", value=b"v"))]) for i in range(200)]
    puts = pb.PutColumns(partition_keys=[f"q{i}".encode() for i in range(200)],
                         local_keys=[b"k"] * 200, values=[b"v"] * 200)
    plain = bulk.plan("d", 0, 0, 0, groups, puts, 64, log_map.first(64, 4), b"rid", "cb", 1 << 20)
    assert not any(pb.Record.FromString(p.payload).answered_beside for p in plain)
    marked = bulk.plan("d", 0, 0, 0, groups, puts, 64, log_map.first(64, 4), b"rid", "cb", 1 << 20,
                       lambda log_id, shard: log_id == 1)
    assert {p.log_id for p in marked} == {0, 1, 2, 3}
    for p, q in zip(plain, marked):
        rec = pb.Record.FromString(q.payload)
        assert rec.answered_beside == (q.log_id == 1)
        rec.answered_beside = False  # otherwise the same record
        assert rec == pb.Record.FromString(p.payload) and p.indexes == q.indexes
