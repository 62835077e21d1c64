"""The whole cluster's checks at the end of a run (tests/sim/nodes.py NodeSim.check, after
the log's): once every node is back and has applied the logs' committed ends, what every
node holds, published and answered is held against the logs' outcome (the records applied
in each shard's order across its logs, a model store), the clients' answers against their
writes' first outcomes, events once, the linearizability of the shared keys' histories,
the replica sets' machines and the dropped datasets."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import grpc

from catalog import registry
from catalog.replica_sets import ReplicaSets
from coordinator import server
from fleet import failure_domains
from log import reading
from log import zk as zkpaths
from log.entry import Entry
from log.limits import FIRST_POSITION
from log.metadata import LogMetadata
from midtown_pb import kv_pb2 as pb
from record import codec
from record.model import Get, Position, Record, RecordResult
from runtime import world
from runtime.refusals import Refusal
from storage_node import keys
from tests.linearizability import check_per_key
from tests.sim.cluster_shape import LOGS, NODE_MACHINES, NODES, REPLICAS, SHARDS, counted
from tests.sim.store import MemState
from tests.sim.writers import LOG


class EndChecks:
    """NodeSim's end checks (a mixin: the run's state is NodeSim's)."""

    def entry(self, meta: LogMetadata, p: int) -> Entry | None:
        meta = self.meta_at(meta, p)
        seg = meta.segment_of(p)
        if seg is None:
            return None
        for s in self.servers:
            if (e := self.store_of(s).get(meta.log_id, seg.epoch, p)) is not None:
                return e
        return self.kept.get((meta.log_id, seg.epoch, p))

    def held(self, meta: LogMetadata, p: int) -> set[bytes]:
        meta = self.meta_at(meta, p)
        seg = meta.segment_of(p)
        kept = self.kept.get((meta.log_id, seg.epoch, p)) if seg is not None else None
        return super().held(meta, p) | ({kept.payload} if kept is not None else set())

    def committed(self) -> dict[int, tuple[LogMetadata, int]] | None:
        """Each log's metadata and committed end, once its writer has settled (LOG's as the
        log's checks found them); None, said, if one did not settle. The other logs'
        committed positions each hold one payload."""
        out = {LOG: self.checked}
        for lg in range(LOGS):
            if lg == LOG:
                continue
            final = self.settled(lg)
            if final is None:
                self.violations.append(f"no writer recovered log {lg} within 30 s of the end")
                return None
            meta, _ = zkpaths.read_metadata(self.admin, lg)
            out[lg] = meta, reading.committed_end(meta, final.core.lac)
            for p in range(FIRST_POSITION, out[lg][1] + 1):
                if len(held := self.held(meta, p)) != 1:
                    self.violations.append(f"log {lg}'s committed position {p} holds {held}")
                    return None
        return out

    def check(self) -> None:
        super().check()
        if self.violations:
            return
        logs = self.committed()
        if logs is None:
            return
        ends = {lg: end for lg, (_, end) in logs.items()}
        for n in NODES:  # every node back
            if n not in self.storage:
                self.start_node(n)
        deadline = world.monotonic() + 60

        def behind() -> dict[int, dict[int, int]]:
            # (each node tails the logs that carry its shards, the others never: apply_loop.py)
            out = {n: {lg: node.state.positions[lg][0] - 1 for lg in node.state.tailed_logs()
                       if node.state.positions[lg][0] <= ends[lg]} for n, node in self.storage.items()}
            return {n: short for n, short in out.items() if short}
        while world.monotonic() < deadline and behind():
            world.sleep(0.5)
        if behind():  # (5)
            self.violations.append(f"nodes applied only up to {behind()} of the committed ends {ends}")
            return
        # A model applying each shard's records in order: the shards are apart, so shard by
        # shard, each from its first log, then from each log a hand-off took it to
        model = MemState()
        first: dict[bytes, RecordResult] = {}
        # (log, log time, node, position, the disk generation of the node that sent it)
        published: list[tuple[int, int, int, int, int]] = []
        records: dict[int, dict[int, tuple[int, Record]]] = {lg: {} for lg in logs}  # log -> position -> rec
        for lg, (meta, end) in sorted(logs.items()):
            for p in range(FIRST_POSITION, end + 1):
                e = self.entry(meta, p)
                assert e is not None  # the log's checks found every committed position held
                if not e.payload:
                    continue
                rec = codec.record_from_bytes(e.payload)
                ps = [op for op in rec.ops if isinstance(op, Position)]
                if ps:  # (one node's: the disk its entry was sent from)
                    gen = _sent_from(self.sent_from_disk, (ps[0].node_id, lg, e.payload))
                    published += [(lg, e.timestamp_ms, op.node_id, op.position, gen) for op in ps]
                elif rec.request_id or rec.hand_off() is not None or rec.opens():
                    records[lg][p] = (e.timestamp_ms, rec)
        for shard in range(SHARDS):
            for p, ts, rec in self.shard_order(shard, records):
                first.setdefault(rec.request_id, model.run(rec, p, ts))
        for lg, end in ends.items():
            self.counts[f"log {lg} positions"] = end + 1 - FIRST_POSITION
        self.counts["positions published"] = len(published)
        self.counts["positions landed after their disk was lost"] = sum(
            1 for _, ts, n, _, gen in published if 0 <= gen < self.disk_generation(n, ts))
        self.counts["truncated entries checked"] = len(self.kept)
        lost = self.check_failover(model)
        if self.violations:
            return
        self.check_answers(first, lost)
        self.counts["linearizable ops"] = sum(1 for h in self.histories.values() for o in h if o.known)
        for k in check_per_key(self.histories):  # (7)
            self.violations.append(f"the history of key {k!r} does not linearize: {self.histories[k]}")
        self.check_once(model)
        self.check_events(model)
        self.check_restarts(published)
        self.check_replicas(model)

    def shard_order(self, shard: int, records: dict[int, dict[int, tuple[int, Record]]]) -> Iterator[
            tuple[int, int, Record]]:
        """The shard's records with a request id in the order every replica must apply them,
        each with its position in the shard's order and its log time (docs/log.md, "Adding
        logs and handing shards over"): its first log's, up to its first hand-off record;
        then the new log's from the shard's first open record at or after the position the
        hand-off names, its positions above the old log's, its time never below the
        hand-off's; and so on. A record of the shard found anywhere else is one the logs'
        seals should have refused: said. (A shard handed back to a log may start there
        below its earlier stint's records, where the driver read the log's end from a
        server behind: they are skipped, by their generation, as the replicas skip them.)"""
        lg, since, opened, base, floor = self.first_logs[shard], FIRST_POSITION, True, 0, 0
        taken: set[tuple[int, int]] = set()
        while True:
            nxt = None
            for p in sorted(x for x in records[lg] if x >= since):
                ts, rec = records[lg][p]
                if rec.shard != shard or rec.drops() or (lg, p) in taken:
                    continue  # (taken: an earlier stint's, in a log the shard came back to)
                taken.add((lg, p))
                if not opened:
                    if rec.opens():
                        opened = True
                    elif rec.request_id:
                        taken.discard((lg, p))  # before the open record: not the shard's here
                    continue
                h = rec.hand_off()
                if h is not None:
                    nxt = (h.to, h.from_position, p + 1 + base - h.from_position, max(floor, ts))
                    break
                if rec.request_id:
                    yield p + base, max(ts, floor), rec
            if nxt is None:
                break
            lg, since, base, floor = nxt[0], nxt[1], nxt[2], nxt[3]
            opened = False
        stray = sorted((g, p) for g, recs in records.items() for p, (_, rec) in recs.items()
                       if rec.shard == shard and rec.request_id and not rec.drops() and (g, p) not in taken)
        if stray:
            self.violations.append(f"shard {shard}: records at (log, position) {stray[:3]} stand outside "
                                   "its stints in the logs")

    @staticmethod
    def _outcome(r: RecordResult) -> tuple[Any, ...]:
        return (r.position, r.applied, r.results, r.digest)

    def check_answers(self, first: dict[bytes, RecordResult], lost: set[bytes]) -> None:
        """(`lost`: the request ids a fail-over lost, as it reported: check_failover.)"""
        for rid, (method, told) in sorted(self.told.items()):  # (1) what each client was told
            if rid in lost:
                continue
            want = first.get(rid)
            try:
                expected = None if want is None else _RESPONSES[method](want)
            except Refusal as e:  # what the coordinator makes of it: a refusal
                expected = e
            if told != expected:
                self.violations.append(f"request {rid!r}: its client was told {told!r} ({method}), the log's "
                                       f"first append of it gives {expected!r}")
                return
        for rid, rs in self.answered.items():  # (1) what each node answered
            want = first.get(rid)
            for r in rs:
                lost = self.lost_answer(rid, r.position)
                if (want is None or self._outcome(r) != self._outcome(want)) and not lost:
                    self.violations.append(f"request {rid!r}: node {r.node_id} answered {self._outcome(r)}, "
                                           f"the log's first append of it gives "
                                           f"{None if want is None else self._outcome(want)}")
                    return

    def check_events(self, model: MemState) -> None:
        """(2) for the ingester's events: each counts at most once, and once if an attempt
        was told it applied (or was a duplicate of one that had)."""
        self.counts["events"] = len(self.events)
        self.counts["events applied"] = sum(1 for _, told in self.events.values() if told)
        for eid, (pk, told) in sorted(self.events.items()):
            shard = self.dataset.shard_of(pk, SHARDS)  # (over its scope's shards)
            v = model.get(keys.value_key(shard, self.dataset.id, pk, eid))
            n = 0 if v is None else int(v.value)
            if n > 1 or (told and n != 1):
                self.violations.append(f"event {eid!r} counted {n} times"
                                       + (" (told applied)" if told else ""))
                return

    def check_once(self, model: MemState) -> None:
        for i, w in enumerate(self.writes):  # (2)
            if not counted(w, i):
                continue
            v = model.get(keys.value_key(w.record.shard, self.dataset.id, w.record.partition_key, b"n%d" % i))
            n = 0 if v is None else int(v.value)
            must = w.acked or any(rid in self.answered for rid in w.request_ids)
            if n > 1 or (must and n != 1):
                self.violations.append(f"write {w.request_ids!r} counted {n} times"
                                       + (" (acknowledged or answered)" if must else ""))
                return

    def check_restarts(self, published: list[tuple[int, int, int, int, int]]) -> None:
        for n, down_ms, at in self.restarts:  # (3): what it published from the disk it restarted on
            disk = self.disk_generation(n, down_ms)
            for lg, pos in at.items():
                # (Not by the time the log stamped it: a position sent just before the disk
                # was lost can land in the log after, from the disk before.)
                before = max((p for log, ts, node, p, gen in published if log == lg and node == n
                              and gen == disk and ts < down_ms), default=-1)
                if pos < before:
                    self.violations.append(f"node {n} restarted at position {pos} of log {lg}, below the "
                                           f"{before} it published before it went down")
                    return

    def check_history(self, history: list[dict[str, Any]]) -> None:
        """Each step of a move changes the set it names: its destination joins a set
        without it, its leaving replica leaves a set with it (one move of a shard at a time,
        so nothing else put them there or took them out meanwhile)."""
        moving: set[int] = set()  # shards whose destination joined, their leaving replica still in
        if history:
            self.check_machines(history[0], moving)
        for before, after in zip(history, history[1:]):
            joins = re.fullmatch(r"move of shard (\d+): node (\d+) joins", after["why"])
            done = re.fullmatch(r"move of shard (\d+) to node (\d+): done, node (\d+) leaves", after["why"])
            ok = True
            if joins:
                shard, node = int(joins[1]), int(joins[2])
                ok = node not in before["sets"][shard] and node in after["sets"][shard]
                moving.add(shard)
            elif done:
                shard, node = int(done[1]), int(done[3])
                ok = node in before["sets"][shard] and node not in after["sets"][shard]
                moving.discard(shard)
            if not ok:
                self.violations.append(f"replica sets version {after['version']} ({after['why']}) changed "
                                       f"shard {shard}'s set from {before['sets'][shard]} to "
                                       f"{after['sets'][shard]}")
                return
            self.check_machines(after, moving)
            if self.violations:
                return

    def check_machines(self, version: dict[str, Any], moving: set[int]) -> None:
        """(10) In every version of the replica sets, no shard has two copies on one machine,
        but for one whose move's destination has joined and whose leaving replica has not
        left yet (fleet/failure_domains.py: the rule is on the copies that stay)."""
        for shard, copies in enumerate(version["sets"]):
            if shard not in moving and (shared := failure_domains.shared(copies, NODE_MACHINES)):
                self.violations.append(f"replica sets version {version['version']} ({version['why']}): shard "
                                       f"{shard}'s copies {copies} share machines {shared}")
                return

    def check_dropped(self, sets: ReplicaSets) -> None:
        """A node that left a shard drops it (at its next bookkeeping round: a second here,
        after a round's publish and truncation, which wait for the log up to 15 s) and
        refuses to read it."""
        def kept() -> list[tuple[int, int]]:
            return [(n, s) for n, node in sorted(self.storage.items()) for s in range(SHARDS)
                    if n not in sets.of(s) and (s in node.state.marks or node.state.store.has_shard_data(s))]
        deadline = world.monotonic() + 20
        while kept() and world.monotonic() < deadline:
            world.sleep(0.2)
        if kept():
            self.violations.append(f"(node, shard) pairs still kept after the node left the shard: {kept()}")
        for n, node in sorted(self.storage.items()):
            for s in range(SHARDS):
                if n in sets.of(s):
                    continue
                try:
                    node.read(pb.ReadRequest(dataset=self.dataset.id, shard=s, partition_key=b"k0",
                                             op=codec.op_to_pb(Get(b"n0"))))
                    self.violations.append(f"node {n} read shard {s}, which it left")
                except Refusal as e:
                    if e.code != grpc.StatusCode.FAILED_PRECONDITION:
                        self.violations.append(f"node {n} refused a read of shard {s}, which it left, "
                                               f"with {e.code.name}, not FAILED_PRECONDITION")

    def check_replicas(self, model: MemState) -> None:
        kv = registry.read_kv(self.admin)
        assert kv is not None
        sets = registry.read_replica_sets(self.admin, kv)
        if registry.read_moves(self.admin):
            self.violations.append(f"moves still under way at the end: {registry.read_moves(self.admin)}")
        short = [s for s in range(SHARDS) if len(sets.of(s)) != REPLICAS]
        if short:
            self.violations.append(f"shards without {REPLICAS} replicas at the end: "
                                   f"{ {s: sets.of(s) for s in short} }")
        history = registry.replica_sets_history(self.admin)  # every change written with its reason
        if [h["version"] for h in history] != list(range(sets.version + 1)) or (
                history and [tuple(x) for x in history[-1]["sets"]] != list(sets.sets)):
            self.violations.append(f"the replica sets' history does not end at version {sets.version}: "
                                   f"{[(h['version'], h['why']) for h in history]}")
        self.check_history(history)
        self.check_dropped(sets)
        for n, node in sorted(self.storage.items()):  # (6)
            store = node.state.store
            for shard in sets.shards_of(n):
                if store.digest(shard) != model.digest(shard):
                    self.violations.append(f"node {n} shard {shard}: digest {store.digest(shard):x}, "
                                           f"the model's {model.digest(shard):x}")
                    return
                prefix = keys.dataset_shard_prefix(shard, self.dataset.id)
                for k, v in model.values.items():
                    if k.startswith(prefix) and store.get(k) != v:
                        self.violations.append(f"node {n} holds {store.get(k)} at {k!r}, the model {v}")
                        return


def _sent_from(sent: dict[tuple[int, int, bytes], list[int]], key: tuple[int, int, bytes]) -> int:
    """The disk the next of this payload's sends came from (-1: none noted)."""
    disks = sent.get(key)
    return disks.pop(0) if disks else -1


def _batch_response(r: RecordResult) -> pb.BatchResponse:
    return pb.BatchResponse(applied=r.applied, results=[codec.op_result_to_pb(x) for x in r.results],
                            position=r.position)


# What the coordinator answers a write's client from its record's outcome (coordinator/server.py)
_RESPONSES: dict[str, Callable[[RecordResult], Any]] = {
    "Put": server._put_response, "CheckAndSet": server._cas_response, "Batch": _batch_response,
    "Delete": server._delete_response}
