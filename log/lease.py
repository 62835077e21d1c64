"""The writer's read lease: a strong read answered by the log's writer alone, with no round
to its followers, for as long as no other writer can have acknowledged anything.

Pure: the writer core (log/writer.py), the replica core (log/replica.py) and the simulator
use it; the shells give it a clock (runtime/clock.py). The argument, in full in
docs/log.md ("Read lease"):

* Clocks. Every clock here is a local monotonic clock that keeps counting through a
  suspend (Linux CLOCK_BOOTTIME), and its rate differs from real time by at most DRIFT_MAX.
  Nothing compares two machines' readings; only durations cross between machines.
* The holder (the writer). An AddEntries message carries `lease_ms` and, kept by the
  writer only, `sent_at`: its clock read before it was sent. Once an ack quorum of the
  open segment's replicas has acknowledged messages sent at or after `t`, the lease holds
  until `t + lease` on the writer's clock: up to then, the writer's LAC covers every entry
  any writer has acknowledged (Holder).
* The promise (each replica). A replica that acknowledges such a message remembers until
  when, on its own clock, a writer that fences it must wait: `guard(lease)` after the
  acknowledgement. A fence reply carries what is left of it, and a replica that restarted
  (and forgot) counts from its start (Promise).
* The wait (a new writer). A writer that fenced a quorum of the segment's replicas makes
  nothing visible, neither acknowledging nor sealing, until every promise a fence reply
  carried has run out on its own clock, counted from that reply. A fence quorum and the
  lease's ack quorum share a replica, so it waits out the old writer's lease.

Why guard(lease) = lease * (1 + DRIFT_MAX) / (1 - DRIFT_MAX): the old lease ends at most
lease / (1 - DRIFT_MAX) of real time after the message was sent; the replica acknowledged
after that; e, read on the replica's clock since, is at least e / (1 + DRIFT_MAX) of real
time; and the new writer's own wait W, read on its clock, lasts at least W / (1 + DRIFT_MAX).
W = guard(lease) - e covers the rest."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from runtime.env import seconds as env_seconds

# The largest rate difference between a clock here and real time: 1%. Quartz oscillators
# drift by tens of parts per million and NTP slews a clock by at most 500 ppm (0.05%), so
# this is 20 times the worst a clock that keeps time at all can do (docs/log.md).
DRIFT_MAX = 0.01

# A lease, unless the server is told otherwise (MIDTOWN_READ_LEASE_S; 0 turns leases off).
LEASE_S_DEFAULT = 0.5
LEASE_S_MAX = 2.0

# A writer renews its lease only while strong reads use it: for this long after the last
# one. A log nobody reads strongly holds no lease, and a writer that takes it over has
# nothing to wait out.
WANTED_S = 2.0


def guard(lease_s: float) -> float:
    """How long, on a replica's clock, a promise made for a lease of `lease_s` lasts."""
    return lease_s * (1 + DRIFT_MAX) / (1 - DRIFT_MAX)


def renew_every(lease_s: float) -> float:
    """How often an idle writer that is asked for its lease renews it (a message to each
    replica): four times a lease, so that one late answer does not let it lapse."""
    return lease_s / 4


@dataclass
class Holder:
    """The writer's side: the lease its replicas' acknowledgements have given it.

    `expiry` (on the writer's clock) is read by other threads without a lock: it is one
    float, replaced whole, and never raised by anything but an acknowledgement."""
    lease_s: float
    ack_quorum: int
    replicas: tuple[int, ...] = ()
    expiry: float = -math.inf
    _acked: dict[int, float] = field(default_factory=dict)

    def open(self, replicas: tuple[int, ...]) -> None:
        """The writer appends to a segment on `replicas`: only their acknowledgements count."""
        self.expiry = -math.inf
        self.replicas, self._acked = tuple(replicas), {}

    def drop(self) -> None:
        """No lease from now (the writer stopped, or it is moving its segment)."""
        self.open(())

    def acked(self, replica: int, sent_at: float) -> None:
        """`replica` acknowledged a lease message the writer sent at `sent_at` (its clock)."""
        if replica not in self.replicas or sent_at <= self._acked.get(replica, -math.inf):
            return
        self._acked[replica] = sent_at
        if len(self._acked) >= self.ack_quorum:
            basis = sorted(self._acked.values(), reverse=True)[self.ack_quorum - 1]
            self.expiry = max(self.expiry, basis + self.lease_s)

    def valid(self, now: float) -> bool:
        return now < self.expiry


class Promise:
    """A replica's side, for every log it holds: until when (its clock) a writer that
    fences it must make nothing visible. A replica that starts knows nothing of what it
    acknowledged before: it promises `guard(lease_s)` from its start for every log."""

    def __init__(self, started_at: float, lease_s: float) -> None:
        self._floor = started_at + guard(lease_s) if lease_s > 0 else -math.inf
        self._until: dict[int, float] = {}

    def acked(self, log_id: int, now: float, lease_ms: int) -> None:
        """Called before the acknowledgement of a message carrying `lease_ms` leaves."""
        if lease_ms > 0:
            until = now + guard(lease_ms / 1000)
            if until > self._until.get(log_id, -math.inf):
                self._until[log_id] = until

    def wait_ms(self, log_id: int, now: float) -> int:
        """What is left of the promise, whole milliseconds rounded up (0: none)."""
        left = max(self._until.get(log_id, -math.inf), self._floor) - now
        return math.ceil(left * 1000) if left > 0 else 0


def lease_s_from_env(env: Mapping[str, str]) -> float:
    """MIDTOWN_READ_LEASE_S (seconds; 0 turns read leases off), else LEASE_S_DEFAULT.
    ValueError naming the variable if it is not a number from 0 to LEASE_S_MAX."""
    return env_seconds(env, "MIDTOWN_READ_LEASE_S", LEASE_S_DEFAULT, LEASE_S_MAX)
