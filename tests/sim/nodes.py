"""The whole cluster in the seeded simulation (issue 51): tests/sim/writers.py's whole log
servers, and beside them real storage nodes (storage_node/node.py StorageNode started as its
process starts it: ZooKeeper registration and the replica sets' watch, the bootstrap check,
the bookkeeping rounds that publish durable positions, truncate the log and measure the lag,
the apply loop's tail threads following the log through the real log client), a real
coordinator (coordinator/node.py Coordinator, and its KV service's gRPC handlers,
coordinator/server.py Shell), the real shard mover (drivers/moves.py) and applications on
the real SDK (midtown/client.py Client), each in its own simulated process on the simulated
ZooKeeper; the stores on the simulator's disk (tests/sim/disk.py); the SDK's calls to the
coordinator, the nodes' calls to each other, the coordinator's to them and their answers
over the simulated network.

Faults, beside the log servers' (writers.py): a node is killed (its ZooKeeper session
expires after the timeout) or its machine loses power (the batches written since its last
sync may be lost, and three times in ten the whole disk: it then bootstraps from a peer or
is rebuilt shard by shard), and restarts later; the coordinator's process is killed (its
calls in flight reset) and started again; a mover's process is killed or paused past its
session mid-move, and the next mover takes the move up. The others are drawn per seed
(Faults, drawn: make sim), or named (a test replaying a scenario; --faults). With `slow`: a
node's disk is slow now and then (every sync waits), and half the shard copies come over a
slow link, seconds late. With `pauses`: now and then a node's process is paused (SIGSTOP)
for up to twice its session timeout (it falls behind the logs, its ZooKeeper session may
expire, a peer that copies from it meanwhile waits), and a node's
tail stalls a while now and then (the fault point "tail.stall", storage_node/apply_loop.py).

Applications write through the SDK (put, check-and-set, atomic batches), which sends a
write whose outcome was unknown again under the same request id; a reader makes strong
reads through it of writes answered before it began.

The checks, after the log's (the entries the nodes' truncations removed are kept aside, so
the whole committed log is checked):
  (1) what each client was told (the coordinator's response as the SDK received it), and
      every node's answer, is the outcome of the write's first append in the committed
      log, as a model applying the log in order says (tests/sim/store.py), made into a
      response by the coordinator's own functions;
  (2) exactly once: a write counts at most once, and once if it was answered;
  (3) a node restarted after a crash or a power loss is at or past every position it
      published from the disk it restarted on; one rebuilt after losing its disk, once
      started, at or past every position it published from the disk it lost;
  (4) no node stops (a node behind a truncation does);
  (5) a strong read sees every write answered before it began;
  (6) at the end no move is under way, every shard has its replicas (and the sets' history
      ends at their version, each step of a move in it changing the set it names), each
      holds it as the model does (digest and values), and a node that left a shard has
      dropped it and refuses to read it;
  (7) each shared key's history of puts, deletes, check-and-sets and strong gets
      linearizes (tests/linearizability.py), and each of them ended by its deadline (1 to
      4 s, on an SDK client its threads share);
  (8) once the faults have ended, a put on each shared key succeeds within 30 s;
  (9) a mover that was not paused ends by its --timeout;
  (10) in no version of the replica sets has a shard two copies that stay on one machine
      (the nodes run on three machines, recorded as fleet/machines.py records them; an
      operator moving a shard onto a machine that holds a copy of it is refused).

Broken variants (tests/sim/variants.py): a rule of the real code swapped for a broken one
for the run. The faults drawn per seed: tests/sim/faults.py; the network's backends of the
storage side's ports: tests/sim/links.py; the checks at the end (1, 2, 3, 6, 7, 10):
tests/sim/end_checks.py; the cluster's shape: tests/sim/cluster_shape.py."""

from __future__ import annotations

import dataclasses
import random
import shutil
import tempfile
import zlib
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from kazoo.exceptions import KazooException

from catalog import datasets, registry
from coordinator.node import Coordinator
from coordinator.records import record_for
from coordinator.server import Shell
from drivers import handoffs, moves
from fleet import failure_domains, machines
from fleet.failure_domains import Domain
from log import zk as zkpaths
from log.client import LogClient
from log.entry import Entry
from log.metrics import PREFERENCE_YIELDS
from log.rocks_store import RocksStore
from log.store import Batch
from midtown import errors
from midtown.client import Client
from midtown.model import Op as SdkOp
from midtown.model import Write as SdkWrite
from record import staleness
from record.model import Cas, Incr, Put, RecordResult
from runtime import world
from runtime.process import EXIT_FAILED_OVER
from storage_node import bootstrap
from storage_node.node import Parts, StorageNode
from storage_node.settings import Settings
from storage_node.state import NodeState
from storage_node.store import NodeStore
from tests.linearizability import INF, Operation
from tests.sim import failover_sim, variants, writers
from tests.sim.broken import swapped
from tests.sim.cluster_shape import (
    COORDINATOR,
    LOGS,
    NODE_MACHINES,
    NODES,
    PKEYS,
    REPLICAS,
    SHARDS,
    Write,
    counted,
)
from tests.sim.disk import Disk
from tests.sim.end_checks import EndChecks
from tests.sim.failover_sim import FailoverSim
from tests.sim.faults import Faults, drawn
from tests.sim.links import CheckedLogClient, _Answers, _DiskTaggedLink, _KvStub, _PeerCalls, _StorageLink
from tests.sim.variants import BROKEN
from tests.sim.writers import Config, Result, WriterSim, _LogLink

