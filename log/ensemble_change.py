"""When a writer moves its open segment off a copy that stopped answering (an ensemble
change, issue 48; DESIGN.md "An open segment never runs on a dead copy for longer than it
takes to notice"), as pure decisions on the times the shell reports: the servers
(log/driver.py, log/election.py) and the simulator use the same rule.

A writer sends each copy of its open segment its appends and, at least every
LAC_HEARTBEAT_S (log/driver.py), its LAC; a copy answers every message. A copy is **lost**
when a message sent to it has gone unanswered for LOST_S (a killed or paused server, or
one cut off from the writer), or at once when it is known gone (its ZooKeeper
registration ended). The writer then closes the segment at its LAC and opens the next on
live servers (Writer.change_ensemble), if the pool has live servers enough for a whole
ensemble without the lost copies; otherwise it goes on as before, on an ack quorum of the
copies that live.

What it decides is only when: the change itself is safe at any moment (the metadata
write is versioned, the segment closes at what an ack quorum holds). Damping: no change
within SETTLE_S of the segment opening, so a flapping network moves a log's segment at
most about once a second; and a writer that was itself paused (a gap between two checks
longer than PAUSE_S) starts its copies' clocks again instead of blaming them for its own
silence."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

LOST_S = 1.0  # a message unanswered this long (heartbeats go every 0.25 s): the copy is lost
SETTLE_S = 1.0  # a segment younger than this is not changed
PAUSE_S = 0.5  # a gap this long between two checks: the writer itself was paused


@dataclass
class Copies:
    """One writer's view of its open segment's copies."""
    lost_s: float = LOST_S
    settle_s: float = SETTLE_S
    pause_s: float = PAUSE_S
    replicas: tuple[int, ...] = ()
    opened: float = 0.0
    # copy -> when the oldest message to it that is not answered yet was sent
    _waiting: dict[int, float] = field(default_factory=dict)
    _checked: float | None = None

    def open(self, replicas: tuple[int, ...], now: float) -> None:
        """The writer's segment opened (recovered, or changed) on `replicas`."""
        self.replicas, self.opened = tuple(replicas), now
        self._waiting.clear()

    def sent(self, replica: int, now: float) -> None:
        if replica in self.replicas:
            self._waiting.setdefault(replica, now)

    def answered(self, replica: int) -> None:
        self._waiting.pop(replica, None)

    def lost(self, now: float, me: int, gone: frozenset[int] = frozenset()) -> set[int]:
        """The copies (this writer's own aside) to leave out now: silent for LOST_S, or
        `gone` (not registered); none within SETTLE_S of the segment opening."""
        if self._checked is not None and now - self._checked > self.pause_s:
            for r in self._waiting:  # the writer was paused: its copies get time to answer
                self._waiting[r] = now
        self._checked = now
        if now - self.opened < self.settle_s:
            return set()
        return {r for r in self.replicas if r != me
                and (r in gone or now - self._waiting.get(r, now) >= self.lost_s)}


def enabled_from_env(env: Mapping[str, str]) -> bool:
    """MIDTOWN_ENSEMBLE_CHANGE: "on" (the default) or "off" (a writer keeps its segment's
    copies until the next writer change, as before issue 48: `midtown-bench log` measures
    both). ValueError naming the variable for anything else."""
    raw = env.get("MIDTOWN_ENSEMBLE_CHANGE", "on")
    if raw not in ("on", "off"):
        raise ValueError(f"MIDTOWN_ENSEMBLE_CHANGE: {raw!r}; say on or off")
    return raw == "on"
