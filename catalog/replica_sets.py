"""Which storage nodes hold each shard: the shard's replica set. Pure; ZooKeeper keeps it
(catalog/registry.py, /midtown/replica_sets, versioned, each change also written to its
history).

A cluster of R storage nodes or fewer has every node hold every shard. With more, each
shard lives on R of them, so a node holds about R/N of the shards and applies only theirs:
Manhattan's "a storage node is responsible for a part of the shards". The first placement
spreads the shards evenly (spread): every node holds R*S/N shards, give or take one.

A node applies a log's records of its own shards only, answers for them only, and a log is
truncated below the positions of the nodes that hold one of its shards only
(storage_node/truncation.py)."""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from catalog.log_map import LogMap
from fleet import failure_domains
from fleet.failure_domains import Domains, PlacementError

REPLICAS_DEFAULT = 3
REPLICAS_MAX = 9


@dataclass(frozen=True)
class ReplicaSets:
    """`sets[s]`: the sorted ids of the nodes that hold shard s. `version`: ZooKeeper's
    version of the node they were read from (-1 when none is written: every member holds
    every shard, the layout of a cluster made before replica sets)."""
    replicas: int
    sets: tuple[tuple[int, ...], ...]
    version: int = -1

    def of(self, shard: int) -> tuple[int, ...]:
        return self.sets[shard]

    def holds(self, node_id: int, shard: int) -> bool:
        return node_id in self.sets[shard]

    def shards_of(self, node_id: int) -> tuple[int, ...]:
        return tuple(s for s, nodes in enumerate(self.sets) if node_id in nodes)

    def nodes_of_log(self, log_id: int, log_map: LogMap) -> tuple[int, ...]:
        """The nodes that hold a shard that travels in `log_id` (its truncation waits for
        them, and for them only)."""
        return tuple(sorted({n for s, nodes in enumerate(self.sets) if log_map.log_of(s) == log_id
                             for n in nodes}))

    def logs_of(self, node_id: int, log_map: LogMap) -> tuple[int, ...]:
        """The logs that carry one of `node_id`'s shards (the only ones it tails)."""
        return log_map.logs_of(self.shards_of(node_id))


def with_set(sets: ReplicaSets, shard: int, nodes: Iterable[int]) -> ReplicaSets:
    """`sets` with shard's replica set replaced (same version: the write checks it)."""
    new = list(sets.sets)
    new[shard] = tuple(sorted(nodes))
    return ReplicaSets(sets.replicas, tuple(new), sets.version)


def everyone(shards: int, members: Iterable[int]) -> ReplicaSets:
    """Every member holds every shard (no replica sets written)."""
    nodes = tuple(sorted(members))
    return ReplicaSets(len(nodes), tuple(nodes for _ in range(shards)))


def copies(replicas: int, per_dc: int, members: Iterable[int], domain_of: Domains | None) -> int:
    """Copies of each shard: `per_dc` in each data center the members name when the cluster
    sets a count per data center (copies-per-dc), else R (`replicas`, dealt over them)."""
    dcs = data_centers_of(members, domain_of) if per_dc else []
    return per_dc * len(dcs) if dcs else replicas


def data_centers_of(members: Iterable[int], domain_of: Domains | None) -> list[str]:
    """The data centers the members name, sorted (none: they name none)."""
    if domain_of is None:
        return []
    return sorted(d for d in failure_domains.data_centers(members, domain_of) if d)


