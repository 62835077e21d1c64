"""Which replicas get a writer's entries at once, and which in batches: the rule the
writer's outlets (log/peers.py) follow. Pure: no I/O, no clock (the caller passes ages).

An append is acknowledged once ACK_QUORUM replicas have synced it. With three replicas,
the writer's own among them, a commit waits for one other replica's answer, yet sending
every append to both others costs a call per append at each (the writer's CPU and the
follower's). So a log's entries go at once to the replicas a commit needs, the *eager*
ones: the writer's own replica and the healthiest, idlest, fastest others, ACK_QUORUM
in all.
The rest are *lazy*: what queues for them waits up to LAZY_LINGER_S, so such a follower
takes one call per LAZY_LINGER_S however many appends there were (BookKeeper acknowledges
at its ack quorum in the same way; the write quorum still gets every entry).

Nothing about durability changes: an acknowledged entry is on ACK_QUORUM synced replicas
either way, and the others hold it LAZY_LINGER_S later at most. A replica whose last call
failed, or whose call has been in flight longer than LAZY_LINGER_S (down, paused, slow
disk), is eager only if no healthy replica can take its place; since a lazy replica's
messages wait no longer than LAZY_LINGER_S, a stalled eager follower delays a commit by
that much at most, and the next appends go to the other one at once."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from log import limits

# A replica whose calls take this many times the fastest healthy replica's is passed over
# for a faster one (a slow disk); closer than that, the choice does not move.
SLOW_FACTOR = 2.0


@dataclass(frozen=True, slots=True)
class Health:
    """What the writer's outlet knows of one replica."""
    failed: bool = False  # its last call got no answer
    busy_s: float = 0.0  # how long its call in flight has been running (0: none)
    latency_s: float = 0.0  # its calls' round trips, a moving average (0: none yet)

    def __post_init__(self) -> None:
        assert self.busy_s >= 0.0, "busy_s is an age"
        assert self.latency_s >= 0.0, "latency_s is a duration"

    def stalled(self, linger_s: float) -> bool:
        return self.failed or self.busy_s > linger_s


def eager(me: int, replicas: Sequence[int], ack_quorum: int, health: Mapping[int, Health],
          linger_s: float = limits.LAZY_LINGER_S) -> frozenset[int]:
    """The replicas of a log that get its entries at once, from the writer on server `me`:
    its own replica if it holds one, then the others, `ack_quorum` in all (or every replica
    if there are fewer), taken in this order:
    - not stalled before stalled;
    - idle before busy (a call in flight): under load the followers then carry the appends
      in turn, each commit going out at once to one that is free, as when every replica
      got everything at once;
    - not slow before slow (an average round trip over SLOW_FACTOR times the fastest
      healthy one's);
    - by id, not by averages, so that the choice stays put while the replicas are alike
      (a replica not called yet counts as healthy, idle and fast)."""
    assert ack_quorum >= 1, "a commit needs at least one replica"
    out = [me] if me in replicas else []
    unknown = Health()
    others = [r for r in replicas if r != me]
    known = [health.get(r, unknown) for r in others]
    fastest = min((h.latency_s for h in known if not h.stalled(linger_s) and h.latency_s > 0), default=0.0)

    def rank(r: int) -> tuple[bool, bool, bool, int]:
        h = health.get(r, unknown)
        return h.stalled(linger_s), h.busy_s > 0, fastest > 0 and h.latency_s > SLOW_FACTOR * fastest, r

    others.sort(key=rank)
    out += others[:max(0, ack_quorum - len(out))]
    return frozenset(out)


def moved_average(average_s: float, sample_s: float, weight: float = 0.2) -> float:
    """A round trip folded into a replica's moving average (the first one sets it)."""
    assert 0.0 < weight <= 1.0
    if average_s <= 0.0:
        return sample_s
    return average_s + weight * (sample_s - average_s)