MOVERS = 2  # operators moving shards, perhaps at the same time
WIPES = 0.3  # of power losses, those that lose the disk too
WRITE_TIMEOUT_S = 10.0  # an SDK call's deadline, through its retries (the SDK's default)
HOT = [b"h0", b"h1", b"h2"]  # the keys the linearizability clients share
LINEARIZABLE_CLIENTS = 4  # threads of one application, on one SDK client
# Their operations' deadlines (s), and how late one may end: tests/integration/test_deadlines.py's
DEADLINES_S = (1.0, 4.0)
# Where the simulated disks' RocksDB databases live: in memory (tmpfs) where the machine has
# one. Nothing is synced for real (tests/sim/disk.py simulates what a sync keeps), and a
# database's open and close took 8.4 ms on this machine's disk against 2.6 ms in /dev/shm
# (its removal 24 ms against 3): half of a run's time went to opening and closing them.
MEMORY_DIR = Path("/dev/shm")
LATE_S = 0.25
HEALED_S = 30.0  # (8)
# (9) How late a mover may end past its --timeout (its ZooKeeper calls' round trips)
MOVER_LATE_S = 0.25
# Rounds faster than a real node's, so that a short run publishes and truncates often.
SETTINGS = Settings(position_interval_s=1.0)


class _KeptStore(RocksStore):
    """A log server's replica store, the real one (log/rocks_store.py) on the simulated
    disk (tests/sim/disk.py: what was not synced is lost when its machine loses power),
    which hands the entries a truncation deletes to the simulation: it checks the whole
    log at the end."""

    def __init__(self, path: str, disk: Disk, kept: dict[tuple[int, int, int], Entry]) -> None:
        super().__init__(path, disk.open)
        self.path, self.kept = path, kept

    def commit(self, batch: Batch) -> None:
        if batch.delete_below is not None and batch.meta is not None:
            for seg in batch.meta.segments:
                for e in self.range(batch.log_id, seg, 0, batch.delete_below - 1):
                    self.kept.setdefault((batch.log_id, seg, e.position), e)
        super().commit(batch)


