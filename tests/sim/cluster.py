"""The log simulation with storage nodes and a coordinator's answer-taking beside it.

The log is tests/sim/harness.py's (its writers, replicas, network, ZooKeeper, crashes and
truncation, with its own invariants checked as before). Beside it run real storage nodes:
`storage_node.node.StorageNode` built from its parts (a RocksDB store in a temporary
directory, the topology, replica sets of 3 among 4 nodes; no ZooKeeper, no socket), each
applying what the simulated log has committed through its own apply loop
(storage_node/apply_loop.py), in chunks read from one live log replica at a time, and
crashed and restarted from its disk at random: either its process dies (its store closed,
all it wrote kept) or its machine loses power (the store is on the simulator's disk,
tests/sim/disk.py, which then loses a suffix of the batches written since the last sync). The records are a
coordinator's (coordinator/records.py), their answers go to the coordinator's answer-taker
(coordinator/answers.py: members only, digests compared), and a write whose append went
unanswered is appended again with the same request id, as the coordinator does when the
SDK retries. The nodes publish their durable positions into the log as position records,
and the log is truncated below the lowest of the positions the nodes have applied from
it (storage_node/truncation.py), as the storage nodes' bookkeeping does.

Invariants, beside the log's:
  (1) every answer to a request id, from any replica and for any append of it, is the
      outcome of its first append in the log (position, ops' results, shard digest), as a
      model applying the committed log in order says (tests/sim/store.py, the same apply step
      without RocksDB or the apply loop);
  (2) exactly once: each logical write counts at most once, and once if it was answered;
  (3) a node's position survives its crash: it never restarts below a position it published;
  (4) no node finds the next position it needs truncated;
  (5) at the end, every replica of each shard has the model's digest and values.

And strong reads as the coordinator makes them (coordinator/node.py read_request and
read_round): a ReadIndex round over the log's replicas (log/read_index.py, with metadata
cached a while ago), then the storage node's read (storage_node/reads.py) at a replica
that has applied past the index, or none if it has not:
  (6) a strong read sees every write answered before it began.

Broken variants, for the checker to catch: "truncate-ahead" truncates anywhere below the
highest acknowledged position (ignoring the nodes); "retry-new-id" retries a write under a
new request id; "read-anywhere" reads a replica without asking it to have applied past the
read index; "publish-unsynced" publishes the position applied so far instead of the one
made durable (storage_node/bookkeeping.py durable_positions)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from catalog.datasets import Dataset
from catalog.registry import KvTopology
from catalog.replica_sets import spread
from coordinator.answers import Answers
from coordinator.node import Coordinator
from coordinator.records import record_for
from log import reading
from log.entry import Entry
from midtown_pb import kv_pb2 as pb
from record import codec
from record.answer import Answer
from record.model import Behind, Cas, Get, Incr, Position, Put, Record, RecordResult
from runtime import inprocess
from storage_node import keys
from storage_node.bookkeeping import durable_positions
from storage_node.callbacks import Callbacks, ProcessAnswers
from storage_node.node import Parts, StorageNode
from storage_node.store import NodeStore
from storage_node.truncation import needs_publish, truncation_point
from tests.sim.disk import Disk
from tests.sim.harness import LOG, Config, Sim
from tests.sim.store import MemState

DATASET = Dataset("d", incarnation=1)
SHARDS = 6
NODES = (0, 1, 2, 3)
KV = KvTopology(shards=SHARDS, storage_nodes=NODES, logs=1)
SETS = replace(spread(SHARDS, NODES, 3), version=1)  # each node holds some of the shards
COORDINATOR = "sim-coordinator"  # the records' callback: the answers come to the sim's Answers
PKEYS = [b"k%d" % i for i in range(10)]
BROKEN = ("truncate-ahead", "retry-new-id", "read-anywhere", "publish-unsynced")


@dataclass
class Write:
    """A logical write: one request, perhaps appended more than once."""
    request_id: bytes
    record: Record
    payload: bytes
    tok: int  # its first append
    answered: bool = False


def counted(w: Write, i: int) -> bool:
    """Whether write `i` increments its own key, n<i> (a check-and-set alone does not)."""
    return any(isinstance(op, Incr) and op.local_key == b"n%d" % i for op in w.record.ops)


class _NoLogs:
    """A component's log client (and ZooKeeper session) where the simulation carries the
    log: never called."""

    def __init__(self) -> None:
        self.zk = self

    def __getattr__(self, name: str) -> Any:
        def call(*a: Any, **k: Any) -> Any:
            raise AssertionError(f"a simulated component called its log client's {name}")
        return call


class _Taker:
    """The coordinator's side of the in-process answer port: every answer is kept for the
    checks, then handed to the coordinator's Answers."""

    def __init__(self, sim: ClusterSim) -> None:
        self.sim = sim

    def deliver(self, results: Sequence[RecordResult]) -> None:
        for r in results:
            self.sim.answered.setdefault(r.request_id, []).append(r)
        self.sim.answers.deliver(list(results))