def spread(shards: int, members: Sequence[int], replicas: int, domain_of: Domains | None = None,
           one_machine: bool = False, per_dc: int = 0) -> ReplicaSets:
    """The first placement: the shards' S*R copies dealt round the sorted members in turn,
    each shard's R copies to R members (distinct, as R <= N) that hold fewest so far, in
    the turn's order, so every member holds S*R/N shards, give or take one. With
    `domain_of`, the placement rule picks among them (fleet/failure_domains.py: never two
    copies on one machine, spread over localities); PlacementError when it cannot hold.
    With `per_dc` (the cluster's copies-per-dc) and members that name data centers, each
    data center gets exactly `per_dc` copies of every shard (R is then per_dc times them)."""
    dcs = data_centers_of(members, domain_of) if per_dc else []
    replicas = per_dc * len(dcs) if dcs else replicas
    if not dcs:  # (per data center, pick names the one without machines enough)
        check_replicas(replicas, len(members))
    nodes = sorted(members)
    n = len(nodes)
    if domain_of is None:  # every member a machine of its own: the plain dealing
        return ReplicaSets(replicas, tuple(tuple(sorted(nodes[(s * replicas + i) % n]
                                                        for i in range(replicas))) for s in range(shards)))
    dom = domain_of
    held = {m: 0 for m in nodes}
    out = []
    for s in range(shards):
        turn = [nodes[(s * replicas + i) % n] for i in range(n)]
        order = sorted(turn, key=lambda m: (held[m], turn.index(m)))
        if dcs:
            picked = tuple(m for d in dcs for m in failure_domains.pick(
                per_dc, [m for m in order if dom(m).dc == d], dom, one_machine=one_machine,
                what=f"copies of shard {s} in data center {d}"))
        else:
            picked = failure_domains.pick(replicas, order, dom, one_machine=one_machine,
                                          what=f"copies of shard {s}")
        for m in picked:
            held[m] += 1
        out.append(tuple(sorted(picked)))
    return ReplicaSets(replicas, tuple(out))


def first_sets(shards: int, members: Sequence[int], replicas: int, joining: int = 0,
               domain_of: Domains | None = None, one_machine: bool = False,
               per_dc: int = 0) -> ReplicaSets | None:
    """The replica sets to write for a cluster that has none (every member holds every
    shard), or None while it has `replicas` members or fewer (per_dc in each data center,
    with copies-per-dc), with `joining` more about to join (nothing to place). Each shard
    keeps R of the members that hold it (spread), so placing moves no data: the other
    members drop their copies."""
    if len(members) + joining <= copies(replicas, per_dc, members, domain_of):
        return None
    return spread(shards, members, replicas, domain_of, one_machine, per_dc)


def check_per_dc(per_dc: int, sets: ReplicaSets, members: Sequence[int], domain_of: Domains,
                 one_machine: bool = False) -> None:
    """ValueError naming copies-per-dc when the cluster cannot hold `per_dc` copies of
    every shard in each of its data centers: none named, a data center with fewer machines
    than that, or one holding more copies of a shard already (copies are added, never
    taken away: a lower count would leave the extra copies where they are)."""
    check_per_dc_range(per_dc)
    if not per_dc:
        return
    by_dc = {d: ms for d, ms in failure_domains.data_centers(members, domain_of).items() if d}
    if not by_dc:
        raise ValueError("copies-per-dc: the storage nodes name no data center (give each a dc= tier in its "
                         "--locality)")
    for d, ms in sorted(by_dc.items()):
        machines = len(failure_domains.machines(ms, domain_of))
        if machines < per_dc and not one_machine:
            raise ValueError(f"copies-per-dc: {per_dc} copies in data center {d} need {per_dc} machines "
                             f"there; it has {machines}: add machines in {d} first")
    if sets.version < 0:
        return  # every member holds every shard: nothing placed to compare with
    for shard, nodes in enumerate(sets.sets):
        for d, n in sorted(failure_domains.data_centers(nodes, domain_of).items()):
            if d and len(n) > per_dc:
                raise ValueError(f"copies-per-dc: {per_dc}, but data center {d} holds {len(n)} copies of "
                                 f"shard {shard} already; copies are added, never taken away (move them "
                                 f"with `midtown shard move` first, or keep the count at {len(n)} or more)")


def check_per_dc_range(per_dc: int) -> None:
    """ValueError naming copies-per-dc when it is out of range (0: not set)."""
    if not 0 <= per_dc <= REPLICAS_MAX:
        raise ValueError(f"copies-per-dc: {per_dc}, must be between 1 and {REPLICAS_MAX} (0: R copies dealt "
                         "over the data centers)")


def check_replicas(replicas: int, members: int) -> None:
    """ValueError naming the field when `replicas` cannot be placed on `members` nodes."""
    if not 1 <= replicas <= REPLICAS_MAX:
        raise ValueError(f"replicas: {replicas}, must be between 1 and {REPLICAS_MAX}")
    if members < replicas:
        raise ValueError(f"replicas: {replicas} replicas of each shard need at least {replicas} "
                         f"storage nodes; this cluster has {members}")


def counts(sets: ReplicaSets) -> dict[int, int]:
    """Shards held by each node."""
    out: dict[int, int] = {}
    for nodes in sets.sets:
        for n in nodes:
            out[n] = out.get(n, 0) + 1
    return out


