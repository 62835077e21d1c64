"""What the parts of one storage node share: its store, its position in each log, the
membership it last read, and the locks and signals between the apply loop
(storage_node/apply_loop.py), the bookkeeping rounds (storage_node/bookkeeping.py) and the
reads (storage_node/reads.py). One object, built by StorageNode and handed to each part:
once started, the applier is the only writer of the positions; the others read them.

The positions are updated in place, never rebound (a bootstrap replaces their contents):
the reads hold the same dictionary."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from kazoo.client import KazooClient

from catalog import failover, registry, scopes
from catalog.log_map import LogMap
from catalog.registry import KvTopology
from catalog.replica_sets import ReplicaSets
from catalog.shard_moves import Move
from log.client import LogClient
from midtown_pb import kv_pb2_grpc
from record import staleness
from runtime import membership, world
from runtime.stubs import Calls, Stubs
from storage_node.handoff import Place
from storage_node.settings import Settings
from storage_node.store import NodeStore

log = logging.getLogger("midtown.storage.state")


@dataclass
class NodeState:
    node_id: int
    settings: Settings
    logs: LogClient  # the log servers (and the ZooKeeper session, logs.zk)
    store: NodeStore
    kv: KvTopology  # shards, members and logs; re-read by the bookkeeping rounds
    log_count: int  # every log of the cluster
    # Which of the key-value logs (the first log_map.logs of them) carries each shard;
    # re-read with kv by the bookkeeping rounds (learn_log_map)
    log_map: LogMap
    sets: ReplicaSets  # which nodes hold each shard; watched, and re-read with kv (learn_sets)
    # log -> (next position to apply, log time of the last applied entry), as durable as
    # the last batch committed.
    positions: dict[int, tuple[int, int]] = field(default_factory=dict)
    # shard -> its mark, for the shards that came by a copy (storage_node/shard_copy.py):
    # their records below it are in the copy. As durable as the last batch.
    marks: dict[int, int] = field(default_factory=dict)
    # shard -> where its records come from, for the shards handed to another log since the
    # cluster began (storage_node/handoff.py); the others' come from their first log. As
    # durable as the last batch (a tail waiting for one to change waits on cond).
    places: dict[int, Place] = field(default_factory=dict)
    moves: dict[int, Move] = field(default_factory=dict)  # shard moves under way; re-read with kv
    # (log, node) -> the position each member published in that log (for truncation).
    member_positions: dict[tuple[int, int], int] = field(default_factory=dict)
    last_data: dict[int, int] = field(default_factory=dict)  # log -> position of the last data record
    reclaimed: int = 0  # dedup entries reclaimed since start
    # Started: its logs tailed from its positions (after a bootstrap, if one was needed).
    # Its gRPC service answers before that; a shard copy is not taken in until then.
    started: bool = False
    lag: dict[int, int] = field(default_factory=dict)  # log -> entries behind its writer, last measured
    # The logs whose writer did not answer the last measure (none: a lost data center's logs
    # before their fail-over): their lag is not known, and readiness does not wait on them.
    writers_away: frozenset[int] = frozenset()
    # Each storage node's data center, read by the bookkeeping rounds while the cluster has
    # local scopes (which replicas answer for their shards: answers_for)
    data_centers: dict[int, str] = field(default_factory=dict)
    # Whether this replica's clock may serve bounded reads: the writers' clocks it checked
    # (Tail answers) and the stamps it applies
    clocks: staleness.ClockWatch = field(default_factory=staleness.ClockWatch)
    cond: threading.Condition = field(default_factory=world.condition)  # notified after each batch
    commit_lock: threading.Lock = field(default_factory=world.lock)  # a batch commits whole
    stop: threading.Event = field(default_factory=world.event)
    # The way to the other storage nodes (runtime/stubs.py): gRPC unless wired otherwise.
    peer_calls: Calls = field(default_factory=lambda: Stubs(kv_pb2_grpc.StorageStub))

    @property
    def zk(self) -> KazooClient:
        return self.logs.zk

    @property
    def kv_logs(self) -> int:
        """The logs that carry shards: the first kv_logs of the cluster's."""
        return self.log_map.logs

    def place_of(self, shard: int) -> Place:
        """Where this node takes `shard`'s records from (its own applied state, which the
        map follows: a hand-off is in the map before or after a replica applies it)."""
        p = self.places.get(shard)
        return p if p is not None else Place(self.log_map.origin(shard))

    def log_of(self, shard: int) -> int:
        """The log this node takes `shard`'s records from now."""
        return self.place_of(shard).log

    def shards_in_log(self, log_id: int) -> set[int]:
        """The shards whose records this node may meet in `log_id`: those the map puts there,
        and those it still takes from there (a hand-off it has not applied yet)."""
        return {*self.log_map.shards_of_log(log_id),
                *(x for x in range(self.kv.shards) if self.log_of(x) == log_id)}

    def watch_clock(self, log_id: int, stamp_ms: int, checked: bool = False) -> None:
        """A stamp of `log_id`'s writer's clock seen now (an entry applied, or, `checked`,
        its clock in a Tail answer): bounded reads of it are served here only after such a
        check, and stop while such stamps run ahead of this node's clock by more than the
        clocks may be off (record/staleness.py ClockWatch)."""
        ahead = self.clocks.note(log_id, stamp_ms, world.wall_ms(), world.monotonic(), checked)
        if ahead is not None:
            log.warning("log %d's writer's clock runs %d ms ahead of this node's: no bounded read of it is "
                        "served here for %.0f s (each clock should be within %d ms of real time: check NTP)",
                        log_id, ahead, staleness.CLOCK_DOUBT_S, staleness.MAX_CLOCK_OFFSET_MS)

    def learn_log_map(self, m: LogMap) -> None:
        """Keep `m` if it is newer than the map held (as learn_sets)."""
        if m.version >= self.log_map.version:
            self.log_map = m

    def reload_positions(self) -> None:
        """The positions and members' positions as the store holds them (after a bootstrap
        copied a peer's state), in place."""
        self.positions.clear()
        self.positions.update({i: self.store.next_position(i) for i in range(self.log_count)})
        self.member_positions.clear()
        self.member_positions.update(self.store.member_positions())
        self.marks.clear()
        self.marks.update(self.store.marks())
        self.places.clear()
        self.places.update(self.store.places())

    def answers_for(self, shard: int, every: Callable[[int], bool]) -> bool:
        """Whether this node sends the results of `shard`'s records to their coordinators:
        by `every(shard)` (each replica, or some of them, catalog/routing.py), unless the
        shard's scope is local to a data center holding some of its replicas: then those
        alone (catalog/scopes.py answering)."""
        if self.kv.scopes:
            replicas = self.sets.of(shard) if self.sets.version >= 0 else self.kv.storage_nodes
            there = scopes.answering(self.kv.scopes, shard, replicas, self.data_centers)
            if there:
                return self.node_id in there
        return every(shard)

    def learn_sets(self, sets: ReplicaSets) -> None:
        """Keep `sets` if they are newer than the ones held: the watch on them and the
        bookkeeping round's read race, and an older read must not undo a newer one."""
        if sets.version >= self.sets.version:
            self.sets = sets

    def read_sets(self) -> None:
        """Read the replica sets from ZooKeeper now, not waiting for the watch or the next
        bookkeeping round (a decision that a view a little old would get wrong)."""
        self.learn_sets(registry.read_replica_sets(self.zk, registry.read_kv(self.zk) or self.kv))

    def holds(self, shard: int) -> bool:
        """Whether this node holds `shard`: it is in its replica set, and answers for it."""
        return self.sets.holds(self.node_id, shard)

    def applies_shard(self, shard: int) -> bool:
        """Whether this node applies `shard`'s records: it holds it, or a copy of it was
        installed here (a shard move's destination; the mark goes when the copy does)."""
        return self.holds(shard) or shard in self.marks

    def tailed_logs(self) -> tuple[int, ...]:
        """The key-value logs that carry one of the shards this node applies (as the map
        says, and as the node's own places say: a hand-off under way has it in both): the
        only ones it tails."""
        shards = {*self.sets.shards_of(self.node_id), *self.marks}
        return tuple(sorted({*self.log_map.logs_of(shards), *(self.log_of(s) for s in shards)}))

    def shard_digests(self) -> list[tuple[int, int, int, int]]:
        """(shard, its log, the position applied, the shard's digest there) of every shard
        this node holds: two replicas at the same position must have the same digest."""
        out = []
        for shard in self.sets.shards_of(self.node_id):
            lg = self.log_of(shard)
            out.append((shard, lg, self.positions[lg][0], self.store.digest(shard)))
        return out

    def peer_ids(self, log_id: int | None = None) -> dict[int, str]:
        """The other storage nodes that are up: id -> address; not those a fail-over
        condemned (catalog/failover.py): their state is not the log's until they take a
        copy. Given `log_id`, those condemned for its shards only: a copy of a shard of
        another log is the log's on them (a node rebuilding may take it there)."""
        out = failover.condemned(self.kv.failovers, log_id)
        return {nid: a for nid, a in membership.members(self.zk, registry.STORAGE_NODES).items()
                if nid != self.node_id and nid not in out}

    def condemned(self, kv: KvTopology | None = None) -> bool:
        """Whether a fail-over condemned this node (catalog/failover.py), as last read (or
        as `kv`, read now, says)."""
        return self.node_id in failover.condemned((kv or self.kv).failovers)

    def condemned_logs(self) -> set[int]:
        """The logs a fail-over cut whose shards this node must take again (none: not
        condemned)."""
        return failover.cut_logs(self.kv.failovers, self.node_id)

    def peers(self, members_only: bool = False, shards: Iterable[int] = ()) -> list[str]:
        """The addresses of the other storage nodes that are up (members only; holding
        every one of `shards`)."""
        want = tuple(shards)
        return [a for nid, a in self.peer_ids().items()
                if (not members_only or nid in self.kv.storage_nodes)
                and all(self.sets.holds(nid, sh) for sh in want)]