class SimNode:
    """One storage node: its directory survives its crashes, its objects do not."""

    def __init__(self, sim: ClusterSim, node_id: int) -> None:
        self.sim = sim
        self.node_id = node_id
        self.dir = sim.dir / f"node-{node_id}"
        self.dir.mkdir()
        self.node: StorageNode | None = None
        self.published = -1  # the highest position it published (after a sync)
        self.start()

    def start(self) -> None:
        store = NodeStore(self.path, open_db=self.sim.disk.open)
        parts = Parts(_NoLogs(), store, KV, 1, SETS, str(self.dir))  # type: ignore[arg-type]
        self.node = StorageNode(self.node_id, f"sim-node-{self.node_id}", parts, on_fatal=self._fatal,
                                answers=ProcessAnswers(self.sim.answer_port, Callbacks()))
        at = self.position
        if at < self.published:  # (3)
            self.sim.violations.append(f"node {self.node_id} restarted at {at}, below the {self.published} "
                                       f"it published")

    def _fatal(self, code: int, why: str) -> None:
        self.sim.violations.append(f"node {self.node_id} stopped: {why}")

    @property
    def path(self) -> str:
        return str(self.dir / "state.db")

    def crash(self, power: bool = False) -> int:
        """The node's process dies (what it wrote survives), or its machine loses power
        (what it wrote since its last sync may not, tests/sim/disk.py): returns the
        batches lost."""
        assert self.node is not None
        self.node = None
        if power:
            return self.sim.disk.power_loss(self.path, self.sim.rng)
        self.sim.disk.dbs.pop(self.path).close()
        return 0

    @property
    def alive(self) -> bool:
        return self.node is not None

    @property
    def position(self) -> int:
        assert self.node is not None
        return self.node.state.positions[LOG][0]