def to_json(sets: ReplicaSets) -> dict:
    return {"replicas": sets.replicas, "sets": [list(s) for s in sets.sets]}


def from_json(d: dict, version: int) -> ReplicaSets:
    return ReplicaSets(int(d["replicas"]), tuple(tuple(int(n) for n in s) for s in d["sets"]), version)


# Bytes are even when no member holds more than the slack over another's, or no single
# move or swap between two members narrows their gap by more: the larger of BYTE_SLACK of
# the mean and BYTE_SLACK_MIN. A move copies a whole shard, so one that gains little is not
# worth making.
BYTE_SLACK = 0.05
BYTE_SLACK_MIN = 1 << 20


def byte_slack(loads: Iterable[int]) -> int:
    """The slack of plan_moves' byte evening, for the members' bytes `loads`."""
    xs = list(loads)
    return max(BYTE_SLACK_MIN, int(BYTE_SLACK * sum(xs) / len(xs))) if xs else BYTE_SLACK_MIN


def plan_moves(sets: ReplicaSets, members: Iterable[int], drain: Iterable[int] = (),
               max_moves: int | None = None,
               sizes: Mapping[int, int] | None = None, domain_of: Domains | None = None,
               one_machine: bool = False, per_dc: int = 0) -> list[tuple[int, int, int | None]]:
    """The moves (shard, to, from) that take every replica off the `drain` nodes, then even
    out how many shards each member holds (to within one, among the members of each data
    center where they name one: a copy stays in its data center), then, given each shard's bytes
    (`sizes`), how many bytes each holds: between the members with the widest gap, a shard
    moved from the heavier to the lighter where the counts allow it, or a larger and a
    smaller shard swapped between them (two moves), while that narrows the gap by more than
    the slack (byte_slack). Counts stay within one. Each move goes to the
    member that holds fewest (then fewest bytes) among those without a copy of the shard.
    Deterministic; the moves are planned one after another on the sets as each leaves them.

    With `domain_of`, every move keeps the placement rule (fleet/failure_domains.py): no
    move puts a copy on a machine that holds another copy of the shard, and, before the
    evening, a shard whose copies share a machine (laid out before the rule) has the
    extra ones moved to machines without one. A drain that cannot keep the rule raises
    PlacementError naming the shard (unless `one_machine`).

    With `per_dc` (the cluster's copies-per-dc), a data center that holds fewer copies of a
    shard than that (one added later, or a count raised) is given the rest first: moves
    (shard, to, None), each to its least loaded member the rule allows."""
    gone = set(drain)
    targets = sorted(set(members) - gone)
    cur = [set(s) for s in sets.sets]
    size = (lambda s: sizes.get(s, 0)) if sizes else (lambda s: 0)
    dom = domain_of or failure_domains.unknown

    def ok(shard: int, to: int, frm: int) -> bool:
        return failure_domains.allowed(cur[shard], to, frm, dom, one_machine)
    held = {n: 0 for n in targets}
    load = {n: 0 for n in targets}
    for shard, nodes in enumerate(cur):
        for n in nodes:
            if n in held:
                held[n] += 1
                load[n] += size(shard)
    out: list[tuple[int, int, int | None]] = []

    def move(shard: int, to: int, frm: int | None) -> None:
        cur[shard].discard(frm)
        cur[shard].add(to)
        held[to] += 1
        load[to] += size(shard)
        if frm in held:
            held[frm] -= 1
            load[frm] -= size(shard)
        out.append((shard, to, frm))

    def room() -> bool:
        return max_moves is None or len(out) < max_moves

    for shard, nodes in enumerate(cur):
        for frm in sorted(nodes & gone):
            free = [n for n in targets if n not in nodes]
            fits = [n for n in free if ok(shard, n, frm)]
            if free and not fits:
                stay = sorted(nodes - {frm})
                dc = dom(frm).dc
                if dc and not any(failure_domains.keeps_data_center(n, frm, dom) for n in free):
                    raise PlacementError(
                        f"shard {shard}: its copy on node {frm} has nowhere to go in its data center {dc} "
                        f"(a copy stays in its data center, which keeps the data; the others are in "
                        f"{', '.join(sorted({dom(n).dc for n in free}))}): add a storage node in {dc} first")
                raise PlacementError(
                    f"shard {shard}: its copy on node {frm} has nowhere to go without two copies on "
                    f"one machine (it stays on {', '.join(f'{n} ({dom(n).label()})' for n in stay)}; "
                    f"the others run on {', '.join(sorted({dom(n).machine for n in free}))}): "
                    f"add a storage node on another machine first")
            if fits:
                move(shard, min(fits, key=lambda n: (held[n], load[n], n)), frm)
    if not one_machine:  # repair: copies that share a machine, extras to machines without one
        for shard, nodes in enumerate(cur):
            for ids in failure_domains.shared(sorted(nodes), dom).values():
                for frm in ids[1:]:
                    fits = [n for n in targets if ok(shard, n, frm)]
                    if fits and room():
                        move(shard, min(fits, key=lambda n: (held[n], load[n], n)), frm)
    if per_dc:  # copies a data center lacks, added
        for shard, nodes in enumerate(cur):
            for d, group in failure_domains.data_centers(targets, dom).items():
                while d and room() and sum(1 for n in nodes if n in group) < per_dc:
                    fits = [n for n in group if failure_domains.allowed(nodes, n, None, dom, one_machine)]
                    if not fits:
                        raise PlacementError(
                            f"shard {shard}: data center {d} has no machine left for its "
                            f"copy {sum(1 for n in nodes if n in group) + 1} of {per_dc} (copies-per-dc): "
                            f"add a storage node there first")
                    move(shard, min(fits, key=lambda n: (held[n], load[n], n)), None)
    # Within each data center (a copy moves only within its own: the rule's keeps_data_center)
    for group in failure_domains.data_centers(targets, dom).values():
        while room():
            hi = max(group, key=lambda n: (held[n], load[n], -n))
            lo = min(group, key=lambda n: (held[n], load[n], n))
            if held[hi] - held[lo] <= 1:
                break
            gap = load[hi] - load[lo]
            pick = min((s for s, nodes in enumerate(cur) if hi in nodes and ok(s, lo, hi)),
                       key=lambda s: (abs(gap - 2 * size(s)), s), default=None)
            if pick is None:
                break
            move(pick, lo, hi)
    if sizes and targets:
        slack = byte_slack(load.values())
        for _ in range(4 * len(cur) + 16):  # each step narrows the loads' spread; a bound all the same
            step = byte_step(cur, targets, held, load, size, slack, ok) if room() else None
            if step is None:
                break
            for shard, to, frm in step:
                move(shard, to, frm)
    return out if max_moves is None else out[:max_moves]


