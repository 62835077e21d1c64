"""The writer's rule for shards handed over to another log (log/seals.py), checked against
a model of the log over any sequence of appends, hand-off records and open records: no
payload of a shard is admitted between its hand-off record and the next record opening it
again; everything else is; a refused append is refused whole; a writer that takes the log
over from the list of sealed shards admits exactly what the old one would have."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from log.seals import NONE, Sealed, Seals, Tags
from runtime.refusals import BadRequest

SHARDS = 4
appends = st.lists(st.integers(NONE, SHARDS - 1), min_size=1, max_size=4).map(
    lambda xs: Tags(tuple(xs)))
seals = st.integers(0, SHARDS - 1).map(lambda s: Tags((s,), seal=s, to=9))
opens = st.integers(0, SHARDS - 1).map(lambda s: Tags((s,), open=s))
steps = st.lists(st.one_of(appends, appends, seals, opens), max_size=40)


def _run(seq: list[Tags], at: Seals) -> list[bool]:
    out = []
    for t in seq:
        try:
            at.admit(t)
            out.append(True)
        except Sealed as e:
            assert e.to == 9 and e.shard in t.shards
            out.append(False)
    return out


@given(steps)
def test_nothing_of_a_shard_is_admitted_between_its_hand_off_and_its_opening(seq: list[Tags]) -> None:
    sealed: set[int] = set()  # the model: which shards are handed away, in the log's order
    for t, admitted in zip(seq, _run(seq, Seals())):
        if t.seal != NONE or t.open != NONE:
            assert admitted
        else:
            assert admitted == (not sealed & set(t.shards))
        if t.seal != NONE:
            sealed.add(t.seal)
        if t.open != NONE:
            sealed.discard(t.open)


@given(steps, steps)
def test_a_writer_taking_over_from_the_list_admits_what_the_old_one_would_have(
        before: list[Tags], after: list[Tags]) -> None:
    old = Seals()
    _run(before, old)
    new = Seals(old.sealed)  # the list the log service keeps, read at the takeover
    assert _run(after, new) == _run(after, old)


@pytest.mark.parametrize("tags,field", [
    (dict(seal=1, open=1, to=2), "open"),
    (dict(seal=1), "seal.to"),
    (dict(to=3), "seal.to"),
    (dict(shards=(0, -2)), "shards"),
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
        zkpaths.change_seal(zk, 2, 5, 3)
        zkpaths.change_seal(zk, 2, 7, 4)
        out.append(zkpaths.read_seals(zk, 2))
        zkpaths.change_seal(zk, 2, 5, None)
        out += [zkpaths.read_seals(zk, 2), zkpaths.read_seals(zk, 1)]
        return out
    ens = Ensemble()
    s = Scheduler(1)
    assert s.run(body) == [{}, {5: 3, 7: 4}, {7: 4}, {}]
    assert s.failures == []
