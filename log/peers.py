"""The other replicas of this server's logs, as its writers reach them: Fence and ReadRange
calls whose replies go back into the writer's inbox, and one Outlet per replica that
batches the AddEntries of every log into one message (this server's own replica
included). Each goes through a link of the replication's network port
(log/replica_link.py: this server's own replica in process, a peer's by gRPC, or the
simulator's network). A spare follower's outlet lets entries linger to travel together
(log/spares.py decides which followers are spare). A lost message is resent by the
writer's tick. log/node.py builds one."""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from log import limits, linger, spares
from log.driver import WriterDriver
from log.messages import AddEntries
from log.replica_link import ReplicaLink
from runtime import faults, world

log = logging.getLogger("midtown.log.peers")
OUTLET_CALLS_IN_FLIGHT = 1  # 4 measured slower here: smaller batches, more calls


class Peers:
    def __init__(self, server_id: int, own: ReplicaLink, peer: Callable[[int], ReplicaLink | None],
                 stop: threading.Event, spare_linger_s: float = spares.SPARE_LINGER_S) -> None:
        """`own`: this server's own replica; `peer(server_id)`: the link to another's (None:
        unknown); `spare_linger_s`: how long a spare follower's copies may wait (0: none waits)."""
        self.server_id = server_id
        self.own = own
        self.peer = peer
        self.stop = stop
        self._lock = world.lock()
        self._outlets: dict[int, Outlet] = {}
        self.spare_linger_s = spare_linger_s
        self._answer_s: dict[int, float] = {}  # smoothed round trip of each peer's replies
        self._eager_now: dict[tuple[int, ...], frozenset[int]] = {}  # by a segment's followers

    def link(self, server_id: int) -> ReplicaLink | None:
        return self.own if server_id == self.server_id else self.peer(server_id)

    def send(self, driver: WriterDriver, to: int, msg: Any) -> None:
        """Deliver a writer's message to a replica (ourselves included); the reply goes
        back into the writer's inbox. A lost message is resent by the writer's tick.
        AddEntries travel through the destination's outlet, batched with other logs'."""
        if isinstance(msg, AddEntries):
            outlet = self._outlets.get(to)
            if outlet is None:
                with self._lock:
                    outlet = self._outlets.get(to)
                    if outlet is None:
                        outlet = self._outlets[to] = Outlet(self, to)
            outlet.put(driver, msg, self._eager(driver, to))
            return
        link = self.link(to)
        if link is not None:
            link.ask(msg, lambda rep: driver.reply(to, msg, rep))

    def _eager(self, driver: WriterDriver, to: int) -> bool:
        """Whether `to` must have the writer's entries at once: this server's own copy, an
        eager follower (log/spares.py), anything while spares do not linger."""
        if to == self.server_id or not self.spare_linger_s:
            return True
        replicas = driver.core.replicas
        if to not in replicas:
            return True  # a recovering segment's replica
        followers = tuple(r for r in replicas if r != self.server_id)
        need = spares.followers_needed(replicas, self.server_id, driver.core.ack_quorum)
        now = world.monotonic()
        with self._lock:
            since = {f: o.waiting_since for f in followers if (o := self._outlets.get(f)) is not None}
            eager = self._eager_now[followers] = spares.eager(
                followers, need, self._answer_s, since, now, self._eager_now.get(followers, frozenset()))
        return to in eager

    def answered(self, to: int, took_s: float | None) -> None:
        """A peer's call came back after `took_s` (None: it failed)."""
        with self._lock:
            prev = self._answer_s.get(to)
            self._answer_s[to] = (max(prev or 0.0, spares.FAILED_RANK_S) if took_s is None
                                  else spares.smoothed(prev, took_s))


class Outlet:
    """Messages to one replica: whatever queues while a call is in flight goes in the next
    call, so one RPC and one synced write carry many appends of many logs. While only spare
    copies wait (log/spares.py), they wait up to the peers' spare linger for more."""

    def __init__(self, peers: Peers, to: int) -> None:
        self.peers = peers
        self.to = to
        # (writer, message, eager, when queued)
        self._q: deque[tuple[WriterDriver, AddEntries, bool, float]] = deque()
        self._eager = 0  # eager messages queued
        self._entries = 0  # entries queued
        self._cv = world.condition()
        self.waiting_since: float | None = None  # when the call in flight was sent
        # Calls in flight per replica (the writer copes with replies in any order).
        for i in range(OUTLET_CALLS_IN_FLIGHT):
            world.spawn(f"outlet-{to}-{i}", self._run)

    def put(self, driver: WriterDriver, msg: AddEntries, eager: bool = True) -> None:
        with self._cv:
            first = not self._q
            self._q.append((driver, msg, eager, world.monotonic()))
            self._eager += eager
            self._entries += len(msg.entries)
            # Wake the thread for its first message, or to end a linger (not per spare copy).
            if first or eager or self._entries >= linger.LINGER_ENTRIES_MAX:
                self._cv.notify()

    def _take(self) -> list[tuple[WriterDriver, AddEntries]]:
        with self._cv:
            while not self._q:
                self._cv.wait(1.0)
                if self.peers.stop.is_set():
                    return []
            while not self.peers.stop.is_set():
                left = linger.linger_left(world.monotonic(), self._q[0][3], self.peers.spare_linger_s,
                                          self._entries, self._eager > 0)
                if left <= 0:
                    break
                self._cv.wait(left)
            items: list[tuple[WriterDriver, AddEntries]] = []
            n = 0
            while self._q and (not items or n + len(self._q[0][1].entries) <= limits.MESSAGE_ENTRIES_MAX * 4):
                driver, msg, eager, _ = self._q.popleft()
                n += len(msg.entries)
                self._eager -= eager
                self._entries -= len(msg.entries)
                items.append((driver, msg))
            return items

    def _run(self) -> None:
        while not self.peers.stop.is_set():
            items = self._take()
            if not items:
                continue
            msgs = [m for _, m in items]
            sent = self.waiting_since = world.monotonic()
            if world.buggify("peers.slow_call"):  # a peer slow to answer (a pause, a slow disk)
                world.sleep(0.3)
            try:
                link = self.peers.link(self.to)
                replies = None if link is None else link.replicate(msgs)
            except Exception as e:
                faults.log_failure(log, f"replicating to {self.to}", e)
                replies = None
            self.waiting_since = None
            if self.to != self.peers.server_id:
                self.peers.answered(self.to, None if replies is None else world.monotonic() - sent)
            if replies is None:
                continue  # lost: the writers resend on their tick
            for (driver, msg), rep in zip(items, replies):
                driver.reply(self.to, msg, rep)
