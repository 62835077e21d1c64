"""Where copies may go: the placement rule, one pure module used wherever copies of a
shard (its replica set) or of a log segment (its ensemble) are placed: at creation,
moves, `cluster rebalance`, `node decommission`, ensemble changes and re-replication.

Every log server and storage node registers the machine it runs on (default: the host's
name) and an optional locality, tiers from the widest down (`zone=a,rack=r1`, as
CockroachDB's `--locality`). The rule:

1. Never two copies on one machine (a machine's loss, or its power, takes every process
   on it: two copies there and an ack quorum of two is lost with it).
2. Among the choices that keep (1), spread over as many distinct localities as there
   are, widest tier first: with three zones or more, three copies land in three zones;
   within a zone, on distinct racks where there are. Cassandra's NetworkTopologyStrategy,
   BookKeeper's rack-aware placement and CockroachDB's diversity score do the same.
3. Among equally spread choices, the caller's order of preference (load, then id).
4. With data centers named, the first placement deals the copies to them in turn (each
   holds as many as another, give or take one), and a copy that moves stays in its data
   center (`keeps_data_center`): no rebalance, decommission or operator's move leaves a
   data center with fewer copies of a shard (where a data center has fewer machines than
   its share, the others hold the rest: rule 1 first).

The widest tier may be `dc`, the data center (`dc=east,zone=a,rack=r1`; docs/architecture.md,
"Data centers"): either every member names one or none does (`mixed_data_centers`).

Where (1) cannot hold (fewer machines than copies), the placement is refused naming what
is missing, unless the cluster says it runs on one machine (`cluster up`: a local
cluster; its copies then share the machine and it says so once). A member with no
machine recorded (a cluster made before machines were) counts as a machine of its own."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

MACHINE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")
TIER_RE = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
VALUE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
MAX_TIERS = 8
DC = "dc"  # the data-center tier: the widest, first when given


class PlacementError(ValueError):
    """Copies cannot be placed by the rule: the message names what is missing."""


@dataclass(frozen=True, slots=True)
class Domain:
    machine: str
    locality: tuple[tuple[str, str], ...] = ()

    def label(self) -> str:
        """`machine` or `machine (zone=a,rack=r1)`."""
        return f"{self.machine} ({locality_text(self.locality)})" if self.locality else self.machine

    @property
    def dc(self) -> str:
        """Its data center ("" when its locality names none)."""
        return next((v for k, v in self.locality if k == DC), "")

    def to_json(self) -> dict[str, str]:
        return {"machine": self.machine, "locality": locality_text(self.locality)}

    @staticmethod
    def from_json(d: Mapping[str, str]) -> Domain:
        return Domain(check_machine(str(d["machine"])), parse_locality(str(d.get("locality", ""))))


def unknown(member_id: int) -> Domain:
    """The domain of a member with no machine recorded: a machine of its own (a name no
    registration can take: '?' is not allowed in one)."""
    return Domain(f"?{member_id}")


def check_machine(name: str) -> str:
    """`name` if it is a valid machine name, else ValueError naming the field."""
    if not MACHINE_RE.match(name):
        raise ValueError(f"machine: {name!r} is not a machine name (letters, digits, '.', '_', '-'; "
                         f"at most 253, starting with a letter or digit)")
    return name


def parse_locality(text: str) -> tuple[tuple[str, str], ...]:
    """`zone=a,rack=r1` -> (("zone", "a"), ("rack", "r1")), tiers from the widest down;
    "" -> (). ValueError naming the field and the part that is wrong."""
    if not text.strip():
        return ()
    out: list[tuple[str, str]] = []
    parts = text.split(",")
    if len(parts) > MAX_TIERS:
        raise ValueError(f"locality: {len(parts)} tiers in {text!r}, at most {MAX_TIERS}")
    for part in parts:
        key, eq, value = part.strip().partition("=")
        if not eq:
            raise ValueError(f"locality: {part.strip()!r} in {text!r} is not tier=value "
                             f"(as zone=us-east-1a,rack=r12)")
        if not TIER_RE.match(key):
            raise ValueError(f"locality: tier {key!r} in {text!r}: lower-case letters, digits, '_' "
                             f"and '-', starting with a letter")
        if not VALUE_RE.match(value):
            raise ValueError(f"locality: value {value!r} of {key} in {text!r}: letters, digits, '.', "
                             f"'_' and '-', starting with a letter or digit")
        if any(k == key for k, _ in out):
            raise ValueError(f"locality: tier {key!r} twice in {text!r}")
        if key == DC and out:
            raise ValueError(f"locality: the data-center tier {DC} comes first, the widest, in {text!r} "
                             f"(as {DC}={value},{locality_text(out)})")
        out.append((key, value))
    return tuple(out)


def locality_text(locality: Iterable[tuple[str, str]]) -> str:
    return ",".join(f"{k}={v}" for k, v in locality)


def closeness(a: Domain, b: Domain) -> int:
    """How much two domains share: the number of leading locality tiers with equal values
    (0: different zones), and one more than the tiers when they are the same machine."""
    if a.machine == b.machine:
        return 1 + max(len(a.locality), len(b.locality))
    n = 0
    for x, y in zip(a.locality, b.locality):
        if x != y:
            break
        n += 1
    return n


Domains = Callable[[int], Domain]


def lookup(known: Mapping[int, Domain]) -> Domains:
    """The domain of each member from those `known`, unknown ones each a machine of its own."""
    return lambda m: known.get(m) or unknown(m)


def pick(count: int, preferred: Sequence[int], domain_of: Domains, fixed: Sequence[int] = (),
         one_machine: bool = False, what: str = "copies") -> tuple[int, ...]:
    """`count` members: `fixed` first (already chosen: a writer's own server, the copies
    that stay), then from `preferred` (best first) one at a time, each the candidate least
    close to those chosen (closeness), ties in `preferred`'s order. A candidate on a
    machine that holds one already is taken only with `one_machine`; without it, too few
    machines raise PlacementError naming them."""
    chosen = list(fixed)
    rest = [m for m in dict.fromkeys(preferred) if m not in chosen]
    while len(chosen) < count:
        taken = [domain_of(c) for c in chosen]

        def key(i_m: tuple[int, int]) -> tuple[int, int, int]:
            # Data centers dealt in turn first (each holds as many copies as another, give or
            # take one), then the least close, then the caller's order
            d = domain_of(i_m[1])
            return (sum(1 for t in taken if t.dc == d.dc) if d.dc else 0,
                    max((closeness(d, t) for t in taken), default=0), i_m[0])
        ok = [(i, m) for i, m in enumerate(rest)
              if one_machine or all(domain_of(m).machine != t.machine for t in taken)]
        if not ok:
            raise PlacementError(missing(count, [*chosen, *rest], domain_of, what))
        _, best = min(ok, key=key)
        chosen.append(best)
        rest.remove(best)
    return tuple(chosen)


def missing(count: int, candidates: Iterable[int], domain_of: Domains, what: str) -> str:
    """What is missing for `count` copies on distinct machines, naming the machines there are."""
    by_machine = machines(candidates, domain_of)
    there = "; ".join(f"{m}: {', '.join(map(str, ids))}" for m, ids in sorted(by_machine.items()))
    return (f"{count} {what} need {count} distinct machines; the candidates run on "
            f"{len(by_machine)} ({there or 'none'}): add {count - len(by_machine)} more machine(s), "
            f"or run with fewer copies")


def machines(members: Iterable[int], domain_of: Domains) -> dict[str, list[int]]:
    """Machine -> the members on it, in order."""
    out: dict[str, list[int]] = {}
    for m in members:
        out.setdefault(domain_of(m).machine, []).append(m)
    return out


def data_centers(members: Iterable[int], domain_of: Domains) -> dict[str, list[int]]:
    """Data center -> the members in it, in order ("" for those naming none)."""
    out: dict[str, list[int]] = {}
    for m in members:
        out.setdefault(domain_of(m).dc, []).append(m)
    return out


def spans(members: Iterable[int], domain_of: Domains) -> int:
    """How many data centers the members stand in (those naming none not counted)."""
    return len({domain_of(m).dc for m in members} - {""})


def mixed_data_centers(members: Iterable[int], domain_of: Domains, what: str = "members") -> str | None:
    """What is wrong when some members name a data center and others none (None: all do,
    or none): placement cannot say where the unnamed ones are."""
    by_dc = data_centers(members, domain_of)
    unnamed = by_dc.pop("", [])
    if not by_dc or not unnamed:
        return None
    return (f"{what} {', '.join(map(str, unnamed))} name no data center while others do "
            f"({', '.join(sorted(by_dc))}): give every one a {DC}= tier in its --locality")


def shared(copies: Iterable[int], domain_of: Domains) -> dict[str, list[int]]:
    """The machines that hold more than one of `copies`, with them (empty: the rule holds)."""
    return {m: ids for m, ids in machines(copies, domain_of).items() if len(ids) > 1}


def allowed(copies: Iterable[int], to: int, leaving: int | None, domain_of: Domains,
            one_machine: bool = False) -> bool:
    """Whether a copy may move to `to` from `leaving` (None: a copy added) by rule 1 (`to`'s
    machine holds none of the copies that stay) and rule 4 (keeps_data_center)."""
    stay = [c for c in copies if c != leaving]
    if to in stay or not keeps_data_center(to, leaving, domain_of):
        return False
    return one_machine or all(domain_of(c).machine != domain_of(to).machine for c in stay)


def keeps_data_center(to: int, leaving: int | None, domain_of: Domains) -> bool:
    """Rule 4: a copy that moves stays in its data center (where both name one), so every
    data center holds as many copies of a shard after a move (a rebalance, a decommission,
    an operator's `shard move`) as before: each keeps the data, and a scope failed over to it
    finds it there (docs/architecture.md, "Data centers")."""
    if leaving is None:
        return True
    here, there = domain_of(leaving).dc, domain_of(to).dc
    return not (here and there and here != there)