class NodeSim(FailoverSim, EndChecks, WriterSim):
    follows = False  # the storage nodes' tail threads are the follows; truncation would cut one from 0

    def __init__(self, seed: int, cfg: Config | None = None, broken: str = "",
                 faults: Faults | None = None) -> None:
        assert broken in ("",) + BROKEN + writers.BROKEN, broken
        f = drawn(seed, broken) if faults is None else faults
        self.faults = f
        self.seed = seed
        self.kept: dict[tuple[int, int, int], Entry] = {}  # (log, segment epoch, position) -> entry truncated
        self.disk = Disk()
        self.dir = Path(tempfile.mkdtemp(prefix="midtown-sim-nodes-",
                                         dir=MEMORY_DIR if MEMORY_DIR.is_dir() else None))
        self.log_disks: dict[int, int] = {}  # log server -> its disks so far (a new one when one is lost)
        log_broken = "" if broken in BROKEN else broken  # a variant of the log servers' (writers.BROKEN)
        servers = failover_sim.LOG_SERVERS if f.failover else f.log_servers
        super().__init__(seed, replace(cfg or Config(), elections=True, logs=LOGS, servers=servers,
                                       wipes=f.log_wipes and not f.failover, late_notices_s=f.late_notices_s,
                                       link_cuts=f.link_cuts, broken=log_broken,
                                       **({} if f.leases else {"lease_s": 0.0})))
        self.broken = broken
        if f.data_centers:  # three: log server and storage node n in data center n mod 3
            self.dcs, self.dc_cut_until = 3, [0.0] * 3
            self.machine_of = failure_domains.lookup(
                {s: Domain(f"log{s}", (("dc", f"dc{s % 3}"),)) for s in self.servers})
        self.first_logs = tuple(s % LOGS for s in range(SHARDS))  # each shard's log at creation
        if f.failover:  # (tests/sim/failover_sim.py)
            self.coordinator_dc = failover_sim.COORDINATOR_DC
        # Slow disks and links: now and then a node's disk is slow for a few seconds (every
        # sync waits), and half the shard copies come over a slow link, up to 3 s late
        self.slow = f.slow
        # Nodes paused (SIGSTOP) now and then, and their tails stalled
        self.pauses = f.pauses
        if not f.pauses:
            self.sched.never("tail.stall")
        # An ingestion pipeline's task writing events by id, retried whole under a new
        # request id as a Spark task is (ingester); event id -> (its partitioning key,
        # whether an attempt's outcome said it was applied)
        self.ingest = f.ingest
        # Shards handed between the two logs now and then, their drivers killed mid-way
        # (hand_offs: drivers/handoffs.py)
        self.handoffs = f.handoffs and not f.failover
        self.events: dict[bytes, tuple[bytes, bool]] = {}
        self.storage: dict[int, StorageNode] = {}  # the live nodes
        # id(node) -> (node, its gRPC service's handlers, as storage_node/server.py registers them)
        self.storage_services: dict[int, tuple[StorageNode, Any]] = {}
        self.storage_zk: dict[int, Any] = {}
        self.storage_inc = {n: 0 for n in NODES}
        self.writes: list[Write] = []
        self.answered: dict[bytes, list[RecordResult]] = {}
        self.coordinator_inc = 0
        self.coordinator_proc: str | None = None
        # log -> (when its coordinator heard it, last position) of each append acknowledged
        self.acked_appends: dict[int, list[tuple[float, int]]] = {}
        self.histories: dict[bytes, list[Operation]] = {}  # (7) key -> its operations
        self.sent: dict[str, list[bytes]] = {}  # client -> the request ids of its write under way
        self.told: dict[bytes, tuple[str, Any]] = {}  # request id -> (method, the response its SDK had)
        # (node, wall ms it went down, its position in each log when it started again)
        self.restarts: list[tuple[int, int, dict[int, int]]] = []
        self.wipes: list[tuple[int, int]] = []  # (node, wall ms it lost its disk)
        # (node, log, payload) -> the disk it was sent from, each time it was sent (matched
        # with the log's entries in order: the same position may be published again)
        self.sent_from_disk: dict[tuple[int, int, bytes], list[int]] = {}
        self.counts = {"node crashes": 0, "power losses": 0, "batches lost": 0, "retries": 0,
                       "strong reads": 0, "disks lost": 0, "moves": 0, "moves done": 0, "moves refused": 0,
                       "moves onto a copy's machine refused": 0,
                       "movers killed": 0, "movers paused": 0, "coordinator crashes": 0,
                       "nodes paused": 0, "ingest attempts": 0, "log server power losses": 0,
                       "log batches lost": 0}
        if f.handoffs:
            self.counts.update(dict.fromkeys(("hand-offs", "hand-offs done", "hand-offs refused",
                                              "hand-off drivers killed"), 0))
        if f.data_centers:
            self.counts["data centers cut off"] = 0
        if f.preferences:
            self.counts["preferences set"] = self.counts["writers moved for a preference"] = 0
        self.init_failover()
        if f.bounded_reads:
            self.counts.update(dict.fromkeys(("bounded reads", "bounded reads served near"), 0))
            # Every server's wall clock off real time by up to the offset bounded reads allow
            # (record/staleness.py), half of them at either end (drawn on their own)
            off, clocks = staleness.MAX_CLOCK_OFFSET_MS / 1000, random.Random(f"wall-clocks/{seed}")
            self.sched.wall_offsets = {
                m: clocks.choice((-off, off, clocks.uniform(-off, off)))
                for m in [f"server-{s}" for s in self.servers] + [f"storage-{n}" for n in NODES]
                + ["coordinator"]}
            if f.wrong_clock:  # one node's beyond the offset (drawn on its own), its disk often slow
                self.wrong = random.Random(f"wrong-clock/{seed}")
                self.wrong_node = self.wrong.choice(NODES)
                self.sched.wall_offsets[f"storage-{self.wrong_node}"] = -self.wrong.uniform(2.0, 4.0)
                self.counts["clocks wrong"] = 1

    # --- the log servers' disks -------------------------------------------------------------

    def new_store(self, s: int) -> _KeptStore:
        self.log_disks[s] = self.log_disks.get(s, 0) + 1
        return self.log_store(s)

    def log_store(self, s: int) -> _KeptStore:
        """Log server `s`'s replica store, opened on its disk."""
        return _KeptStore(str(self.dir / f"log-{s}-{self.log_disks[s]}"), self.disk, self.kept)

    def crash_server(self, s: int) -> None:
        """A log server's process dies, or its machine loses power (half the time): what
        its store wrote and did not sync is lost (the store syncs every write it
        acknowledges: log/rocks_store.py)."""
        if s in self.down:
            return
        super().crash_server(s)
        store = self.stores[s]
        if self.rng.random() < 0.5:
            self.counts["log server power losses"] += 1
            self.counts["log batches lost"] += self.disk.power_loss(store.path, self.rng)
        else:
            store.close()

    def restart_server(self, s: int) -> None:
        if s not in self.down or self.dc_lost(self.dc_of_server(s)):
            return  # started already; or its data center lost (it starts when that comes back)
        if self.stores[s].synced.closed:  # its disk opened again
            self.stores[s] = self.log_store(s)
        super().restart_server(s)

    def store_of(self, s: int) -> _KeptStore:
        """(A server down: its disk opened, which the server finds open when it restarts.)"""
        if self.stores[s].synced.closed:
            self.stores[s] = self.log_store(s)
        return self.stores[s]

    # --- the storage nodes ----------------------------------------------------------------

    def disk_generation(self, n: int, before_ms: float = float("inf")) -> int:
        """How many times node `n` had lost its disk (before `before_ms`): which disk it is on."""
        return sum(1 for node, d in self.wipes if node == n and d < before_ms)

    def storage_proc(self, n: int) -> str:
        return f"storage-{n}-{self.storage_inc[n] - 1}"

    def path(self, n: int) -> str:
        return str(self.dir / f"node-{n}" / "state.db")

    def start_node(self, n: int, started: Callable[[NodeState], None] | None = None) -> dict[int, int]:
        """Storage node `n`, as its process starts it (StorageNode.open, on the simulated
        ZooKeeper, disk and network), started (then `started(its state)`, if given);
        returns the position it starts from in each log."""
        proc = f"storage-{n}-{self.storage_inc[n]}"
        self.storage_inc[n] += 1
        with self.sched.process(proc):
            zk = self.ens.client()
            zk.start()
            logs = LogClient(zk=zk, link=_DiskTaggedLink(self, n))
            kv = registry.read_kv(zk)
            assert kv is not None
            (self.dir / f"node-{n}").mkdir(exist_ok=True)
            store = NodeStore(self.path(n), open_db=self.disk.open)
            parts = Parts(logs, store, kv, LOGS, registry.read_log_map(zk, kv, LOGS),
                          registry.read_replica_sets(zk, kv),
                          str(self.dir / f"node-{n}"))
            node = StorageNode(n, f"sim-storage:{n}", parts, SETTINGS,
                               on_fatal=lambda code, why: self.fatal(n, why, code),
                               answers=_Answers(self), peers=_PeerCalls(self))
            at = {lg: node.state.positions[lg][0] for lg in range(LOGS)}
            self.storage_zk[n] = zk
            world.spawn("start", node.start if started is None
                        else lambda: (node.start(), started(node.state)))
        self.storage[n] = node
        return at

    def fatal(self, n: int, why: str, code: int = 0) -> None:
        """Node `n` must not go on (storage_node/node.py on_fatal): its process exits. (4)
        Not counted from a process that crashed already: one of its threads, unwinding,
        met the state the others left half-way (a real crash stops them all at once). A
        node a fail-over condemned exits to take a copy: its supervisor starts it again."""
        if self.sched.dying():
            return
        if code == EXIT_FAILED_OVER and n in self.storage:
            self.counts["nodes restarted to take a copy"] += 1
            self.stop_node(n, power=False)

            def again() -> None:
                world.sleep(self.rng.uniform(0.2, 1.0))
                if n not in self.storage and not self.dc_lost(self.dc_of_server(n)):
                    self.start_node(n)
            with self.sched.process("main"):
                world.spawn("supervisor", again)
            return
        self.violations.append(f"node {n} stopped: {why}")
        if n in self.storage:
            self.stop_node(n, power=False)

    def stop_node(self, n: int, power: bool) -> None:
        """Node `n`'s process dies (what it wrote survives), or its machine loses power (what
        it wrote since its last sync may not); ZooKeeper expires its session later."""
        self.storage.pop(n)
        self.sched.crash(self.storage_proc(n))
        zk = self.storage_zk.pop(n)
        zk.started = False

        def expire() -> None:
            world.sleep(self.ens.session_timeout_s)
            self.ens.expire(zk)
        with self.sched.process("main"):  # (not the node's: it may be the one stopping)
            world.spawn("zk-expiry", expire)
        if power:
            self.counts["power losses"] += 1
            self.counts["batches lost"] += self.disk.power_loss(self.path(n), self.rng)
        else:
            self.counts["node crashes"] += 1
            self.disk.dbs.pop(self.path(n)).close()

    def node_faults(self, stop: Any) -> None:
        while not stop.is_set():
            world.sleep(self.rng.uniform(1.0, 4.0))
            if stop.is_set() or len(self.storage) < len(NODES):
                continue
            n = self.rng.choice(NODES)
            # (pauses) A peer paused a moment before a node loses its disk: the node's last
            # published positions are past the peer's, which the node may copy from next
            lost = self.pauses and self.rng.random() < 0.3
            if lost:
                self.pause_node(self.rng.choice([m for m in NODES if m != n]), self.rng.uniform(3.0, 6.0))
                world.sleep(self.rng.uniform(1.0, 2.0))
                if n not in self.storage or len(self.storage) < len(NODES) - 1:
                    continue
            down_ms = world.wall_ms()
            power = lost or self.rng.random() < 0.5
            self.stop_node(n, power)
            # The disk lost too, but only while every other node holds its state (none is
            # bootstrapping or rebuilding from its peers): with two of a shard's three copies
            # lost at once, and the third maybe about to go, nothing could be rebuilt
            wiped = power and (lost or self.rng.random() < WIPES) and all(
                node.state.started for node in self.storage.values())
            if wiped:  # its disk lost with the power: it starts on an empty one
                shutil.rmtree(self.dir / f"node-{n}")
                self.counts["disks lost"] += 1
                self.wipes.append((n, down_ms))
            world.sleep(self.rng.uniform(0.2, 3.0))
            if n in self.storage or self.dc_lost(self.dc_of_server(n)):
                continue  # its data center lost meanwhile (it starts when that comes back)
            # (3) A node that lost its disk copies its shards (whole from a peer, or shard by
            # shard from their replicas: storage_node/rebuild.py) at or past the logs' heads
            # when it began, so it starts at or past what it published from the disk it lost
            # (the logs may have been truncated up to there): its position in each log it
            # tails once started (as its start ends: no task of the check's own, which would
            # change the seeds' schedules)
            rebuilt = None if not wiped or self.faults.failover else (
                lambda s, n=n, down_ms=down_ms: self.restarts.append(
                    (n, down_ms, {lg: s.positions[lg][0] for lg in s.tailed_logs()})))
            at = self.start_node(n, rebuilt)
            # (3): a node that lost its disk starts from nothing, and copies; so does one that
            # went down in the middle of a bootstrap, whose state it had let go of on purpose
            # (the bootstrap's marker still there: it bootstraps again; make soak, seed 101965)
            if not wiped and not bootstrap.unfinished(self.storage[n].state.store):
                self.restarts.append((n, down_ms, at))

    def slow_disks(self, stop: Any) -> None:
        """Now and then a node's disk is slow for 1-4 s (tests/sim/disk.py slow): the node
        falls behind the logs, and catches up after."""
        while not stop.is_set():
            world.sleep(self.rng.uniform(1.0, 4.0))
            self.disk.slow(self.path(self.rng.choice(NODES)), world.monotonic() + self.rng.uniform(1.0, 4.0))

    def wrong_clock_lags(self, stop: Any) -> None:
        """(wrong_clock) The node whose clock is seconds behind falls behind its logs often
        (its disk slow 1.5-4 s at a time): read then, it would take itself for fresher than
        it is by its clock's error, unless it sees its logs' stamps run ahead of its clock."""
        while not stop.is_set():
            world.sleep(self.wrong.uniform(0.2, 1.0))
            self.disk.slow(self.path(self.wrong_node), world.monotonic() + self.wrong.uniform(1.5, 4.0))

    def node_pauses(self, stop: Any) -> None:
        """(pauses) Now and then a node's process is paused (SIGSTOP) for 0.5 s to twice its
        ZooKeeper session timeout, its session cut as long (it expires past the timeout)."""
        while not stop.is_set():
            world.sleep(self.rng.uniform(2.0, 6.0))
            n = self.rng.choice(NODES)
            if stop.is_set() or n not in self.storage:
                continue
            self.pause_node(n, self.rng.uniform(0.5, 2 * self.ens.session_timeout_s))

    def pause_node(self, n: int, seconds: float) -> None:
        """Node `n`'s process paused (SIGSTOP) for `seconds`, its ZooKeeper session cut as long."""
        if n in self.storage:
            self.sched.pause(self.storage_proc(n), seconds)
            self.ens.partition(self.storage_zk[n], seconds)
            self.counts["nodes paused"] += 1

    # --- the clients ----------------------------------------------------------------------

    def kv_logs(self) -> int:
        return LOGS

    def create_kv(self) -> None:
        for n in NODES:  # each node's machine, as its process records it when it first starts
            machines.record(self.admin, machines.STORAGE_NODES, n, self.node_domain(n))
        registry.create_kv(self.admin, SHARDS, list(NODES), logs=LOGS, replicas=REPLICAS)
        if self.faults.failover:
            self.lay_out_scope()

    def start_more(self, stop: Any) -> None:
        self.dataset = datasets.create(self.admin, "d")
        if self.faults.failover:
            datasets.create(self.admin, failover_sim.LOCAL, scope=f"dc{failover_sim.HOME}")
        for n in NODES:
            self.start_node(n)
        self.start_coordinator()
        world.spawn("node-faults", lambda: self.while_running(self.node_faults, stop))  # (its last restart)
        world.spawn("coordinator-faults", lambda: self.coordinator_faults(stop))
        self.shared = self.sdk("lin")
        for c in range(LINEARIZABLE_CLIENTS):
            world.spawn(f"linearizable-{c}", lambda c=c: self.linearizable_client(c, self.shared, stop))
        # (readers too: a strong read may go through the log, and is then in what the check reads)
        world.spawn("strong-reader", lambda: self.while_running(self.strong_reader, stop))
        if self.faults.bounded_reads:
            world.spawn("bounded-reader", lambda: self.while_running(self.bounded_reader, stop))
        if self.faults.wrong_clock:
            world.spawn("wrong-clock-lags", lambda: self.wrong_clock_lags(stop))
        for i in range(MOVERS):
            world.spawn(f"movers-{i}", lambda i=i: self.movers(i, stop))
        if self.slow:
            world.spawn("slow-disks", lambda: self.slow_disks(stop))
        if self.pauses:
            world.spawn("node-pauses", lambda: self.node_pauses(stop))
        if self.ingest:
            world.spawn("ingester", lambda: self.ingester(stop))
        if self.handoffs:
            world.spawn("hand-offs", lambda: self.hand_offs(stop))
        if self.dcs:
            world.spawn("data-center-cuts", lambda: self.data_center_cuts(stop))
        if self.faults.preferences and not self.faults.failover:
            world.spawn("preferences", lambda: self.preferences(stop))
        if self.faults.failover:
            world.spawn("local-writer", lambda: self.local_writer(stop))
            world.spawn("lose-home", lambda: self.lose_home(stop))

    # --- data centers (Faults.data_centers) ---------------------------------------------------

    def node_domain(self, n: int) -> Domain:
        """Where storage node `n` runs, as its process records it: with data centers, its
        machine's data center too (machine n mod 3 in data center n mod 3)."""
        m = NODE_MACHINES(n)
        return Domain(m.machine, (("dc", f"dc{self.dc_of_server(n)}"),)) if self.dcs else m

    def data_center_cuts(self, stop: Any) -> None:
        """Now and then one data center is cut off from the others for 1 to 6 s: no message
        between it and them gets through meanwhile (tests/sim/writers.py carry, _Link,
        _Entries: a call's held until it heals, or failed by its keepalive), and
        its processes cut off from ZooKeeper as long (its quorum is in the other two; past
        the session timeout their sessions expire). A global dataset (every dataset today:
        its logs' ensembles and its shards' replicas spread over the data centers by the
        placement rule) stays linearizable through it and goes on once it heals."""
        while not stop.is_set():
            world.sleep(self.rng.uniform(2.0, 8.0))
            if stop.is_set():
                break
            dc, seconds = self.rng.randrange(self.dcs), self.rng.uniform(1.0, 6.0)
            self.cut_off(dc, seconds)
            world.sleep(seconds)

    def cut_off(self, dc: int, seconds: float) -> None:
        """Data center `dc` cut off from the others (links and ZooKeeper) for `seconds`."""
        self.dc_cut_until[dc] = max(self.dc_cut_until[dc], world.monotonic() + seconds)
        self.counts["data centers cut off"] += 1
        zks = [self.zks[s] for s in self.servers if self.dc_of_server(s) == dc and s not in self.down]
        zks += [self.storage_zk[n] for n in NODES if self.dc_of_server(n) == dc and n in self.storage]
        if dc == self.dc_of("coordinator") and self.coordinator_proc is not None:
            zks.append(self.coordinator_zk)
        for zk in zks:
            self.ens.partition(zk, seconds)

    def preferences(self, stop: Any) -> None:
        """(Faults.preferences) Now and then the operator prefers a data center for a log's
        writer, or clears it (`midtown log prefer`, log/homes.py): a writer elsewhere gives
        the log up while a server there is up, and one there claims it first, through the
        cuts and crashes of the run; every check holds through it. Drawn on a generator of
        its own."""
        r = random.Random(f"prefer/{self.seed}/changes")
        yields_before = _yields()
        while not stop.is_set():
            world.sleep(r.uniform(2.0, 6.0))
            if stop.is_set():
                break
            log_id, dc = r.randrange(LOGS), r.choice([*(f"dc{i}" for i in range(self.dcs)), ""])
            try:
                zkpaths.set_prefer(self.admin, log_id, dc)
            except KazooException:
                continue  # (ZooKeeper cut off from the operator a while: the next one)
            self.counts["preferences set"] += 1
            self.counts["writers moved for a preference"] = int(_yields() - yields_before)

    # --- shards handed between the logs ------------------------------------------------------

    def hand_offs(self, stop: Any) -> None:
        """Operators handing shards from one log to the other (`midtown shard hand-off`: the
        real driver, drivers/handoffs.py, over the simulated network and ZooKeeper), each in
        a process of its own, which a fault kills now and then at any step; the next driver
        takes up the hand-off it finds under way. At the end, every one under way is finished."""
        self.operators(stop, self.one_hand_off, "hand-off")

    def one_hand_off(self, proc: str, last: bool) -> None:
        done = world.event()

        def run() -> None:
            try:
                logs = self.log_client()
                kv = registry.read_kv(logs.zk)
                assert kv is not None
                m = registry.read_log_map(logs.zk, kv, LOGS)
                todo = [(h.shard, h.new) for h in m.handing]
                if not todo and not last:
                    shard = self.rng.randrange(SHARDS)
                    todo = [(shard, 1 - m.log_of(shard))]
                for shard, to in todo:
                    self.counts["hand-offs"] += 1
                    r = handoffs.hand_off(logs, kv, shard, to, 120 if last else 30)
                    self.counts["hand-offs done"] += r["handed"]
            except handoffs.HandOffError as e:  # a move of the shard under way; or out of time
                self.counts["hand-offs refused"] += 1
                if last:
                    self.violations.append(f"the last hand-off driver could not finish: {e}")
            finally:
                done.set()
        with self.sched.process(proc):
            world.spawn("hand-off", run)
        if not last and self.rng.random() < 0.3:  # the driver killed mid-way
            world.sleep(self.rng.uniform(0.0, 0.3))
            if not done.is_set():
                self.sched.crash(proc)
                self.counts["hand-off drivers killed"] += 1
                return
        while not done.is_set():
            world.sleep(0.1)

    # --- shard moves ----------------------------------------------------------------------

    def movers(self, i: int, stop: Any) -> None:
        """Operators moving shards one after another (`midtown shard move`: the real mover,
        drivers/moves.py, over the simulated network and ZooKeeper), each move in a process
        of its own, which a fault may kill or pause (SIGSTOP) past its session timeout
        mid-move; the next mover takes up whatever move it finds under way. At the end,
        every move under way is finished."""
        self.operators(stop, self.one_mover, f"mover-{i}")

    def operators(self, stop: Any, one: Callable[[str, bool], None], name: str) -> None:
        """`one(process name, last)` every few seconds until `stop`, then once more as the
        last (which must finish what is under way); the check waits for the last to end."""
        with self.running():
            k = 0
            while not stop.is_set():
                world.sleep(self.rng.uniform(0.5, 3.0))
                one(f"{name}-{k}", False)
                k += 1
            one(f"{name}-{k}", True)

    def one_mover(self, proc: str, last: bool) -> None:
        done = world.event()
        paused: list[bool] = []

        def run() -> None:
            timeout_s = 30 if not last else 120
            t0 = world.monotonic()  # of the move under way
            try:
                zk = self.ens.client()
                zk.start()
                kv = registry.read_kv(zk)
                assert kv is not None
                todo = [(s, m.dest, m.leaving) for s, (m, _) in sorted(registry.read_moves(zk).items())]
                if not todo and not last and self.lost_dc is None:  # (none begun with a data center lost)
                    sets = registry.read_replica_sets(zk, kv)
                    shard = self.rng.randrange(SHARDS)
                    # A destination on a machine that none of the copies that stay is on, as
                    # the operator reads `midtown cluster placement`; now and then any other
                    # (the mover refuses it: check_rule)
                    copies = sets.of(shard)
                    pairs = [(lv, n) for lv in copies for n in NODES if n not in copies]
                    fits = [(lv, n) for lv, n in pairs
                            if failure_domains.allowed(copies, n, lv, self.node_domain)]
                    leaving, dest = self.rng.choice(fits if fits and self.rng.random() < 0.8 else pairs)
                    todo = [(shard, dest, leaving)]
                for shard, dest, leaving in todo:
                    self.counts["moves"] += 1
                    t0 = world.monotonic()
                    moves.move(zk, kv, shard, dest, leaving, 0, timeout_s, lambda _: None, _PeerCalls(self))
                    self.counts["moves done"] += 1
            except moves.MoveError as e:  # another move of the shard under way; or out of time
                self.counts["moves refused"] += 1
                # (or onto a machine holding a copy of the shard: check_rule's --to)
                self.counts["moves onto a copy's machine refused"] += str(e).startswith("--to:")
                if last:
                    self.violations.append(f"the last mover could not finish the moves: {e}")
            finally:
                done.set()
                took = world.monotonic() - t0
                if not paused and took > timeout_s + MOVER_LATE_S:  # (9)
                    self.violations.append(f"a mover took {took:.2f} s, past its --timeout {timeout_s}")
        with self.sched.process(proc):
            world.spawn("mover", run)
        if not last and self.rng.random() < 0.3:  # the mover killed or paused mid-move
            world.sleep(self.rng.uniform(0.05, 2.0))
            if not done.is_set():
                if self.rng.random() < 0.5:
                    self.sched.crash(proc)
                    self.counts["movers killed"] += 1
                    return
                paused.append(True)  # its time stopped with it: not held to its --timeout
                self.sched.pause(proc, self.rng.uniform(0.5, 2 * self.ens.session_timeout_s))
                self.counts["movers paused"] += 1
        while not done.is_set() and proc not in self.sched.dead:
            world.sleep(0.1)

    def start_coordinator(self) -> None:
        """The coordinator (coordinator/node.py Coordinator, as Coordinator.open wires it, on
        the simulated ZooKeeper and network, and its KV service as its gRPC server runs it),
        started in a process of its own."""
        proc = f"coordinator-{self.coordinator_inc}"
        self.coordinator_inc += 1
        with self.sched.process(proc):
            zk = self.ens.client()
            zk.start()
            kv = registry.read_kv(zk)
            assert kv is not None
            logs = CheckedLogClient(self.violations, self.acked_appends, zk=zk, link=_LogLink(self))
            c = Coordinator(0, COORDINATOR, logs, LOGS, kv,
                            storage_link=_StorageLink(self), log_map=registry.read_log_map(zk, kv, LOGS))
            c.answers._key = b"sim"  # its answer secrets, the same in every replay
            c.start()
            self.kv_handlers = Shell(c).handlers()[0]  # the KV service, as the gRPC server runs it
        self.coordinator, self.coordinator_zk, self.coordinator_proc = c, zk, proc

    def coordinator_faults(self, stop: Any) -> None:
        """The coordinator's process is killed now and then (its calls in flight are reset,
        new ones refused) and started again a little later: its clients' SDKs ride it out,
        sending each write again under the same request id."""
        with self.running():  # the check waits for its last restart
            while not stop.is_set():
                world.sleep(self.rng.uniform(2.0, 8.0))
                if stop.is_set():
                    break
                proc, zk = self.coordinator_proc, self.coordinator_zk
                assert proc is not None
                self.coordinator_proc = None
                self.sched.crash(proc)
                zk.started = False
                self.counts["coordinator crashes"] += 1

                def expire(zk: Any = zk) -> None:
                    world.sleep(self.ens.session_timeout_s)
                    self.ens.expire(zk)
                world.spawn("zk-expiry", expire)
                world.sleep(self.rng.uniform(0.2, 2.0))
                self.start_coordinator()

    def new_write(self) -> Write:
        i = len(self.writes)
        kind = self.rng.random()
        ops: tuple[Any, ...] = (Incr(b"n%d" % i, 1), Incr(b"c", 1))  # once-only key, shared counter
        if kind < 0.2:
            ops += (Put(b"v", b"%d" % i),)
        elif kind < 0.3:
            ops = (Cas(b"v", expect_absent=True, new_value=b"first %d" % i),)
        elif kind < 0.5:
            ops = (Put(b"p%d" % i, b"%d" % i),)  # a plain put: answered at the log's acknowledgement
        # (the record as the coordinator makes it, for its shard; the SDK makes the request id)
        rec = record_for(self.dataset, b"", COORDINATOR, self.rng.choice(PKEYS), ops, b"", SHARDS)
        w = Write(rec)
        self.writes.append(w)
        return w

    def sdk(self, name: str, dc: str | None = None) -> Client:
        """An application's SDK client (midtown/client.py, its retries and coalescing) on
        the simulated network (_KvStub); each request id it sends is kept under `name`."""
        return Client([COORDINATOR], timeout=WRITE_TIMEOUT_S, link=lambda addr: _KvStub(self, addr, name),
                      dc=dc)

    def cluster_up(self, stop: Any) -> None:
        """Until every storage node has started (as an application starts once its cluster
        is up: the first start's elections and bootstrap checks take seconds)."""
        while not stop.is_set() and not all(n.state.started for n in self.storage.values()):
            world.sleep(0.1)

    def appender(self, name: str, stop: Any) -> None:
        """An application writing through the SDK, one write at a time; the SDK sends a
        write whose outcome was unknown again under the same request id (broken: a new one)."""
        with self.running():
            db = self.sdk(name)
            self.cluster_up(stop)
            while not stop.is_set():
                self.write_once(db, name, self.new_write())
                world.sleep(self.rng.uniform(0, 0.05))

    def write_once(self, db: Client, name: str, w: Write) -> None:
        ops, pk, ds = w.record.ops, w.record.partition_key, self.dataset.name
        self.sent[name] = w.request_ids
        start = world.monotonic()
        try:
            if len(ops) == 1 and isinstance(ops[0], Put):
                db.put(ds, pk, ops[0].local_key, ops[0].value)
            elif len(ops) == 1 and isinstance(ops[0], Cas):
                db.cas(ds, pk, ops[0].local_key, ops[0].new_value, expect_absent=True)
            else:
                db.batch(ds, [SdkOp.incr(pk, o.local_key, o.delta) if isinstance(o, Incr)
                              else SdkOp.put(pk, o.local_key, o.value) for o in ops])
            w.acked = True
            w.done_at = world.monotonic()
        except (errors.Unavailable, errors.DeadlineExceeded):
            self.appends_failed += 1  # the outcome stayed unknown through the SDK's retries
        except errors.MidtownError as e:
            self.violations.append(f"write {w.request_ids!r} refused: {type(e).__name__}: {e}")
        finally:
            took = world.monotonic() - start
            if took > WRITE_TIMEOUT_S + 0.1:
                self.violations.append(f"a write took {took:.2f} s, past its {WRITE_TIMEOUT_S:g} s deadline")

    def ingester(self, stop: Any) -> None:
        """(ingest) An ingestion pipeline's tasks, one after another: each writes a few events
        (an increment of a key of its own, by event id: Client.write_many, the Spark
        connector's write), and a task whose outcome is unknown runs again, whole, under a
        new request id, as Spark runs a failed task again; now and then one that succeeded
        runs again too (a speculative copy). Checked: every event counts once if an
        attempt was told it applied, at most once otherwise (check_events)."""
        with self.running():
            db = self.sdk("ingest")
            self.cluster_up(stop)
            while not stop.is_set():
                first = len(self.events)
                batch = [(b"ev%d" % i, self.rng.choice(PKEYS))
                         for i in range(first, first + self.rng.randint(1, 5))]
                for eid, pk in batch:
                    self.events[eid] = (pk, False)
                writes = [SdkWrite.incr(pk, eid, 1, event_id=eid) for eid, pk in batch]
                while not stop.is_set():
                    self.counts["ingest attempts"] += 1
                    try:
                        outcomes = db.write_many(self.dataset.name, writes, timeout=WRITE_TIMEOUT_S)
                    except (errors.Unavailable, errors.DeadlineExceeded):
                        continue  # the task failed: it runs again
                    except errors.MidtownError as e:
                        self.violations.append(f"an ingestion task was refused: {type(e).__name__}: {e}")
                        return
                    for (eid, pk), o in zip(batch, outcomes):
                        if o.status in ("applied", "duplicate"):
                            self.events[eid] = (pk, True)
                        else:
                            self.violations.append(f"event {eid!r}: its write {o.status}")
                    if self.rng.random() >= 0.2:  # else a speculative copy of the task runs too
                        break
                world.sleep(self.rng.uniform(0, 0.1))

    def linearizable_client(self, cid: int, db: Client, stop: Any) -> None:
        """One thread of an application whose threads share an SDK client `db` (their
        operations coalesced into Many calls): puts, deletes, check-and-sets and strong
        gets on a few keys the threads share, each with a deadline of 1 to 4 s, its call
        and return times (its return unknown when the SDK gave up). Each key's history
        must linearize (tests/linearizability.py, the checker the real-process tests use),
        and each operation end by its deadline. (7)"""
        with self.running():
            ds = self.dataset.name
            self.cluster_up(stop)
            while not stop.is_set():
                k = self.rng.choice(HOT)
                kind = self.rng.choice(["put", "get", "get", "cas", "delete"])
                v = bytes([self.rng.randrange(4)])
                exp = bytes([self.rng.randrange(4)]) if self.rng.random() < 0.7 else None
                arg: Any = v if kind == "put" else (exp, v) if kind == "cas" else None
                out: Any = None
                deadline_s = self.rng.uniform(*DEADLINES_S)
                t0 = world.monotonic()
                try:
                    if kind == "put":
                        db.put(ds, k, b"v", v, timeout=deadline_s)
                    elif kind == "delete":
                        db.delete(ds, k, b"v", timeout=deadline_s)
                    elif kind == "get":
                        got = db.get(ds, k, b"v", timeout=deadline_s)
                        out = None if got is None else got.value
                    else:
                        out = (db.cas(ds, k, b"v", v, expect_absent=True, timeout=deadline_s) if exp is None
                               else db.cas(ds, k, b"v", v, expected=exp, timeout=deadline_s)).succeeded
                    t1 = world.monotonic()
                except (errors.Unavailable, errors.DeadlineExceeded):
                    t1 = INF
                except errors.MidtownError as e:
                    self.violations.append(f"a {kind} of {k!r} refused: {type(e).__name__}: {e}")
                    continue
                finally:
                    took = world.monotonic() - t0
                    if took > deadline_s + LATE_S:
                        self.violations.append(f"a {kind} of {k!r} took {took:.2f} s, past its "
                                               f"{deadline_s:.2f} s deadline")
                if kind != "get" or t1 != INF:  # a read with no answer constrains nothing
                    self.histories.setdefault(k, []).append(Operation(cid, t0, t1, kind, arg, out))
                world.sleep(self.rng.uniform(0, 0.05))

    def after_faults(self) -> None:
        """(8) Once every fault has ended, an operation on each shared key succeeds within
        HEALED_S (the first may wait out an election, or a node's start): none stays
        blocked behind the faults."""
        ds, give_up = self.dataset.name, world.monotonic() + HEALED_S
        for k in HOT:
            while True:
                t0 = world.monotonic()
                try:
                    self.shared.put(ds, k, b"v", b"healed", timeout=DEADLINES_S[1])
                except (errors.Unavailable, errors.DeadlineExceeded) as e:
                    self.histories.setdefault(k, []).append(Operation(-1, t0, INF, "put", b"healed"))
                    if world.monotonic() < give_up:
                        continue
                    self.violations.append(f"a put of {k!r} still failed {HEALED_S:g} s after the last "
                                           f"fault: {e}")
                    return
                self.histories.setdefault(k, []).append(
                    Operation(-1, t0, world.monotonic(), "put", b"healed"))
                break

    def strong_reader(self, stop: Any) -> None:
        """Strong reads through the SDK (the coordinator's ReadIndex round, then a replica
        that has applied past the index; or through the log): each sees every write
        answered before it began."""
        db = self.sdk("reader")
        while not stop.is_set():
            world.sleep(self.rng.uniform(0.05, 0.3))
            start = world.monotonic()
            done = [i for i, w in enumerate(self.writes) if w.done_at is not None and w.done_at < start
                    and counted(w, i)]
            if not done:
                continue
            i = self.rng.choice(done)
            w = self.writes[i]
            try:
                got = db.get(self.dataset.name, w.record.partition_key, b"n%d" % i)
            except (errors.Unavailable, errors.DeadlineExceeded):
                continue
            except errors.MidtownError as e:
                self.violations.append(f"a strong read refused: {type(e).__name__}: {e}")
                continue
            self.counts["strong reads"] += 1
            if got is None or got.value != b"1":
                self.violations.append(f"a strong read read n{i} = {None if got is None else got.value!r}, "
                                       f"not the 1 of write {w.request_ids!r}, answered before it began")


    def bounded_reader(self, stop: Any) -> None:
        """Bounded-staleness reads (coordinator/near_reads.py) from the coordinator's data
        center, bounds from within the clocks' offset to a few seconds: each sees every
        write answered more than its bound before it began, whether a replica near it served
        it (its answer says the bound) or the writer did (it says 0)."""
        rng = random.Random(f"bounded/{self.seed}")  # its own: the other tasks' draws stay the seed's
        db = self.sdk("bounded-reader", dc=f"dc{self.coordinator_dc}" if self.dcs else None)
        while not stop.is_set():
            world.sleep(rng.uniform(0.05, 0.3))
            bound_ms = rng.choice((400, 800, 1500, 3000))
            start = world.monotonic()
            done = [i for i, w in enumerate(self.writes) if w.done_at is not None
                    and w.done_at < start - bound_ms / 1000 and counted(w, i)]
            if not done:
                continue
            # Mostly the last write answered before the bound: the one a stale replica misses first
            i = done[-1] if rng.random() < 0.7 else rng.choice(done)
            w = self.writes[i]
            try:
                got = db.get(self.dataset.name, w.record.partition_key, b"n%d" % i, consistency="bounded",
                             max_staleness_ms=bound_ms)
            except (errors.Unavailable, errors.DeadlineExceeded):
                continue
            except errors.MidtownError as e:
                self.violations.append(f"a bounded read refused: {type(e).__name__}: {e}")
                continue
            self.counts["bounded reads"] += 1
            self.counts["bounded reads served near"] += got is not None and got.staleness_bound_ms == bound_ms
            if got is None or got.value != b"1":
                read = None if got is None else got.value
                self.violations.append(
                    f"a read bounded by {bound_ms} ms read n{i} = {read!r}, not the 1 of write "
                    f"{w.request_ids!r}, answered {start - (w.done_at or 0):.3f} s before it began")