def byte_step(cur: Sequence[set[int]], targets: Sequence[int], held: Mapping[int, int],
              load: Mapping[int, int], size: Callable[[int], int],
              slack: int, ok: Callable[[int, int, int], bool]) -> list[tuple[int, int, int]] | None:
    """The next byte-evening step of plan_moves: for the pairs of members by widest gap
    first, the move or swap between them that brings their bytes nearest equal, if it
    narrows their gap by more than `slack`; None when no pair has one. `ok(shard, to,
    frm)`: whether the placement rule lets that copy move."""
    order = sorted(targets, key=lambda n: (load[n], n))
    pairs = sorted(((hi, lo) for i, lo in enumerate(order) for hi in order[i + 1:]
                    if load[hi] - load[lo] > slack), key=lambda p: (-(load[p[0]] - load[p[1]]), p))
    for hi, lo in pairs:
        gap = load[hi] - load[lo]

        def gain(d: int) -> int:  # how much a transfer of d bytes from hi to lo narrows the gap
            return gap - abs(gap - 2 * d)
        mine = sorted((size(s), s) for s, nodes in enumerate(cur) if hi in nodes and ok(s, lo, hi))
        theirs = sorted((size(s), s) for s, nodes in enumerate(cur) if lo in nodes and ok(s, hi, lo))
        best: tuple[int, list[tuple[int, int, int]]] | None = None
        if held[hi] > held[lo]:
            for d, s in mine:
                if best is None or gain(d) > best[0]:
                    best = (gain(d), [(s, lo, hi)])
        sizes_theirs = [d for d, _ in theirs]
        for d, s in mine:  # swap s for the shard of theirs nearest d - gap/2 in size
            i = bisect.bisect_left(sizes_theirs, d - gap // 2)
            for j in (i - 1, i):
                if 0 <= j < len(theirs) and (best is None or gain(d - theirs[j][0]) > best[0]):
                    best = (gain(d - theirs[j][0]), [(s, lo, hi), (theirs[j][1], hi, lo)])
        if best is not None and best[0] > slack:
            return best[1]
    return None
