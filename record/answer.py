"""A storage node's answer to a record, as the coordinator reads it. A storage node in the
coordinator's own process answers with the model's RecordResult (nothing to encode); one
elsewhere answers over the network with kv.proto's RecordResult, which the coordinator
decodes only as far as it reads it (the second replica's answer to a record is usually
dropped after its digest check, never decoded). `Answer` is what both forms share; the
functions below read the rest from either, so no caller asks which form it holds."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from midtown_pb import kv_pb2 as pb
from record import codec
from record.model import RecordResult


class Answer(Protocol):
    """Who answered what: enough to match the answer to its record and compare digests."""

    @property
    def request_id(self) -> bytes: ...
    @property
    def log_id(self) -> int: ...
    @property
    def shard(self) -> int: ...
    @property
    def node_id(self) -> int: ...
    @property
    def position(self) -> int: ...
    @property
    def digest(self) -> int: ...
    @property
    def duplicate(self) -> bool: ...


def decoded(a: Answer) -> RecordResult:
    """The whole answer as the model's RecordResult."""
    if isinstance(a, RecordResult):
        return a
    assert isinstance(a, pb.RecordResult), type(a)
    return codec.result_from_pb(a)


def over_network(a: Answer) -> bool:
    """Whether the answer came over the network (and must carry its record's answer secret)."""
    return not isinstance(a, RecordResult)


def secret_of(a: Answer) -> int | None:
    """The answer secret an answer from the network carries (kv.proto Record.answer_secret)."""
    return a.answer_secret if isinstance(a, pb.RecordResult) else None


def group_heads(a: Answer) -> Iterator[tuple[bool, int]]:
    """Each group's (duplicate, position), in order, without decoding its results: a
    record of puts is answered this way (a bulk write's put columns)."""
    if isinstance(a, pb.RecordResult) and a.groups_all_applied:
        for _ in range(a.groups_all_applied):
            yield False, a.position
        return
    groups = a.groups if isinstance(a, pb.RecordResult) else decoded(a).groups
    for g in groups:
        yield g.duplicate, g.position


def groups_pb(a: Answer) -> list[pb.GroupResult]:
    """Each group's result in kv.proto's form (a bulk write's response is made of them)."""
    if isinstance(a, pb.RecordResult):
        return codec.groups_of(a)
    return [codec.group_result_to_pb(g) for g in decoded(a).groups]
