"""When a follower takes a log over from a writer it has lost (issue 33), as pure decisions
on the times the shell reports: the servers run it in log/election.py (in the simulation
too: tests/sim/writers.py, with followers cut off from running writers by its bridges).

A follower of a log's open segment hears from its writer all the time: appends, and a LAC
heartbeat at least every LAC_HEARTBEAT_S (log/driver.py). It **suspects** the writer when
it has heard nothing for QUIET_S (a paused or cut-off writer), or at once when the
writer's replication stream to it ended (a killed process's sockets close at once). A
suspected writer is **probed**: a call with a short timeout. PROBES failures in a row, and
the follower takes the log over: it claims it as any server claims a vacant log (the next
epoch by a versioned write, then fencing of the last segment's replicas), without waiting
for ZooKeeper to expire the old writer's session. Any answer, or any message heard, clears
the suspicion.

Safety does not depend on any of this: epochs are issued by versioned writes and fenced
replicas refuse lower ones, so two eager claimants cost at most an extra epoch, and a
writer that was only slow finds its appends refused (never acknowledged) once a quorum of
its replicas is fenced. What this decides is only when, and it keeps a flapping network
from moving the log every second: no takeover of a writer that has held the log for less
than SETTLE_S (as this follower saw it), and a failed probe must be repeated."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

QUIET_S = 0.5  # heard nothing for this long (the heartbeat is every 0.25 s): suspect
PROBE_TIMEOUT_S = 0.25
PROBES = 2  # failed probes in a row before a takeover
PROBE_GAP_S = 0.1  # between probes
SETTLE_S = 5.0  # a writer newer than this (as seen here) is not taken over


# What a server does about a log's writer as it sees it (view()).
FORGET, WAIT, WATCH = "forget", "wait", "watch"


def view(replicas: Collection[int] | None, seg_epoch: int, writer: Mapping[str, Any] | None, me: int,
         leaving: bool) -> str:
    """FORGET: this server follows no writer of the log now (no open segment of which it is
    a replica, no writer, the writer is itself, or it is leaving the pool); WAIT: the
    writer recovers, or moves its segment (an ensemble change: the next epoch, the same
    writer), so nothing is probed but what was seen of it stays; WATCH: suspect and probe
    it (Takeover). `replicas`: the open segment's (None: the last one is sealed, or none);
    `writer`: the writer node. Forgetting a writer at each ensemble change started its
    SETTLE_S again, and one whose segment had moved in the last 5 s was not taken over
    until its session expired (6.5 s in a quiet-machine round, issue 68)."""
    if replicas is None or me not in replicas or writer is None or writer.get("server") == me or leaving:
        return FORGET
    if writer.get("state") != "writing" or writer.get("epoch") != seg_epoch:
        return WAIT
    return WATCH


@dataclass
class _Log:
    writer: int = -1
    since: float = 0.0  # when this follower first saw `writer` writing the log
    heard: float = 0.0
    lost: bool = False  # the writer's stream to this follower ended
    failures: int = 0
    next_probe: float = 0.0


@dataclass
class Takeover:
    quiet_s: float = QUIET_S
    probes: int = PROBES
    probe_gap_s: float = PROBE_GAP_S
    settle_s: float = SETTLE_S
    _logs: dict[int, _Log] = field(default_factory=dict)

    def writing(self, log_id: int, writer: int, now: float) -> None:
        """The log's writer as this follower sees it now (from the writer node): a new one
        starts with a clean slate."""
        st = self._logs.get(log_id)
        if st is None or st.writer != writer:
            self._logs[log_id] = _Log(writer=writer, since=now, heard=now)

    def heard(self, log_id: int, now: float) -> None:
        """A message of the log's writer arrived."""
        st = self._logs.get(log_id)
        if st is not None:
            st.heard, st.lost, st.failures = max(st.heard, now), False, 0

    def lost(self, log_id: int) -> None:
        """The writer's replication stream to this follower ended."""
        st = self._logs.get(log_id)
        if st is not None:
            st.lost = True

    def probe_due(self, log_id: int, now: float) -> bool:
        """Whether to probe the writer now: it is suspected, it has held the log for
        SETTLE_S, and the last probe was PROBE_GAP_S ago or more."""
        st = self._logs.get(log_id)
        if st is None or now - st.since < self.settle_s or now < st.next_probe:
            return False
        return st.lost or now - st.heard >= self.quiet_s

    def next_due(self) -> float | None:
        """The soonest time a probe of any log's writer may be due (probe_due), if nothing
        is heard meanwhile; None: no writer followed. The election's loop wakes then, so a
        quiet writer is probed QUIET_S after it was last heard and probed again
        PROBE_GAP_S after a failure, not at its next poll (up to 0.25 s later each)."""
        due = [max(st.since + self.settle_s, st.next_probe, st.heard + (0.0 if st.lost else self.quiet_s))
               for st in self._logs.values()]
        return min(due) if due else None

    def probed(self, log_id: int, answered: bool, now: float) -> bool:
        """A probe's outcome; True: take the log over now."""
        st = self._logs.get(log_id)
        if st is None:
            return False
        if answered:
            st.failures, st.lost, st.heard = 0, False, max(st.heard, now)
            return False
        st.failures += 1
        st.next_probe = now + self.probe_gap_s
        return self.condemned(log_id)

    def condemned(self, log_id: int) -> bool:
        """The writer failed PROBES probes in a row and nothing was heard from it since:
        take the log over as soon as the shell can (its ZooKeeper session answers)."""
        st = self._logs.get(log_id)
        return st is not None and st.failures >= self.probes

    def forget(self, log_id: int) -> None:
        """This server is no longer a follower of the log (or took it over)."""
        self._logs.pop(log_id, None)
