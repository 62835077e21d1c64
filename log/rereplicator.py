"""The log servers' re-replication of sealed segments that lost a replica (the shell of
log/rereplicate.py, whose rule the simulator checks): the writer of each log, every few
seconds, looks at the log's sealed segments; one with a replica that is not a live server
of the pool, or that is leaving it (decommissioned), gets a live one in its place, chosen
by log/rereplicate.py plan, once that server holds every committed entry of the segment
above the truncation point: what it lacks is copied to it from the segment's live
replicas first (AddEntries in the writer's epoch), and it is checked again (ReadRange)
before the versioned metadata write names it. A writer changes the metadata only once
otherwise (its seal, at its start), and this runs only once that
is done, so the two never race; a lost race with a new writer's epoch bump just fails the
versioned write, and the new writer takes the repair up."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from fleet import machines
from log import homes, limits, rereplicate
from log import zk as zkpaths
from log.entry import Entry
from log.messages import AddEntries, ReadRange
from log.metadata import LogMetadata, Segment
from log.replica_link import NoAnswer, Refused, ReplicaLink
from log.writer import State

log = logging.getLogger("midtown.log.rereplicate")
INTERVAL_S = 5.0


class Host(Protocol):
    """What it needs of the log server (log/node.py)."""
    @property
    def zk(self) -> Any: ...

    @property
    def writers(self) -> Mapping[int, Any]: ...

    def write_metadata(self, meta: LogMetadata, version: int) -> tuple[bool, int]: ...


class ReReplicator:
    def __init__(self, host: Host, peer: Callable[[int], ReplicaLink | None],
                 first: Callable[[int], int]) -> None:
        """`peer(server)`: the link to a server's replica (log/replica_link.py; None:
        unknown); `first(log)`: this
        server's truncation point of a log."""
        self.host = host
        self.peer = peer
        self.first = first
        self.moved = 0  # replicas re-recorded since start
        # (log, segment epoch) -> the target of a move begun and not yet recorded
        self._started: dict[tuple[int, int], int] = {}
        self._homes: dict[int, str] = {}  # each log's home (log/homes.py), as the round read the topology

    def round(self) -> None:
        if not self.host.writers:
            return
        zk = self.host.zk
        registered = set(zkpaths.servers(zk))
        topo = zkpaths.read_topology(zk)
        self._homes = topo.home_map if topo else {}
        pool = set(topo.log_servers) if topo else registered
        # A server that is leaving (decommissioned) or out of the pool counts as gone: its
        # segments move off it; while it runs it is still a source of their entries.
        stay = (registered & pool) - zkpaths.leaving(zk)
        for log_id, driver in list(self.host.writers.items()):
            if driver.core.state is not State.WRITING:
                continue  # its seal is not written yet: leave the metadata to it
            try:
                self._repair(log_id, driver.core.epoch, stay, registered)
            except Exception as e:  # a peer or ZooKeeper away: the next round tries again
                log.info("re-replicating log %d: %s", log_id, e)

    def _repair(self, log_id: int, epoch: int, stay: set[int], registered: set[int]) -> None:
        meta, version = zkpaths.read_metadata(self.host.zk, log_id)
        load: dict[int, int] = {}
        for seg in meta.segments:
            for r in seg.replicas:
                load[r] = load.get(r, 0) + 1
        where = machines.domains(self.host.zk, machines.LOG_SERVERS)
        started = {e: t for (lg, e), t in self._started.items() if lg == log_id}
        home = homes.in_home(stay, log_id, self._homes, where)
        moves = rereplicate.plan(meta, stay, load, where, machines.one_machine(self.host.zk), started, home)
        for e in started:
            del self._started[(log_id, e)]
        for move in moves:
            seg = next(s for s in meta.segments if s.epoch == move.epoch)
            self._started[(log_id, seg.epoch)] = move.target
            trunc = self.first(log_id)
            sources = [r for r in seg.replicas if r in registered]
            if not self._fill(log_id, epoch, seg, trunc, move.target, sources):
                continue
            ok, version = self.host.write_metadata(rereplicate.recorded(meta, move), version)
            if not ok:
                return  # changed meanwhile: read it again next round
            del self._started[(log_id, seg.epoch)]
            meta, _ = zkpaths.read_metadata(self.host.zk, log_id)
            self.moved += 1
            log.info("log %d: segment %d's replica %d (gone) replaced by %d", log_id, seg.epoch, move.dead,
                     move.target)

    def _fill(self, log_id: int, epoch: int, seg: Segment, trunc: int, target: int,
              sources: list[int]) -> bool:
        """Copy to `target` the committed entries of `seg` it lacks; whether it then holds
        every one of them (rereplicate.complete)."""
        want = rereplicate.committed_range(seg, trunc)
        assert seg.end is not None  # sealed
        if not want:
            return True
        t = self.peer(target)
        if t is None:
            return False
        for lo in range(want.start, want.stop, limits.MESSAGE_ENTRIES_MAX):
            hi = min(want.stop - 1, lo + limits.MESSAGE_ENTRIES_MAX - 1)
            held = {e.position for e in self._read(t, log_id, seg.epoch, lo, hi)}
            missing = [p for p in range(lo, hi + 1) if p not in held]
            if not missing:
                continue
            got: dict[int, Entry] = {}
            for s in sources:
                link = self.peer(s)
                if link is None:
                    continue
                for e in self._read(link, log_id, seg.epoch, missing[0], missing[-1]):
                    got.setdefault(e.position, e)
            copy = rereplicate.to_copy(seg, trunc, {p: got[p] for p in missing if p in got})
            if copy:
                t.call(AddEntries(log_id, epoch, seg.epoch, tuple(copy), seg.end),
                       limits.REPLICA_RPC_TIMEOUT_S)
        held_all = [e.position for lo in range(want.start, want.stop, limits.MESSAGE_ENTRIES_MAX)
                    for e in self._read(t, log_id, seg.epoch, lo,
                                        min(want.stop - 1, lo + limits.MESSAGE_ENTRIES_MAX - 1))]
        return rereplicate.complete(seg, trunc, held_all)

    @staticmethod
    def _read(link: ReplicaLink, log_id: int, seg_epoch: int, lo: int, hi: int) -> list[Entry]:
        try:
            rep = link.call(ReadRange(log_id, 0, seg_epoch, lo, hi), limits.REPLICA_RPC_TIMEOUT_S)
        except (NoAnswer, Refused):
            return []
        return list(rep.entries)
