"""A storage node's answer reads the same whichever form it came in (record/answer.py): the
model's RecordResult from a storage node in the coordinator's process, or its protobuf
from one elsewhere, including the short form of a record whose groups all applied."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from midtown_pb import kv_pb2 as pb
from record import answer, codec
from record.model import GroupResult, OpResult, RecordResult, Stored

positions = st.integers(0, 2**40)
stored = st.builds(Stored, st.binary(max_size=8), st.integers(1, 2**40), st.integers(0, 2**40))
op_results = st.builds(OpResult, found=st.booleans(), value=st.none() | stored)


@st.composite
def results(draw: st.DrawFn) -> RecordResult:
    position = draw(positions)
    plain = draw(st.booleans())  # every group applied at the record's position: the short form
    groups = tuple(
        GroupResult(True, False, (), position) if plain else
        GroupResult(draw(st.booleans()), draw(st.booleans()), tuple(draw(st.lists(op_results, max_size=2))),
                    draw(positions))
        for _ in range(draw(st.integers(0, 4))))
    return RecordResult(draw(st.binary(min_size=1, max_size=16)), draw(st.integers(0, 64)), position,
                        draw(st.integers(0, 1024)), draw(st.integers(0, 2**64 - 1)), draw(st.integers(0, 9)),
                        draw(st.booleans()), draw(st.booleans()),
                        tuple(draw(st.lists(op_results, max_size=3))), groups)


@given(results())
def test_both_forms_read_alike(r: RecordResult) -> None:
    m = codec.result_to_pb(r)
    assert answer.decoded(r) is r
    assert answer.decoded(m) == r
    assert list(answer.group_heads(m)) == list(answer.group_heads(r)) == [(g.duplicate, g.position)
                                                                           for g in r.groups]
    assert answer.groups_pb(m) == answer.groups_pb(r) == [codec.group_result_to_pb(g) for g in r.groups]
    assert not answer.over_network(r) and answer.over_network(m)
    assert answer.secret_of(r) is None


def test_the_short_form_is_read_as_every_group_applied() -> None:
    r = RecordResult(b"rid", 1, 7, 3, 0, 2, True,
                     groups=tuple(GroupResult(True, False, (), 7) for _ in range(3)))
    m = codec.result_to_pb(r)
    assert m.groups_all_applied == 3 and not m.groups
    assert list(answer.group_heads(m)) == [(False, 7)] * 3


def test_an_answer_from_the_network_carries_its_secret() -> None:
    assert answer.secret_of(pb.RecordResult(answer_secret=42)) == 42