class ClusterSim(Sim):
    def __init__(self, seed: int, cfg: Config | None = None, broken: str = "") -> None:
        assert broken in ("",) + BROKEN, broken
        super().__init__(seed, cfg)
        self.broken = broken
        self.dir = Path(tempfile.mkdtemp(prefix="midtown-sim-"))
        self.disk = Disk()
        self.answers = Answers(lambda: NODES)
        self.coordinator = Coordinator(0, COORDINATOR, _NoLogs(), 1, KV)  # type: ignore[arg-type]
        self.answer_port: inprocess.Local[Any] = inprocess.Local().bind([COORDINATOR], _Taker(self))
        self.answered: dict[bytes, list[RecordResult]] = {}
        self.writes: list[Write] = []
        self.waiters: dict[bytes, Any] = {}
        self.committed: dict[int, Entry] = {}  # what the nodes read, by position
        self.retry_next: list[bytes] = []  # payloads the next append carries instead of new ones
        self.nodes = {n: SimNode(self, n) for n in NODES}
        self.counts = {"writes": 0, "retries": 0, "node crashes": 0, "power losses": 0, "batches lost": 0,
                       "published": 0, "truncations": 0,
                       "applied chunks": 0, "strong reads": 0}
        self.reading: list[tuple[int, pb.ReadRequest, int, int]] = []  # strong reads waiting at a replica

    # ------------------------------------------------------------ the coordinator's side
    def new_payloads(self, tok: int) -> list[bytes]:
        if self.retry_next:
            out, self.retry_next = self.retry_next, []
            return out
        out = []
        for _ in range(self.rng.randrange(1, 4)):
            n = len(self.writes)
            rid = b"r%d" % n
            kind = self.rng.random()
            ops: tuple[Any, ...] = (Incr(b"n%d" % n, 1), Incr(b"c", 1))  # once-only key, shared counter
            if kind < 0.2:
                ops += (Put(b"v", b"%d" % n),)
            elif kind < 0.3:
                ops = (Cas(b"v", expect_absent=True, new_value=b"first %d" % n),)
            rec = record_for(DATASET, rid, COORDINATOR, self.rng.choice(PKEYS), ops, b"", SHARDS)
            payload = codec.record_to_bytes(rec)
            w = Write(rid, rec, payload, tok)
            [self.waiters[rid]] = self.answers.expect([(LOG, rec.shard, rid)])
            self.writes.append(w)
            out.append(payload)
        self.counts["writes"] += len(out)
        return out

    def retry(self) -> None:
        """An unanswered write appended again, as the coordinator does when the SDK retries
        after an unknown outcome: with the same request id (a new one, broken)."""
        waiting = [w for w in self.writes if not self.waiters[w.request_id].done()]
        if not waiting:
            return
        w = self.rng.choice(waiting)
        payload = w.payload
        if self.broken == "retry-new-id":
            rec = replace(w.record, request_id=w.request_id + b"'")
            payload = codec.record_to_bytes(rec)
        if self._append(payload):
            self.counts["retries"] += 1

    def _append(self, payload: bytes) -> bool:
        """Append `payload` alone through a live writer, as the log's append event does
        (False: no writer took it)."""
        self.retry_next = [payload]
        self.append()
        taken = not self.retry_next
        self.retry_next = []
        return taken

    # ------------------------------------------------------------ the storage nodes
    def _live_replica(self) -> int | None:
        alive = [s for s, c in self.replicas.items() if c is not None]
        return self.rng.choice(alive) if alive else None

    def _read_from(self, s: int, start: int, n: int, end: int | None = None) -> list[Entry] | None:
        """Up to `n` committed entries from `start`, as server `s` has them (None: it has
        truncated past `start`); `end`: the last committed position, if known (else as far
        as the server knows the log committed)."""
        core = self.replicas[s]
        assert core is not None
        meta = self.zk.meta
        seg = meta.last_segment
        if seg is None:
            return []
        if end is None:
            end = reading.committed_end(meta, core.lac(LOG, seg.epoch))
        if start < core.first(LOG):
            return None
        out = []
        for p in range(start, min(end, start + n - 1) + 1):
            sg = meta.segment_of(p)
            e = self.stores[s].get(LOG, sg.epoch, p) if sg is not None else None
            if e is None:
                break  # the server would fetch it from a peer: next time
            out.append(e)
        return out

    def _apply(self, sn: SimNode, entries: list[Entry]) -> None:
        assert sn.node is not None
        for e in entries:
            seen = self.committed.setdefault(e.position, e)
            if seen != e:
                self.violations.append(f"position {e.position} read as {seen} and later as {e}")
        sn.node.applier.apply([(LOG, entries)])
        self.counts["applied chunks"] += 1

    def node_tail(self) -> None:
        """A live node reads the next committed entries from a live replica and applies them."""
        alive = [sn for sn in self.nodes.values() if sn.alive]
        s = self._live_replica()
        if not alive or s is None:
            return
        sn = self.rng.choice(alive)
        entries = self._read_from(s, sn.position, self.rng.randrange(1, 12))
        if entries is None:  # (4)
            self.violations.append(f"node {sn.node_id} needs position {sn.position}, truncated on "
                                   f"server {s}")
            return
        if entries:
            self._apply(sn, entries)

    def crash_node(self) -> None:
        alive = [sn for sn in self.nodes.values() if sn.alive]
        if alive:
            sn = self.rng.choice(alive)
            power = self.rng.random() < 0.5
            lost = sn.crash(power)
            self.counts["power losses" if power else "node crashes"] += 1
            self.counts["batches lost"] += lost
            self.trace.append(f"t={self.now} {'power loss' if power else 'crash'} node {sn.node_id}"
                              + (f" ({lost} unsynced batches lost)" if power else ""))

    def restart_node(self) -> None:
        dead = [sn for sn in self.nodes.values() if not sn.alive]
        if dead:
            sn = self.rng.choice(dead)
            sn.start()
            self.trace.append(f"t={self.now} restart node {sn.node_id} at {sn.position}")

    def publish(self) -> None:
        """A node appends its durable position, as its bookkeeping does (storage_node/bookkeeping.py)."""
        alive = [sn for sn in self.nodes.values() if sn.alive]
        if not alive:
            return
        sn = self.rng.choice(alive)
        assert sn.node is not None
        s = sn.node.state
        if not needs_publish(s.last_data.get(LOG), sn.published if sn.published >= 0 else None):
            return
        # Only a durable position is published (the bookkeeping's rule); broken: the
        # position applied so far, perhaps not synced yet.
        at = s.positions[LOG][0] if self.broken == "publish-unsynced" else durable_positions(s)[LOG]
        if not self._append(codec.record_to_bytes(Record(b"", "", "", 0, b"", (Position(sn.node_id, at),)))):
            return
        sn.published = max(sn.published, at)
        self.counts["published"] += 1

    def truncate(self) -> None:
        """Below the lowest position every holder published, as a live node reads them
        from the log (its member positions); anywhere below the acknowledged, broken."""
        if self.broken == "truncate-ahead":
            super().truncate()
            return
        alive = [sn for sn in self.nodes.values() if sn.alive]
        if not alive:
            return
        sn = self.rng.choice(alive)
        assert sn.node is not None
        low = truncation_point(sn.node.state.member_positions, LOG, SETS.nodes_of_log(LOG, 1))
        if low is None or low <= self.zk.truncated_before:
            return
        self.zk.truncated_before = low
        self.counts["truncations"] += 1
        self.trace.append(f"t={self.now} truncate before {low} (node {sn.node_id}'s view)")
        for core in self.replicas.values():
            if core is not None:
                core.truncate(LOG, low)

    def strong_read(self) -> None:
        """A strong read of a write answered before it began: the coordinator's ReadIndex
        round, then a replica's read from past the index (storage_node/reads.py), which
        waits until the replica has applied that far (finish_reads)."""
        done = [i for i, w in enumerate(self.writes) if self.waiters[w.request_id].done() and counted(w, i)]
        if not done:
            return
        i = self.rng.choice(done)
        cached = self.rng.choice(self.zk.history[-4:])  # the coordinator's metadata, maybe stale
        idx = self._read_index(cached, fresh=False)
        if idx == "stale":
            idx = self._read_index(self.zk.meta, fresh=True)
        if idx is None or isinstance(idx, str):
            return  # too few replicas answered: the read goes through the log
        w = self.writes[i]
        log_id, req = self.coordinator.read_request(DATASET, w.record.partition_key, Get(b"n%d" % i))
        assert log_id == LOG
        req.min_position = 0 if self.broken == "read-anywhere" else idx + 1
        holders = [sn.node_id for sn in self.nodes.values() if sn.alive and sn.node_id in SETS.of(req.shard)]
        if holders:
            self.reading.append((i, req, self.rng.choice(holders), idx))

    def finish_reads(self) -> None:
        """Waiting reads, at their replicas: answered once it has applied past the index;
        given up (the coordinator asks another) if the replica crashed."""
        waiting = []
        for i, req, node_id, idx in self.reading:
            sn = self.nodes[node_id]
            if sn.node is None:
                continue
            try:
                r = sn.node.reads.read(req)
            except Behind:
                waiting.append((i, req, node_id, idx))
                continue
            self.counts["strong reads"] += 1
            if not r.result.found or r.result.value.value != b"1":  # (6)
                self.violations.append(f"a strong read at node {node_id} (position {r.position}, index "
                                       f"{idx}) missed write {self.writes[i].request_id!r}, answered "
                                       f"before it")
        self.reading = waiting

    def events(self) -> list[tuple[Callable[[], None], float]]:
        return super().events() + [
            (self.node_tail, 20), (self.crash_node, 0.4), (self.restart_node, 1), (self.publish, 6),
            (self.truncate, 1.5), (self.retry, 1.5), (self.strong_read, 3), (self.finish_reads, 3)]

    # ------------------------------------------------------------ the end
    def run(self) -> list[str]:
        try:
            return super().run()
        finally:
            self.counts["answered"] = sum(1 for f in self.waiters.values() if f.done())
            for sn in self.nodes.values():
                if sn.alive:
                    sn.crash()
            shutil.rmtree(self.dir, ignore_errors=True)

    def _check(self) -> None:
        super()._check()
        if self.violations:
            return
        end = reading.committed_end(self.zk.meta, self.final_writer.lac)
        for sn in self.nodes.values():  # every node back, and caught up with the whole log
            if not sn.alive:
                sn.start()
            for _ in range(10_000):
                if sn.position > end or self.violations:
                    break
                got = [self._read_from(s, sn.position, 50, end) for s in self.servers]
                if all(g is None for g in got):  # (4)
                    self.violations.append(f"node {sn.node_id} needs position {sn.position}, truncated")
                    break
                entries = max((g for g in got if g), key=len, default=[])
                if not entries:
                    self.violations.append(f"committed position {sn.position} is on no server")
                    break
                self._apply(sn, entries)
        if self.violations:
            return
        self.finish_reads()  # every node has applied the whole log: what waits for more never comes
        model = MemState()
        first: dict[bytes, RecordResult] = {}
        for p in range(end + 1):
            e = self.committed.get(p)
            if e is None:
                self.violations.append(f"no node read committed position {p}")
                return
            if not e.payload:
                continue
            rec = codec.record_from_bytes(e.payload)
            if not rec.request_id:  # a published position
                continue
            r = model.run(rec, p, e.timestamp_ms)
            first.setdefault(rec.request_id, r)
        self._check_answers(first)
        self._check_once(model)
        self._check_replicas(model)

    @staticmethod
    def _outcome(r: Answer | RecordResult) -> tuple[Any, ...]:
        assert isinstance(r, RecordResult)
        return (r.position, r.applied, r.results, r.digest)

    def _check_answers(self, first: dict[bytes, RecordResult]) -> None:
        for rid, rs in self.answered.items():  # (1)
            want = first.get(rid)
            for r in rs:
                if want is None or self._outcome(r) != self._outcome(want):
                    self.violations.append(f"request {rid!r}: node {r.node_id} answered {self._outcome(r)}, "
                                           f"the log's first append of it gives "
                                           f"{None if want is None else self._outcome(want)}")
                    return
        if self.answers.divergences:
            self.violations.append(f"the coordinator saw replicas' digests differ "
                                   f"({self.answers.divergences} answers)")

    def _check_once(self, model: MemState) -> None:
        for i, w in enumerate(self.writes):  # (2)
            if not counted(w, i):
                continue
            v = model.get(keys.value_key(w.record.shard, DATASET.id, w.record.partition_key, b"n%d" % i))
            n = 0 if v is None else int(v.value)
            answered = self.waiters[w.request_id].done()
            if n > 1 or (answered and n != 1):
                self.violations.append(f"write {w.request_id!r} counted {n} times"
                                       + (" (it was answered)" if answered else ""))
                return

    def _check_replicas(self, model: MemState) -> None:
        for sn in self.nodes.values():  # (5)
            assert sn.node is not None
            store = sn.node.state.store
            for shard in SETS.shards_of(sn.node_id):
                if store.digest(shard) != model.digest(shard):
                    self.violations.append(f"node {sn.node_id} shard {shard}: digest "
                                           f"{store.digest(shard):x}, the model's {model.digest(shard):x}")
                    return
                prefix = keys.dataset_shard_prefix(shard, DATASET.id)
                for k, v in model.values.items():
                    if k.startswith(prefix) and store.get(k) != v:
                        self.violations.append(f"node {sn.node_id} holds {store.get(k)} at {k!r}, "
                                               f"the model {v}")
                        return

