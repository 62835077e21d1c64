"""The placement rule (fleet/failure_domains.py) wherever copies are placed: replica sets
at creation and in moves (catalog/replica_sets.py), segment ensembles (log/ensemble.py)
and re-replication (log/rereplicate.py)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from catalog import replica_sets
from drivers import moves
from fleet import failure_domains as fd
from fleet.failure_domains import Domain, PlacementError
from log import ensemble, rereplicate
from log.metadata import LogMetadata, Segment


def layout(machines: int, per: int, zones: int = 0) -> dict[int, Domain]:
    """`per` servers on each of `machines` machines (ids in machine order), the machines
    dealt round `zones` zones."""
    return {m * per + i: Domain(f"m{m}", (("zone", f"z{m % zones}"),) if zones else ())
            for m in range(machines) for i in range(per)}


def no_shared(copies: tuple[int, ...], where: dict[int, Domain]) -> bool:
    return not fd.shared(copies, fd.lookup(where))


@settings(max_examples=60, deadline=None)
@given(machines=st.integers(3, 6), per=st.integers(1, 4), shards=st.integers(1, 48),
       replicas=st.integers(1, 3))
def test_the_first_placement_never_puts_two_copies_on_one_machine(machines: int, per: int, shards: int,
                                                                  replicas: int) -> None:
    where = layout(machines, per)
    sets = replica_sets.spread(shards, sorted(where), replicas, fd.lookup(where))
    assert all(no_shared(s, where) for s in sets.sets)
    counts = replica_sets.counts(sets)
    # Even enough that a rebalance has little to do: within two of each other.
    assert max(counts.values()) - min(counts.get(n, 0) for n in where) <= 2


def test_without_machines_the_first_placement_is_the_old_one() -> None:
    """Members with no machine recorded each count as a machine: the dealing is unchanged
    (a cluster made before machines were places as it did)."""
    for n, r, s in ((4, 3, 16), (5, 2, 7), (7, 3, 64)):
        sets = replica_sets.spread(s, list(range(n)), r)
        assert sets.sets == tuple(tuple(sorted((i * r + j) % n for j in range(r))) for i in range(s))


def test_three_zones_get_one_copy_each_and_too_few_machines_are_named() -> None:
    where = layout(6, 2, zones=3)  # m0,m3 in z0; m1,m4 in z1; m2,m5 in z2
    dom = fd.lookup(where)
    for s in replica_sets.spread(24, sorted(where), 3, dom).sets:
        assert sorted(dom(n).locality[0][1] for n in s) == ["z0", "z1", "z2"]
    two = layout(2, 3)
    with pytest.raises(PlacementError, match=r"3 copies of shard 0 need 3 distinct machines; the candidates "
                                             r"run on 2 \(m0: 0, 1, 2; m1: 3, 4, 5\)"):
        replica_sets.spread(4, sorted(two), 3, fd.lookup(two))
    # A cluster that says it runs on one machine places anyway, spread as far as it can.
    sets = replica_sets.spread(4, sorted(two), 3, fd.lookup(two), one_machine=True)
    assert all(len(fd.machines(s, fd.lookup(two))) == 2 for s in sets.sets)


@settings(max_examples=60, deadline=None)
@given(machines=st.integers(3, 5), per=st.integers(2, 3), shards=st.integers(4, 32), seed=st.randoms())
def test_rebalance_moves_apart_copies_laid_out_before_the_rule(machines: int, per: int, shards: int,
                                                               seed) -> None:  # type: ignore[no-untyped-def]
    where = layout(machines, per)
    members = sorted(where)
    old = replica_sets.spread(shards, members, 3)  # by count alone: neighbours share machines
    plan = replica_sets.plan_moves(old, members, domain_of=fd.lookup(where))
    after = old
    for shard, to, frm in plan:
        assert frm in after.of(shard) and to not in after.of(shard)
        after = replica_sets.with_set(after, shard, (set(after.of(shard)) - {frm}) | {to})
    assert all(no_shared(s, where) for s in after.sets)
    counts = replica_sets.counts(after)
    assert max(counts.get(n, 0) for n in members) - min(counts.get(n, 0) for n in members) <= 2
    # And a plan from there keeps it so.
    assert replica_sets.plan_moves(after, members, domain_of=fd.lookup(where)) == [] or all(
        fd.allowed(after.of(s), to, frm, fd.lookup(where)) for s, to, frm in
        replica_sets.plan_moves(after, members, domain_of=fd.lookup(where)))


def in_dcs(per_dc: tuple[int, ...], nodes_per_machine: int = 1) -> dict[int, Domain]:
    """Data centers dc0, dc1, ... of `per_dc[i]` machines each (a zone each), with
    `nodes_per_machine` storage nodes on every machine; ids in that order."""
    out: dict[int, Domain] = {}
    for d, machines in enumerate(per_dc):
        for m in range(machines):
            for _ in range(nodes_per_machine):
                out[len(out)] = Domain(f"d{d}m{m}", (("dc", f"dc{d}"), ("zone", f"z{m}")))
    return out


def per_dc(copies: tuple[int, ...], where: dict[int, Domain]) -> dict[str, int]:
    out: dict[str, int] = {}
    for c in copies:
        out[where[c].dc] = out.get(where[c].dc, 0) + 1
    return out


@settings(max_examples=60, deadline=None)
@given(dcs=st.lists(st.integers(2, 4), min_size=2, max_size=4), replicas=st.integers(1, 6),
       shards=st.integers(1, 40))
def test_data_centers_are_dealt_the_copies_in_turn(dcs: list[int], replicas: int, shards: int) -> None:
    """The first placement gives each data center as many copies of a shard as another,
    give or take one (rule 4), where each has machines enough for its share."""
    where = in_dcs(tuple(dcs))
    if replicas > len(where):
        return
    for s in replica_sets.spread(shards, sorted(where), replicas, fd.lookup(where)).sets:
        counts = per_dc(s, where)
        share = [counts.get(f"dc{d}", 0) for d in range(len(dcs))]
        if all(m >= -(-replicas // len(dcs)) for m in dcs):
            assert max(share) - min(share) <= 1, (s, share)
        assert no_shared(s, where)


@settings(max_examples=60, deadline=None)
@given(dcs=st.lists(st.integers(2, 4), min_size=2, max_size=3), shards=st.integers(2, 40),
       grow=st.lists(st.integers(0, 2), min_size=3, max_size=3), data=st.data())
def test_no_move_takes_a_copy_out_of_its_data_center(dcs: list[int], shards: int, grow: list[int],
                                                    data: st.DataObject) -> None:
    """A rebalance (machines added in each data center) and a drain keep each data center's
    copies of every shard: each keeps the data a fail-over to it needs."""
    where = in_dcs(tuple(dcs))
    first = sorted(where)
    sets = replica_sets.spread(shards, first, len(dcs), fd.lookup(where))
    bigger = in_dcs(tuple(m + g for m, g in zip(dcs, grow)))
    # (the grown layout renumbers: map the first nodes onto it by machine name)
    by_name = {d.machine: n for n, d in bigger.items()}
    sets = replica_sets.ReplicaSets(sets.replicas, tuple(tuple(sorted(by_name[where[n].machine] for n in s))
                                                         for s in sets.sets), 1)
    before = [per_dc(s, bigger) for s in sets.sets]
    members = sorted(bigger)
    spare = [n for n in members if sum(1 for m in members if bigger[m].dc == bigger[n].dc) > 1]
    drain = [data.draw(st.sampled_from(spare))] if spare and data.draw(st.booleans()) else []
    after = sets
    for shard, to, frm in replica_sets.plan_moves(sets, members, drain, domain_of=fd.lookup(bigger)):
        assert fd.keeps_data_center(to, frm, fd.lookup(bigger))
        after = replica_sets.with_set(after, shard, (set(after.of(shard)) - {frm}) | {to})
    assert [per_dc(s, bigger) for s in after.sets] == before
    assert not any(n in s for s in after.sets for n in drain)
    assert all(no_shared(s, bigger) for s in after.sets)
    # Within each data center the counts are even (to within one)
    counts = replica_sets.counts(after)
    for dc in {d.dc for d in bigger.values()}:
        xs = [counts.get(n, 0) for n in members if bigger[n].dc == dc and n not in drain]
        assert max(xs) - min(xs) <= 1, (dc, xs)


def test_a_copy_that_cannot_stay_in_its_data_center_is_refused_naming_it() -> None:
    where = {0: Domain("a", (("dc", "east"),)), 1: Domain("b", (("dc", "west"),)),
             2: Domain("c", (("dc", "west"),)), 3: Domain("d", (("dc", "north"),))}
    sets = replica_sets.ReplicaSets(3, ((0, 1, 3),), 1)
    with pytest.raises(PlacementError, match=r"shard 0: its copy on node 0 has nowhere to go in its data "
                                             r"center east .*add a storage node in east first"):
        replica_sets.plan_moves(sets, sorted(where), [0], domain_of=fd.lookup(where))
    assert replica_sets.plan_moves(sets, sorted(where), [1], domain_of=fd.lookup(where)) == [(0, 2, 1)]
    assert not fd.allowed((0, 1, 3), 2, 0, fd.lookup(where))  # east's copy to west
    assert fd.allowed((0, 1, 3), 2, 1, fd.lookup(where))  # west's copy within west
    assert fd.allowed((0, 1), 2, None, fd.lookup(where))  # a copy added: anywhere the rule allows
    # `midtown shard move` (drivers/moves.py check_rule) says why, naming --to
    said = moves.against_rule((0, 1, 3), 0, 2, 0, fd.lookup(where), False)
    assert said is not None and said.startswith("--to: storage node 2 is in data center 'west', and the copy "
                                                "leaves 'east' (node 0)")
    assert moves.against_rule((0, 1, 3), 0, 2, 1, fd.lookup(where), False) is None
    beside = fd.lookup({**where, 4: Domain("b", (("dc", "west"),))})  # node 4 on node 1's machine
    assert "two copies on one machine" in (moves.against_rule((0, 1, 2, 3), 0, 4, 2, beside, False) or "")


def test_a_drain_that_would_put_two_copies_on_one_machine_is_refused() -> None:
    # Machines m0 (nodes 0, 1), m1 (2), m2 (3): draining 3 leaves only m0 and m1 for shard 0's copies.
    where = {0: Domain("m0"), 1: Domain("m0"), 2: Domain("m1"), 3: Domain("m2")}
    sets = replica_sets.ReplicaSets(3, ((0, 2, 3),), 1)
    with pytest.raises(PlacementError, match=r"shard 0: its copy on node 3 has nowhere to go without two "
                                             r"copies on one machine"):
        replica_sets.plan_moves(sets, sorted(where), [3], domain_of=fd.lookup(where))
    assert replica_sets.plan_moves(sets, sorted(where), [3], domain_of=fd.lookup(where), one_machine=True) \
        == [(0, 1, 3)]


@settings(max_examples=100, deadline=None)
@given(machines=st.integers(3, 6), per=st.integers(1, 3), claimant=st.integers(0, 17), data=st.data())
def test_segment_ensembles_and_their_replacements_keep_machines_apart(machines: int, per: int, claimant: int,
                                                                      data) -> None:  # type: ignore[no-untyped-def]
    where = layout(machines, per)
    dom = fd.lookup(where)
    pool = sorted(where)
    claimant %= len(pool)
    live = data.draw(st.sets(st.sampled_from(pool)))
    load = data.draw(st.dictionaries(st.sampled_from(pool), st.integers(0, 9)))
    for ens in (ensemble.choose(claimant, live, load, pool=pool, domain_of=dom),
                ensemble.ring(claimant, live, pool, domain_of=dom)):
        assert ens[0] == claimant and len(ens) == 3 and no_shared(ens, where)
    # A sealed segment that lost a server is re-replicated onto a machine that holds none of it.
    seg = Segment(1, 0, ensemble.choose(claimant, live, load, pool=pool, domain_of=dom), 0, end=9, last_ts=9)
    meta = LogMetadata(0, 2, (seg, Segment(2, 10, seg.replicas, 9)))
    dead = seg.replicas[1]
    for move in rereplicate.plan(meta, set(pool) - {dead}, load, dom):
        assert move.dead == dead
        assert no_shared(tuple(r if r != dead else move.target for r in seg.replicas), where)


def test_an_ensemble_on_two_machines_is_refused_naming_them() -> None:
    where = layout(2, 2)
    with pytest.raises(ensemble.NoEnsemble, match=r"3 servers of a segment need 3 distinct machines; the "
                                                  r"candidates run on 2 \(m0: 0, 1; m1: 2, 3\)"):
        ensemble.choose(0, [0, 1, 2, 3], {}, pool=[0, 1, 2, 3], domain_of=fd.lookup(where))
    ens = ensemble.ring(0, [0, 1, 2, 3], [0, 1, 2, 3], domain_of=fd.lookup(where), one_machine=True)
    assert ens == (0, 2, 1)  # the other machine first: spread as far as it can go


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=80))
def test_a_locality_is_parsed_or_refused_naming_the_field(text: str) -> None:
    try:
        tiers = fd.parse_locality(text)
    except ValueError as e:
        assert str(e).startswith("locality: ")
        return
    assert fd.parse_locality(fd.locality_text(tiers)) == tiers


@pytest.mark.parametrize("text, says", [
    ("zone", "'zone' in 'zone' is not tier=value"),
    ("Zone=a", "tier 'Zone'"),
    ("zone=", "value '' of zone"),
    ("zone=a,zone=b", "tier 'zone' twice"),
    ("zone=a b", "value 'a b' of zone"),
])
def test_malformed_localities(text: str, says: str) -> None:
    with pytest.raises(ValueError, match="locality: ") as e:
        fd.parse_locality(text)
    assert says in str(e.value)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40))
def test_a_machine_name_is_taken_or_refused_naming_the_field(name: str) -> None:
    try:
        assert fd.check_machine(name) == name
    except ValueError as e:
        assert str(e).startswith("machine: ")


def test_a_segment_moved_off_a_lost_copy_leaves_that_copys_machine_whole() -> None:
    """log/ensemble.py off_machines_of: a copy that stopped answering is most often its
    machine gone quiet, whose other servers are registered still."""
    off_machines_of = ensemble.off_machines_of
    machine = {0: "a", 1: "a", 2: "b", 3: "b", 4: "c", 5: "c", 6: "d"}

    def domain_of(s: int) -> Domain:
        return Domain(machine[s])

    assert off_machines_of({1}, [0, 2, 3, 4, 5, 6], domain_of) == [2, 3, 4, 5, 6]
    assert off_machines_of({1, 3}, [0, 2, 4, 5, 6], domain_of) == [4, 5, 6]
    # Too few left off those machines: the live servers as they are.
    assert off_machines_of({1, 3, 5}, [0, 2, 4, 6], domain_of) == [0, 2, 4, 6]
    # One machine for all (a development cluster): nothing to leave.
    assert off_machines_of({1}, [0, 2], lambda s: Domain("one"), one_machine=True) == [0, 2]
    assert off_machines_of(set(), [0, 2, 4], domain_of) == [0, 2, 4]


@settings(max_examples=60, deadline=None)
@given(dcs=st.lists(st.integers(1, 4), min_size=1, max_size=4), k=st.integers(1, 3),
       shards=st.integers(1, 30))
def test_copies_per_dc_places_exactly_that_many_in_each_data_center(dcs: list[int], k: int,
                                                                    shards: int) -> None:
    """With the cluster's copies-per-dc, the first placement gives every data center exactly
    that many copies of each shard, on distinct machines; a data center with fewer machines
    is refused naming it (and check_per_dc says so first, naming the setting)."""
    where = in_dcs(tuple(dcs))
    members = sorted(where)
    empty = replica_sets.everyone(shards, members)
    if min(dcs) < k:
        with pytest.raises(ValueError, match=r"copies-per-dc: .* need .* machines there"):
            replica_sets.check_per_dc(k, empty, members, fd.lookup(where))
        with pytest.raises(PlacementError, match="in data center dc"):
            replica_sets.spread(shards, members, 3, fd.lookup(where), per_dc=k)
        return
    replica_sets.check_per_dc(k, empty, members, fd.lookup(where))
    sets = replica_sets.spread(shards, members, 3, fd.lookup(where), per_dc=k)
    assert sets.replicas == k * len(dcs)
    for s in sets.sets:
        assert per_dc(s, where) == {f"dc{d}": k for d in range(len(dcs))}
        assert no_shared(s, where)
    counts = replica_sets.counts(sets)
    for d in range(len(dcs)):  # each data center's members hold as many as one another, give or take one
        xs = [counts.get(n, 0) for n in members if where[n].dc == f"dc{d}"]
        assert max(xs) - min(xs) <= 1, xs


def test_first_sets_waits_for_more_members_than_the_copies_per_dc_make() -> None:
    where = in_dcs((2, 2))
    assert replica_sets.first_sets(4, sorted(where), 3, 0, fd.lookup(where), per_dc=2) is None
    placed = replica_sets.first_sets(4, sorted(where), 3, 0, fd.lookup(where), per_dc=1)
    assert placed is not None and all(per_dc(s, where) == {"dc0": 1, "dc1": 1} for s in placed.sets)


@settings(max_examples=40, deadline=None)
@given(dcs=st.lists(st.integers(2, 3), min_size=2, max_size=3), shards=st.integers(1, 20),
       new_dc=st.integers(1, 3), raise_to=st.booleans())
def test_a_data_center_added_later_or_a_count_raised_gets_its_copies_added(
        dcs: list[int], shards: int, new_dc: int, raise_to: bool) -> None:
    """Placed with one copy per data center, then a data center added (new_dc machines) or
    the count raised to 2: the plan adds (to, None) exactly the copies each data center lacks,
    each within its data center and on a machine of its own, moves no other copy out of its
    data center, and a plan made from the result adds nothing more."""
    where = in_dcs(tuple(dcs))
    sets = replica_sets.spread(shards, sorted(where), 3, fd.lookup(where), per_dc=1)
    sets = replica_sets.ReplicaSets(sets.replicas, sets.sets, 1)
    bigger = in_dcs((*dcs, new_dc))  # the new data center's ids come last: the old ones keep theirs
    k = 2 if raise_to else 1
    if k > new_dc:
        with pytest.raises(ValueError, match=r"copies-per-dc: 2 copies in data center dc\d need 2 machines"):
            replica_sets.check_per_dc(k, sets, sorted(bigger), fd.lookup(bigger))
        return
    replica_sets.check_per_dc(k, sets, sorted(bigger), fd.lookup(bigger))
    plan = replica_sets.plan_moves(sets, sorted(bigger), domain_of=fd.lookup(bigger), per_dc=k)
    after = sets
    for shard, to, frm in plan:
        if frm is None:
            assert fd.allowed(after.of(shard), to, None, fd.lookup(bigger))
        else:
            assert fd.keeps_data_center(to, frm, fd.lookup(bigger))
        after = replica_sets.with_set(after, shard, (set(after.of(shard)) - {frm}) | {to})
    added = [m for m in plan if m[2] is None]
    assert len(added) == shards * (k * (len(dcs) + 1) - len(dcs))
    for s in after.sets:
        assert per_dc(s, bigger) == {f"dc{d}": k for d in range(len(dcs) + 1)}
        assert no_shared(s, bigger)
    assert not [m for m in replica_sets.plan_moves(after, sorted(bigger), domain_of=fd.lookup(bigger),
                                                   per_dc=k) if m[2] is None]


def test_copies_per_dc_is_refused_naming_it_when_it_cannot_be_held() -> None:
    where = in_dcs((2, 2))
    members = sorted(where)
    dealt = replica_sets.ReplicaSets(4, ((0, 1, 2, 3),), 1)  # two copies in each
    for k, said in [(-1, "copies-per-dc: -1, must be between 1 and 9"),
                    (10, "copies-per-dc: 10, must be between"),
                    (3, "copies-per-dc: 3 copies in data center dc0 need 3 machines there; it has 2"),
                    (1, "copies-per-dc: 1, but data center dc0 holds 2 copies of shard 0 already; copies "
                        "are added, never taken away")]:
        with pytest.raises(ValueError, match=re.escape(said)):
            replica_sets.check_per_dc(k, dealt, members, fd.lookup(where))
    plain = layout(3, 1)  # machines, no data centers
    with pytest.raises(ValueError, match="copies-per-dc: the storage nodes name no data center"):
        replica_sets.check_per_dc(1, dealt, sorted(plain), fd.lookup(plain))
    replica_sets.check_per_dc(0, dealt, members, fd.lookup(where))  # 0: R dealt, as before
    replica_sets.check_per_dc(2, dealt, members, fd.lookup(where))
