"""Spare replicas: the copies a commit does not wait for travel together.

A writer acknowledges an entry once `ack_quorum` replicas hold it durably: its own copy and
those of the fastest followers, the *eager* ones. Every replica of the segment still gets
the entry (a later quorum must hold it, and an eager follower may fail), but the copies
beyond the quorum, the *spare* ones, need not go at once: a spare follower's outlet lets
entries wait, up to the spare linger, and sends them in one message, one synced write and
one reply. Sending each entry to every follower at once cost the same again per spare copy
in processes that share the machine's cores with the operation's path
(docs/performance.md@71edb5a, "Spare replicas linger").

As BookKeeper separates its write quorum from its ack quorum, this keeps the two apart in
time: an entry is durable on the ack quorum when acknowledged, exactly as before, and on
every replica within the linger.

Which followers are eager: the `need` of them that answer fastest, ranked by a smoothed
round trip of their replies, and a follower with a call unanswered ranked by at least how
long that call has waited. The eager ones keep their place until another is STICKINESS
times faster: followers alike would otherwise swap at every message, and both receive
half the entries at once. A follower that slows down or pauses falls behind the spare
within a few of its round trips, so the spare becomes eager for the next entries (and an
eager entry queued behind lingering ones sends them all); what an eager follower's stall
can cost an entry already lingering is the linger. A follower that failed a call ranks as
if it had taken FAILED_RANK_S, then recovers as its answers come back.

An entry goes at once, whatever the linger, when anything eager waits with it in the
follower's outlet, or LINGER_ENTRIES_MAX entries wait there (log/linger.py `linger_left`,
shared with the lingering Read streams). The outlets are log/peers.py's; this module only
decides."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from log import limits
from runtime.env import seconds as env_seconds

SPARE_LINGER_S = 0.02  # how long a spare copy may wait to travel with others
# The most MIDTOWN_SPARE_LINGER_S may ask: half the writer's resend interval, so that a
# lingering copy is never taken for a lost one and sent again.
SPARE_LINGER_MAX_S = limits.RESEND_INTERVAL_MS / 2000
SMOOTHING = 0.2  # weight of a new round trip in the smoothed one
FAILED_RANK_S = 1.0  # a failed call counts as a round trip this long
STICKINESS = 2.0  # how many times faster a spare must be to take an eager one's place


def smoothed(prev: float | None, sample_s: float) -> float:
    """The smoothed round trip after one more sample (the first sample stands alone)."""
    return sample_s if prev is None else prev + SMOOTHING * (sample_s - prev)


def rank(answer_s: float | None, waiting_since: float | None, now: float) -> float:
    """How slow a follower looks now: its smoothed round trip (0 before any answer: it is
    tried first), or how long its unanswered call has waited, whichever is longer."""
    r = answer_s or 0.0
    if waiting_since is not None:
        r = max(r, now - waiting_since)
    return r


def eager(followers: Iterable[int], need: int, answer_s: Mapping[int, float],
          waiting_since: Mapping[int, float | None], now: float,
          current: frozenset[int] = frozenset()) -> frozenset[int]:
    """The `need` followers an entry goes to at once: the fastest by `rank`, the `current`
    eager ones counted STICKINESS times faster than they are (ties to the lower id)."""
    def key(f: int) -> tuple[float, int]:
        r = rank(answer_s.get(f), waiting_since.get(f), now)
        return (r / STICKINESS if f in current else r, f)
    return frozenset(sorted(followers, key=key)[:max(0, need)])


def followers_needed(replicas: Iterable[int], me: int, ack_quorum: int) -> int:
    """How many followers a commit waits for: the ack quorum, less the writer's own copy
    when it is one of the replicas."""
    return ack_quorum - (1 if me in replicas else 0)


def linger_s_from_env(env: Mapping[str, str]) -> float:
    """MIDTOWN_SPARE_LINGER_S (seconds; 0 sends every copy at once), else the default.
    ValueError naming the variable if it is not a number from 0 to SPARE_LINGER_MAX_S."""
    return env_seconds(env, "MIDTOWN_SPARE_LINGER_S", SPARE_LINGER_S, SPARE_LINGER_MAX_S)
