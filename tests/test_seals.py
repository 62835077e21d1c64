"""The writer's rule for a log's shards (log/seals.py), checked against a model of the log
over any sequence of appends, hand-off records and open records: a payload of a shard is
admitted only within the shard's stint of the generation its sender named (from the record
that opened it at that generation, generation 0 from the start, to its next hand-off
record); a hand-off record only if it ends the shard's stint here, an open record only if
it is of that stint or a later one (not one of an earlier stint, delivered late); a refused
append is refused whole; a writer that takes the log over from the list
of stints admits exactly what the old one would have."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from log.seals import NONE, Sealed, Seals, Stint, Tags
from runtime.refusals import BadRequest

SHARDS = 3
payload = st.tuples(st.integers(NONE, SHARDS - 1), st.integers(0, 2))
appends = st.lists(payload, min_size=1, max_size=4).map(
    lambda xs: Tags(tuple(s for s, _ in xs), tuple(g for _, g in xs)))
seals = st.tuples(st.integers(0, SHARDS - 1), st.integers(0, 2)).map(
    lambda sg: Tags((sg[0],), seal=sg[0], to=9, generation=sg[1]))
opens = st.tuples(st.integers(0, SHARDS - 1), st.integers(0, 2)).map(
    lambda sg: Tags((sg[0],), open=sg[0], generation=sg[1]))
steps = st.lists(st.one_of(appends, appends, seals, opens), max_size=40)


def _run(seq: list[Tags], at: Seals) -> list[bool]:
    out = []
    for t in seq:
        try:
            at.admit(t)
            out.append(True)
        except Sealed as e:
            assert e.shard in t.shards
            out.append(False)
    return out


@given(steps)
def test_a_shard_is_admitted_only_in_its_stint_of_the_generation_named(seq: list[Tags]) -> None:
    stint: dict[int, tuple[int, bool]] = {}  # the model: shard -> (generation, open), in the log's order
    for t, admitted in zip(seq, _run(seq, Seals())):
        if t.seal != NONE:  # a hand-off record ends the stint of its generation, none other
            assert admitted == (t.generation == stint.get(t.seal, (0, True))[0])
        elif t.open != NONE:  # an open record starts a stint, not one before the shard's here
            assert admitted == (t.generation >= stint.get(t.open, (0, True))[0])
        else:
            assert admitted == all(s == NONE or stint.get(s, (0, True)) == (g, True)
                                   for s, g in zip(t.shards, t.generations))
        if not admitted:
            continue
        if t.seal != NONE:
            stint[t.seal] = (stint.get(t.seal, (0, True))[0], False)
        if t.open != NONE:
            stint[t.open] = (t.generation, True)


@given(steps, steps)
def test_a_writer_taking_over_from_the_list_admits_what_the_old_one_would_have(
        before: list[Tags], after: list[Tags]) -> None:
    old = Seals()
    _run(before, old)
    new = Seals(old.stints)  # the list the log service keeps, read at the takeover
    assert _run(after, new) == _run(after, old)


@pytest.mark.parametrize("tags,field", [
    (dict(seal=1, open=1, to=2), "open"),
    (dict(seal=1), "seal.to"),
    (dict(to=3), "seal.to"),
    (dict(shards=(0, -2)), "shards"),
    (dict(shards=(0, 1), generations=(1,)), "generations"),
    (dict(shards=(0,), generations=(-1,)), "generations"),
])
def test_tags_that_make_no_sense_are_refused_naming_the_field(tags: dict, field: str) -> None:
    with pytest.raises(BadRequest, match=f"^{field}: "):
        Tags(**tags)


def test_the_log_service_keeps_each_logs_sealed_shards() -> None:
    """log/zk.py: the list a writer taking the log over reads (none written: none sealed)."""
    from log import zk as zkpaths
    from tests.sim.scheduler import Scheduler
    from tests.sim.zookeeper import Ensemble

    def body() -> list[dict[int, int]]:
        zk = ens.client()
        zk.start()
        out = [zkpaths.read_seals(zk, 2)]
        zkpaths.change_seal(zk, 2, 5, Stint(0, to=3))
        zkpaths.change_seal(zk, 2, 7, Stint(1, to=4))
        out.append(zkpaths.read_seals(zk, 2))
        zkpaths.change_seal(zk, 2, 5, Stint(2))
        out += [zkpaths.read_seals(zk, 2), zkpaths.read_seals(zk, 1)]
        return out
    ens = Ensemble()
    s = Scheduler(1)
    assert s.run(body) == [{}, {5: Stint(0, 3), 7: Stint(1, 4)}, {5: Stint(2), 7: Stint(1, 4)}, {}]
    assert s.failures == []


truncations = st.lists(st.one_of(
    st.tuples(st.just("raise"), st.integers(0, 60)),
    st.tuples(st.just("hold"), st.sampled_from(["a", "b"]), st.integers(0, 60)),
    st.tuples(st.just("release"), st.sampled_from(["a", "b"]))), max_size=25)


@given(truncations)
def test_a_held_truncation_point_never_passes_the_hold(ops: list[tuple]) -> None:
    """log/zk.py hold_truncation, which a hand-off's driver puts on its old log before
    sealing the shard there (drivers/handoffs.py): from the hold on, no truncation raises
    the point past it, whatever it asks for, until it is released; a hold never lowers the
    point. Against a model: the point is the highest asked for, capped by the holds in
    force when each was asked."""
    from log import zk as zkpaths
    from tests.sim.scheduler import Scheduler
    from tests.sim.zookeeper import Ensemble

    def body() -> list[int]:
        zk = ens.client()
        zk.start()
        zk.create(zkpaths.truncate_path(4), b'{"before": 0}', makepath=True)
        out = []
        for op in ops:
            if op[0] == "raise":
                out.append(zkpaths.raise_truncation(zk, 4, op[1]))
            else:
                out.append(zkpaths.hold_truncation(zk, 4, op[1], op[2] if op[0] == "hold" else None))
        out.append(zkpaths.read_truncation(zk, 4)[0])
        assert zkpaths.truncation_holds(zk, 4) == holds
        return out

    point, holds, expected = 0, {}, []
    for op in ops:
        if op[0] == "raise":
            point = max(point, min(op[1], *holds.values()) if holds else op[1])
        elif op[0] == "hold":
            holds[op[1]] = op[2]
        else:
            holds.pop(op[1], None)
        expected.append(point)
    expected.append(point)
    ens = Ensemble()
    s = Scheduler(1)
    assert s.run(body) == expected
    assert s.failures == []