def run(seed: int, cfg: Config | None = None, broken: str = "",
        faults: Faults | None = None) -> tuple[Result, dict[str, int]]:
    """One run, with `faults` (None: drawn from the seed, `drawn`) and the `broken` variant
    (of BROKEN, or of the log servers', writers.BROKEN)."""
    sim = NodeSim(seed, cfg, broken, faults)
    rules = variants.RULES.get(broken, []) if broken in BROKEN else writers.broken_rules(sim, broken)
    try:
        with swapped(rules):
            r = sim.sched.run(sim.main)
        r.failures = sim.sched.failures + sim.ens.errors
        # What every client was told, as one number: a replay tells the same.
        told = zlib.crc32(repr(sorted(sim.told.items())).encode())
        counts = {**sim.counts, "writes": len(sim.writes), "answered": len(sim.answered),
                  **{f"runs with {'' if on is not False else 'no '}{k}": 1
                     for k, on in dataclasses.asdict(sim.faults).items()
                     if on != Faults.__dataclass_fields__[k].default},
                  "restarts": len(sim.restarts), "results crc": told}
        return r, counts
    finally:
        for db in list(sim.disk.dbs.values()):
            if not db.closed:
                db.close()
        shutil.rmtree(sim.dir, ignore_errors=True)


def _yields() -> float:
    """Writers given up for a preferred data center so far, in this process (every log
    server of the simulation counts into log/metrics.py's counter)."""
    return sum(s.value for m in PREFERENCE_YIELDS.collect() for s in m.samples if s.name.endswith("_total"))
