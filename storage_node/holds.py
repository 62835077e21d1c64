"""A fail-over's hold on a storage node (drivers/failover.py; docs/architecture.md, "A data
center lost"). The fail-over cuts each of a scope's logs where its sources said they stand;
a source must still stand there when the cut is written. So a Status request that names a
hold (registry.hold_replicas: an ephemeral ZooKeeper node of the driver's) makes the node
apply none of the held logs past where its answer says, until that ZooKeeper node is gone:
then the fail-over was written (its record names the hold: the node goes on from the cut in
the new home's log, or, condemned, stops to take a copy) or given up (it goes on). Cut off
from ZooKeeper it waits, since the fail-over may have been written meanwhile; a node that
starts while a hold stands holds too, since it may have answered before it stopped.

Without it (the whole-cluster simulation's seed 11 with a fail-over): a source cut off from
ZooKeeper a moment went on applying the old writer's committed entries past the cut from a
Read stream opened before the fail-over, then tailed the new log past them."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

from catalog import failover, registry
from catalog.registry import KvTopology
from runtime import faults, world
from runtime.refusals import BadRequest
from storage_node.state import NodeState

log = logging.getLogger("midtown.storage.holds")

# How often a node holding a log asks ZooKeeper whether the hold still stands.
RECHECK_S = 0.25


def check(hold: str, logs: Iterable[int], kv_logs: int) -> None:
    """A Status request's hold (NodeStatusRequest.hold, hold_logs): BadRequest naming the
    field unless it is a fail-over's and names logs of this cluster."""
    if not registry.is_hold(hold):
        raise BadRequest(f"hold: {hold[:80]!r} is not a fail-over's hold ({registry.HOLDS}/hold-N)")
    for lg in logs:
        if not 0 <= lg < kv_logs:
            raise BadRequest(f"hold_logs: log {lg}, this cluster has {kv_logs} key-value logs")


class Holds:
    def __init__(self, state: NodeState, mutex: threading.Lock) -> None:
        """`mutex`: the apply loop's (storage_node/apply_loop.py): a hold taken with it
        stops the next batch of the held logs, so positions read after are where they stay."""
        self.state = state
        self._mutex = mutex
        self._held: dict[int, str] = {}  # log -> the hold's ZooKeeper node
        self._watching = False  # a task lets the holds go as their nodes go (_watch)
        # told the key-value topology that records a fail-over written, before its logs go
        # on (so the entries past its cuts are known: apply_loop.py); storage_node/node.py
        # sets it to the bookkeeping's learn_kv
        self.written: Callable[[KvTopology], None] = lambda kv: None

    def hold(self, logs: Iterable[int], hold: str) -> None:
        """Apply none of `logs` past where they stand now, until `hold` is gone."""
        with self._mutex:
            for lg in logs:
                if self._held.get(lg) != hold:
                    self._held[lg] = hold
                    log.info("log %d: held at %d by a fail-over (%s)", lg, self.state.positions[lg][0], hold)
            start = bool(self._held) and not self._watching
            self._watching = self._watching or start
        if start:
            world.spawn("holds", self._watch)

    def held(self, log_id: int) -> bool:
        return log_id in self._held

    def at_start(self) -> None:
        """The holds standing as the node starts: it may have answered one before it stopped."""
        for hold, logs in registry.holds(self.state.zk).items():
            self.hold(logs, hold)

    def _watch(self) -> None:
        """Every RECHECK_S while a log is held: let go those whose hold is gone (a task of its
        own only then: a node no fail-over holds does nothing for them)."""
        episode = faults.Episode(log, "the fail-overs' holds")
        while not self.state.stop.wait(RECHECK_S):
            try:
                self.round()
                episode.succeeded()
            except Exception as e:  # ZooKeeper does not answer now: held until it does
                episode.failed(e, f"reading them again in {RECHECK_S} s")
            with self._mutex:
                if not self._held:
                    self._watching = False
                    return

    def round(self) -> None:
        """Let go the holds whose ZooKeeper node is gone, telling `written` first of the
        fail-over that took each away, if one did (else it was given up)."""
        for hold in sorted(set(self._held.values())):
            if registry.hold_stands(self.state.zk, hold):
                continue
            kv = registry.read_kv(self.state.zk)
            done = kv is not None and failover.written(kv.failovers, hold)
            if done and kv is not None:
                self.written(kv)
            with self._mutex:
                logs = sorted(lg for lg, h in self._held.items() if h == hold)
                for lg in logs:
                    del self._held[lg]
            log.info("logs %s: the fail-over that held them was %s: they go on", logs,
                     "written" if done else "given up")
