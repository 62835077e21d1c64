"""The log's writers as the servers run them, in the seeded simulation (issue 51): the real
`WriterDriver` (log/driver.py: its thread, inbox, ticks, LAC pushes and heartbeats) around
the real writer core, replicas' real cores, the log's metadata written through log/zk.py on
the simulated ZooKeeper, all on the simulator's world backend (tests/sim/scheduler.py), with
a network that delays, drops and duplicates the writers' messages and their replies.
harness.py drives the writer core itself; here the driver does, so its loop is under test.

A client appends all the time; writers crash (their process killed mid-step: the driver's
thread dies wherever it is) and another server claims the log with the next epoch, as the
election does. The check: every append acknowledged by any writer is, at the end, at its
position with its payload on the replicas, and no position has two different copies."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from log import reading
from log import zk as zkpaths
from log.driver import Busy, WriterDriver, WriterFailed
from log.messages import AddEntries, Fence
from log.metadata import LogMetadata
from log.replica import ReplicaCore
from log.store import MemStore
from log.writer import ChangeEnsemble, Writer
from runtime import world
from tests.sim.scheduler import Scheduler
from tests.sim.zookeeper import Client, Ensemble

LOG = 0
SERVERS = (0, 1, 2)


@dataclass
class Config:
    seconds: float = 20.0  # simulated
    crashes: int = 3  # writers killed, each followed by a claim by another server
    clients: int = 3
    isolations: int = 6  # a replica cut off from everyone for up to a second
    drop: float = 0.05
    duplicate: float = 0.05
    delay_max_s: float = 0.02
    broken: str = ""  # "ends-at-lac": a broken recovery (_EndsAtLac)


@dataclass
class Result:
    violations: list[str]
    acked: int
    writers: int
    switches: int
    simulated_s: float
    failures: list[str] = field(default_factory=list)


class _EndsAtLac(Writer):
    """Broken: a recovery that seals the old segment at the highest LAC its fence quorum
    reported, without reading what lies past it: appends acknowledged before their LAC
    reached the replicas are lost."""

    def _decide(self) -> None:
        for r in self._quorum:
            self._reads[r] = {}
        super()._decide()


class _Host:
    """What a writer's driver needs from its server (log/driver.py WriterHost), wired to
    the simulated network and ZooKeeper instead of gRPC and kazoo."""

    def __init__(self, sim: WriterSim, server: int, zk: Client) -> None:
        self.sim, self.server, self.zk = sim, server, zk

    def zk_ok(self) -> bool:
        return self.zk.connected

    def write_metadata(self, meta: LogMetadata, version: int) -> tuple[bool, int]:
        v = zkpaths.cas_metadata(self.zk, meta, version)
        return (False, -1) if v is None else (True, v)

    def announce_writer(self, log_id: int, epoch: int) -> None:
        pass

    def notify(self, log_id: int) -> None:
        pass

    def send(self, driver: WriterDriver, to: int, msg: Any) -> None:
        self.sim.deliver(self.server, driver, to, msg)

    def dispatch_reply(self, core: Writer, replica: int, req: Any, rep: Any) -> None:
        core.on_reply(replica, req, rep)

    def change_ensemble(self, log_id: int, change: ChangeEnsemble) -> tuple[LogMetadata | None, int]:
        return None, -1  # no ensemble changes here: the pool is the ensemble


class WriterSim:
    def __init__(self, seed: int, cfg: Config | None = None) -> None:
        self.cfg = cfg or Config()
        self.sched = Scheduler(seed)
        self.rng = self.sched.rng
        self.ens = Ensemble()
        self.stores = {s: MemStore() for s in SERVERS}
        self.replicas = {s: ReplicaCore(s, self.stores[s], log_count=1) for s in SERVERS}
        self.acks: list[tuple[int, int, bytes]] = []  # (epoch, position, payload)
        self.writers: list[tuple[str, WriterDriver]] = []
        self.violations: list[str] = []
        self.cut_until = {s: 0.0 for s in SERVERS}  # a replica isolated until then

    # --- the network --------------------------------------------------------------------

    def deliver(self, src: int, driver: WriterDriver, to: int, msg: Any) -> None:
        """`msg` to replica `to` and its reply back, each after a delay, each perhaps
        dropped or delivered twice; a reply to a dead writer is lost with it."""
        writer_proc = self.sched._me().process

        def there() -> None:
            world.sleep(self.rng.uniform(0, self.cfg.delay_max_s))
            if world.monotonic() < self.cut_until[to]:
                return
            core = self.replicas[to]
            rep = (core.on_fence(msg) if isinstance(msg, Fence) else core.on_add(msg)
                   if isinstance(msg, AddEntries) else core.on_read_range(msg))
            for _ in range(self._copies()):
                with self.sched.process(writer_proc):
                    world.spawn("reply", lambda: back(rep))

        def back(rep: Any) -> None:
            world.sleep(self.rng.uniform(0, self.cfg.delay_max_s))
            if world.monotonic() >= self.cut_until[to]:
                driver.reply(to, msg, rep)

        for _ in range(self._copies()):
            with self.sched.process(f"replica-{to}"):
                world.spawn("request", there)

    def _copies(self) -> int:
        r = self.rng.random()
        return 0 if r < self.cfg.drop else 2 if r < self.cfg.drop + self.cfg.duplicate else 1

    # --- the roles ----------------------------------------------------------------------

    def claim(self, server: int) -> WriterDriver | None:
        """`server` takes the log: the next epoch by a versioned write, a driver started."""
        proc = f"writer-{server}-{len(self.writers)}"
        with self.sched.process(proc):
            zk = self.ens.client()
            zk.start()
            meta, version = zkpaths.read_metadata(zk, LOG)
            new = meta.bump(server)
            v = zkpaths.cas_metadata(zk, new, version)
            if v is None:
                return None
            cls = _EndsAtLac if self.cfg.broken == "ends-at-lac" else Writer
            core = cls(LOG, new.epoch, new, v, SERVERS, time_marks=True)
            d = WriterDriver(_Host(self, server, zk), core)
            d.start()
        self.writers.append((proc, d))
        return d

    def client(self, name: str, stop: Any) -> None:
        n = 0
        while not stop.is_set():
            d = self.writers[-1][1]
            payload = f"{name}-{n}".encode()
            n += 1
            try:
                r = d.submit([payload]).result(timeout=5)
                self.acks.append((r.epoch, r.first_position, payload))
            except (WriterFailed, Busy, TimeoutError):
                pass  # an unknown outcome: not acknowledged, so not checked
            world.sleep(self.rng.uniform(0, 0.05))

    def main(self) -> Result:
        self.admin = self.ens.client()
        self.admin.start()
        zkpaths.create_cluster(self.admin, 1, list(SERVERS))
        self.claim(0)
        stop = world.event()
        for c in range(self.cfg.clients):
            world.spawn(f"client-{c}", lambda c=c: self.client(f"c{c}", stop))
        world.spawn("isolations", self.isolate)
        step = self.cfg.seconds / (self.cfg.crashes + 1)
        for _ in range(self.cfg.crashes):
            world.sleep(self.rng.uniform(0.5 * step, step))
            proc, _ = self.writers[-1]
            self.sched.crash(proc)
            while self.claim(self.rng.choice(SERVERS)) is None:
                world.sleep(0.1)
        world.sleep(step)
        stop.set()
        world.sleep(1)  # the last writer settles: its LAC reaches the replicas
        self.check()
        return Result(self.violations, len(self.acks), len(self.writers), self.sched.switches,
                      self.sched.now)

    def isolate(self) -> None:
        for _ in range(self.cfg.isolations):
            world.sleep(self.rng.uniform(0, self.cfg.seconds / self.cfg.isolations))
            s = self.rng.choice(SERVERS)
            self.cut_until[s] = world.monotonic() + self.rng.uniform(0.1, 1.0)

    def check(self) -> None:
        meta, _ = zkpaths.read_metadata(self.admin, LOG)
        last = self.writers[-1][1].core
        end = reading.committed_end(meta, last.lac)
        for epoch, p, payload in self.acks:
            if p > end:
                self.violations.append(f"acked position {p} (epoch {epoch}) beyond the end {end}")
                continue
            seg = meta.segment_of(p)
            copies = {e.payload for s in SERVERS
                      if seg is not None and (e := self.stores[s].get(LOG, seg.epoch, p)) is not None}
            if copies != {payload}:
                self.violations.append(f"acked position {p} (epoch {epoch}) holds {copies}, not {payload!r}")


def run(seed: int, cfg: Config | None = None) -> Result:
    sim = WriterSim(seed, cfg)
    r = sim.sched.run(sim.main)
    r.failures = sim.sched.failures + sim.ens.errors
    return r
