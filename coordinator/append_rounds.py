"""What a write's appends decide, apart from doing them (issue 69): the coordinator's
append_and_wait (coordinator/node.py) is a thin loop around these functions, which read
nothing and wait on nothing.

A round sends each record not yet decided to its shard's log as the shard -> log map says
(`route`), holding back the records of a shard whose hand-off is under way (docs/log.md,
"Adding logs and handing shards over"). Each log's answer decides its records
(`answered`): placed (a record whose storage nodes answer this coordinator waits for that
answer next; one that does not is told where the log put it, with its shard's stint
there), refused (each record fails alone with the refusal), or refused whole as sealed
(a record in it is of a shard handed over, or the map here is older: nothing of it was
sequenced, and it is sent again where the map, read again, says, under the same request
id). After a round (`next_step`), the records held or sealed go round again after a
backoff, unless the deadline has passed: they fail then, not applied."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum

from grpc import StatusCode as Code

from catalog.log_map import LogMap
from coordinator.appender import Placed, Sealed
from runtime.refusals import Refusal

BACKOFF_FIRST_S = 0.02  # between rounds: doubled each round, up to BACKOFF_MAX_S
BACKOFF_MAX_S = 0.2

Stint = tuple[int, int, int]  # a shard's (generation, version base, time floor) in its log


@dataclass(frozen=True)
class Route:
    """One round: the records (their indexes) sent to each log, with their shards' stints
    there, and those held back (their shard's hand-off is under way)."""
    by_log: dict[int, list[int]]
    stints: dict[int, list[Stint]]
    held: list[int]


def route(m: LogMap, shards: Sequence[int], todo: Sequence[int]) -> Route:
    """Where the records `todo` (indexes into `shards`, each record's shard) go this round,
    by the map `m`."""
    by_log: dict[int, list[int]] = {}
    held: list[int] = []
    for i in todo:
        if m.handing_of(shards[i]) is not None:
            held.append(i)
        else:
            by_log.setdefault(m.log_of(shards[i]), []).append(i)
    return Route(by_log, {lg: [m.stint(shards[i]) for i in idx] for lg, idx in by_log.items()}, held)


@dataclass
class Decided:
    """What one log's answer decided: an outcome for some records (the Placed a record's
    caller is told, or the Refusal that ended it), the records to send again."""
    out: dict[int, Placed | Refusal] = field(default_factory=dict)
    again: list[int] = field(default_factory=list)


def answered(got: list[Placed] | Sealed | Refusal, idx: Sequence[int], waits: Sequence[bool],
             stints: Sequence[Stint], resent: set[int]) -> Decided:
    """What the answer `got` to the append of records `idx` (with their shards' `stints`)
    decides; `waits[i]`: whether record i waits for its storage nodes' answer. `resent`:
    the records refused as sealed before: an attempt of theirs may have landed (the log
    client may have retried one of unknown outcome before the refusal), so only the
    storage nodes know which copy counts."""
    if isinstance(got, Sealed):
        return Decided(again=list(idx))
    if isinstance(got, Refusal):
        return Decided(out=dict.fromkeys(idx, got))
    d = Decided()
    for i, pl, (_, base, floor) in zip(idx, got, stints):
        if not waits[i]:
            d.out[i] = dataclasses.replace(pl, version_base=base, ts_floor=floor,
                                           maybe_earlier_copy=pl.maybe_earlier_copy or i in resent)
    return d


class Step(Enum):
    DONE = "done"  # every record decided: wait for the storage nodes' answers awaited
    AGAIN = "again"  # back off, read the map again, send what is left
    GIVE_UP = "give up"  # the deadline passed with records held: they fail (held_too_long)


def next_step(todo: Sequence[int], left_s: float) -> Step:
    """After a round: what to do with the records `todo` it left, `left_s` before the deadline."""
    if not todo:
        return Step.DONE
    return Step.GIVE_UP if left_s <= 0 else Step.AGAIN


def next_backoff(backoff_s: float) -> float:
    return min(2 * backoff_s, BACKOFF_MAX_S)


def held_too_long(shard: int) -> Refusal:
    """A record whose shard was still being handed over (or its log refused it as sealed)
    when the deadline passed: not applied."""
    return Refusal(Code.UNAVAILABLE, f"shard {shard} is being handed over to another log (it was not "
                   "applied); retry with the same header.request_id")


def no_answer() -> Refusal:
    """A record the log placed whose storage nodes' answer did not come in time."""
    return Refusal(Code.DEADLINE_EXCEEDED, "outcome unknown: no storage node answered in time; retry with "
                   "the same header.request_id")
