"""The shard move protocol's rules (catalog/shard_moves.py) and a destination's install
of a copy (storage_node/shard_copy.py), one by one; tests/sim/test_moves.py runs them
together through crashes."""

from __future__ import annotations

import pytest

from catalog import shard_moves
from catalog.shard_moves import COPYING, JOINED, TAILING
from storage_node import shard_copy


def test_a_move_goes_copying_tailing_joined_and_only_an_installed_copy_joins() -> None:
    m = shard_moves.start((0, 1, 2), 5, dest=3, leaving=1)
    assert m.phase == COPYING and not shard_moves.may_join(m)
    assert not shard_moves.may_record_copy(installed_after=4, published=4)  # not published since
    assert shard_moves.may_record_copy(installed_after=4, published=5)
    m = shard_moves.copied(m, 40)
    assert m.phase == TAILING and m.copied_at == 40 and shard_moves.may_join(m)
    assert shard_moves.joined_sets((0, 1, 2), m) == (0, 1, 2, 3)
    m = shard_moves.joined(m)
    assert m.phase == JOINED
    assert not shard_moves.may_finish(m, {3: 50, 1: 60})  # the leaving replica is further on
    assert shard_moves.may_finish(m, {3: 60, 1: 60})
    assert shard_moves.finished_sets((0, 1, 2, 3), m) == (0, 2, 3)


@pytest.mark.parametrize("dest,leaving,field", [(1, 0, "to"), (3, 4, "from")])
def test_a_move_that_makes_no_sense_is_refused_naming_the_field(dest: int, leaving: int, field: str) -> None:
    with pytest.raises(ValueError, match=f"^{field}: "):
        shard_moves.start((0, 1, 2), 5, dest, leaving)


def test_a_log_is_not_truncated_while_one_of_its_shards_is_copied() -> None:
    copying = shard_moves.start((0, 1, 2), 5, 3, 1)
    tailing = shard_moves.copied(copying, 40)
    assert shard_moves.truncation_point(100, [], {}) == 100
    assert shard_moves.truncation_point(100, [copying], {3: 200}) is None
    assert shard_moves.truncation_point(100, [tailing], {3: 45}) == 45
    assert shard_moves.truncation_point(100, [tailing], {}) is None  # the destination never published
    assert shard_moves.truncation_point(None, [tailing], {3: 45}) is None  # a holder never published


def test_a_copy_is_brought_forward_to_the_tail_and_the_tail_never_goes_back() -> None:
    # A node past the copy's position: the records between come from the log, the tail stays.
    assert list(shard_copy.catch_up(50, 40)) == list(range(40, 50))
    assert shard_copy.install(50, 40, 7, {2: 30}, holds_others=True) == (50, {2: 30, 7: 50})
    assert shard_copy.install(50, 40, 7, {}, holds_others=False) == (50, {7: 50})
    # Behind it, holding another shard of the log: the shard's records below 40 are skipped.
    assert not shard_copy.catch_up(30, 40)
    tail, marks = shard_copy.install(30, 40, 7, {}, holds_others=True)
    assert (tail, marks) == (30, {7: 40})
    assert not shard_copy.applies(marks, 7, 39) and shard_copy.applies(marks, 7, 40)
    assert shard_copy.applies(marks, 2, 0)  # other shards: as before
    assert shard_copy.effective(tail, marks, 7) == 40 and shard_copy.effective(45, marks, 7) == 45
    # Holding no other shard of the log, or not tailing it: the tail starts at the copy.
    assert shard_copy.install(30, 40, 7, {}, holds_others=False) == (40, {7: 40})
    assert shard_copy.install(None, 40, 7, {}, holds_others=False) == (40, {7: 40})


def test_a_copy_on_a_node_still_starting_keeps_its_position_in_the_log() -> None:
    """A node that holds another shard of the log, restarted and not following it yet: its
    position is where it resumes, and an install must not move it past that shard's records
    (the whole-cluster simulation found a node whose position jumped from 32 to a copy's 62,
    its other shards' records between never applied)."""
    assert shard_copy.tail(32, followed=False, holds_others=True) == 32
    assert shard_copy.install(shard_copy.tail(32, False, True), 62, 2, {}, holds_others=True) == (32, {2: 62})
    assert shard_copy.tail(32, followed=True, holds_others=False) == 32
    assert shard_copy.tail(32, followed=False, holds_others=False) is None  # kept from before: means nothing


def test_a_starting_node_takes_no_copy() -> None:
    """CopyShard on a node whose start has not finished (its gRPC service answers before)
    is refused UNAVAILABLE, and the mover asks again."""
    from types import SimpleNamespace

    import grpc

    from midtown_pb import kv_pb2 as pb
    from runtime.refusals import Refusal
    from storage_node.shard_intake import Intake

    state = SimpleNamespace(node_id=4, started=False, kv=SimpleNamespace(shards=8))
    with pytest.raises(Refusal) as e:
        Intake(state, None, None).copy(pb.CopyShardRequest(shard=1))  # type: ignore[arg-type]
    assert e.value.code == grpc.StatusCode.UNAVAILABLE and "starting" in e.value.text
