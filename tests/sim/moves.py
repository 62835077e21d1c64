"""A seeded, deterministic simulation of shard moves (catalog/shard_moves.py, with
storage_node/shard_copy.py at the destination) beside a stream of writes, with crashes of
storage nodes and of the mover at every step, copies delayed and lost in transit, and
truncation of the logs.

The model: L logs of records (shard, value); N storage nodes, each with durable state (a
tail position per log, skip marks, and per shard the list of values applied: a shard's
state is the sequence of its records); ZooKeeper's replica sets and moves, changed only
by whole writes; one mover at a time, which keeps nothing of its own (a new one reads the
move and goes on). Checked after every step:

- every replica in a shard's set, and every destination with an installed copy, holds
  exactly the shard's records below the position its state stands at (none lost, none
  twice, none out of order): a replica that answers is always right for its position;
- no node that needs a log position finds it truncated (a gap);
- at the end, writes and failures stopped, every move finishes, every shard has R
  replicas, each with all of the shard's records.

Its broken variants run on the real storage nodes and mover now (tests/sim/nodes.py,
which catches them), but for one that the whole simulation does not reach yet:
"rebuild-behind" (below).

Nodes also lose their disks. A node that lost its state is rebuilt shard by shard
(storage_node/rebuild.py, storage_node/shard_copy.py rebuild): it asks a copy of each
shard it holds (and of each shard moving to it whose copy was recorded) from another
replica, at or past the head each log had when its rebuild began, so at or past any
position it published before; once it has them all it tails each log from the lowest
copy. It answers for nothing until then, and a crash starts its rebuild again. Broken
variant: "rebuild-behind" (copies at whatever position their source stands at: the log
may be truncated past the tail).

Beside the model, every node runs each record it applies through the storage node's own
apply step (storage_node/apply.py) into the simulator's store (tests/sim/store.py), and a
copy carries the shard's values and digest as that store holds them: each replica's digest
must equal the one the apply step leaves after the shard's records below its position."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from catalog import failure_domains, shard_moves
from catalog.datasets import Dataset
from catalog.failure_domains import Domain
from catalog.replica_sets import spread
from catalog.routing import log_of, shard_of
from catalog.shard_moves import COPYING, JOINED, TAILING, Move
from coordinator.answers import Answers
from coordinator.records import record_for
from record.model import Incr, Put, Record
from storage_node import shard_copy
from tests.sim.store import MemState, ShardCopy

DATASET = Dataset("d", incarnation=1)


def partition_keys(shards: int) -> dict[int, bytes]:
    """A partitioning key of the dataset in each shard."""
    out: dict[int, bytes] = {}
    i = 0
    while len(out) < shards:
        out.setdefault(shard_of(DATASET.id, b"p%d" % i, shards), b"p%d" % i)
        i += 1
    return out


def record_of(shard: int, value: int, pkeys: dict[int, bytes]) -> Record:
    """The record the coordinator's own request-to-record step (coordinator/records.py)
    makes of a write of `value` to `shard`: a counter that every record of the shard
    increments and a value under one of four keys, so a record lost, repeated or applied out
    of order changes the state the apply step leaves, and its digest."""
    return record_for(DATASET, b"w%d" % value, "", pkeys[shard],
                      (Incr(b"n", 1), Put(b"v%d" % (value % 4), b"%d" % value)), b"", len(pkeys))


@dataclass(frozen=True)
class Config:
    nodes: int = 5
    shards: int = 6
    logs: int = 2
    replicas: int = 3
    steps: int = 600
    broken: str = ""  # "rebuild-behind"
    disk_loss: bool = True  # nodes lose their state and are rebuilt shard by shard
    # Machines the nodes run on (node n on machine n % machines; 0: each its own). The mover
    # places by the placement rule (catalog/failure_domains.py), and after every step no
    # shard has two of the copies that stay on one machine.
    machines: int = 0


@dataclass
class Node:
    tails: dict[int, int | None]  # log -> next position to apply (None: not tailing it)
    marks: dict[int, int] = field(default_factory=dict)
    state: dict[int, list[int]] = field(default_factory=dict)  # shard -> its records' values, in order
    publications: int = 0  # how many times it published its positions
    # shard -> publications when its copy was installed
    installed_after: dict[int, int] = field(default_factory=dict)
    alive: bool = True
    # The same records through the storage node's own apply step (storage_node/apply.py),
    # kept in the simulator's store: its shards' values and digests.
    store: MemState = field(default_factory=MemState)
    # While it is rebuilt (it lost its disk): the copies that came, shard -> copy; None: whole.
    rebuild: dict[int, Copy] | None = None
    rebuild_from: dict[int, int] = field(default_factory=dict)  # log -> its head when the rebuild began
    generation: int = 0  # a rebuild's copies asked before a crash are not taken after it


@dataclass
class Copy:  # in transit from a source to a destination
    shard: int
    dest: int
    source: int
    at: int
    values: list[int]
    due: int  # the step it arrives at
    store: ShardCopy = ShardCopy({}, 0)  # the shard's values, digest and request ids, as applied
    rebuild: int | None = None  # for the destination's rebuild of this generation (not a move)


class MoveSim:
    def __init__(self, seed: int, cfg: Config = Config()) -> None:
        self.rng = random.Random(seed)
        self.cfg = cfg
        c = cfg
        # (shard, value, whether it is a retry of a write appended before)
        self.log: list[list[tuple[int, int, bool]]] = [[] for _ in range(c.logs)]
        self.truncated = [0] * c.logs  # positions below are gone
        members = list(range(c.nodes))
        self.where = (failure_domains.lookup({n: Domain(f"m{n % c.machines}") for n in members})
                      if c.machines else failure_domains.unknown)
        self.sets = dict(enumerate(spread(c.shards, members, c.replicas, self.where).sets))
        self.moves: dict[int, Move] = {}
        self.nodes = {n: Node({lg: (0 if any(n in self.sets[s] for s in self._shards_of_log(lg)) else None)
                               for lg in range(c.logs)}) for n in members}
        self.published: dict[tuple[int, int], int] = {}  # (log, node) -> position
        self.in_transit: list[Copy] = []
        self.mover_alive = True
        self.step_no = 0
        self.violations: list[str] = []
        self.trace: list[str] = []
        self.counts = {"moves": 0, "finished": 0, "aborted": 0, "copies": 0, "lost": 0, "caught_up": 0,
                       "disks_lost": 0, "rebuilt": 0, "retried": 0}
        self._value = 0
        # Each shard's digests as the apply step leaves them, record by record, in a store of
        # its own: (position, digest after it).
        self._reference = MemState()
        self.digests: dict[int, list[tuple[int, int]]] = {s: [] for s in range(c.shards)}
        # The coordinator's side: each write's record is made by its request-to-record step,
        # and the replicas' answers go to its Answers (coordinator/answers.py), which compares
        # the digests of replicas that applied the same position and wakes the write's waiter.
        self.pkeys = partition_keys(c.shards)
        self.answers = Answers(lambda: range(c.nodes))
        self.waiting: dict[int, tuple[int, object]] = {}  # value -> (the shard's count after it, its future)
        self._count = [0] * c.shards
        self.shard_of: dict[int, int] = {}  # value -> the shard it was written to

    # ------------------------------------------------------------ the model
    def _shards_of_log(self, lg: int) -> list[int]:
        return [s for s in range(self.cfg.shards) if log_of(s, self.cfg.logs) == lg]

    def _digest_below(self, shard: int, below: int) -> int:
        """The shard's digest once the apply step has taken its records below `below`."""
        got = [d for p, d in self.digests[shard] if p < below]
        return got[-1] if got else 0

    def _expected(self, shard: int, below: int) -> list[int]:
        lg = log_of(shard, self.cfg.logs)
        return [v for s, v, again in self.log[lg][:below] if s == shard and not again]

    def _whole(self, n: int) -> bool:
        """Whether node n is up and not being rebuilt."""
        return self.nodes[n].alive and self.nodes[n].rebuild is None

    def _holds(self, n: int, shard: int) -> bool:
        """Whether node n keeps the shard's state up: a member, or a destination with a copy
        (not while it is rebuilt)."""
        if self.nodes[n].rebuild is not None:
            return False
        m = self.moves.get(shard)
        return n in self.sets[shard] or (m is not None and m.dest == n and shard in self.nodes[n].marks
                                         and shard in self.nodes[n].state)

    # ------------------------------------------------------------ steps
    def run(self) -> list[str]:
        for step in range(self.cfg.steps):
            self.step_no = step
            self._step(final=False)
            self._check()
        for i in range(3000):  # drain: no writes, no failures, everyone up
            self.step_no = self.cfg.steps + i
            for n in self.nodes.values():
                n.alive = True
            self.mover_alive = True
            self._step(final=True)
            self._check()
            if not self.moves and all(self._caught_up(n) for n in self.nodes) and not self._retry():
                break
        self._check_end()
        return self.violations

    def _step(self, final: bool) -> None:
        r = self.rng.random()
        if not final and r < 0.25:
            self._write()
        elif r < 0.55:
            self._apply(self.rng.randrange(self.cfg.nodes))
        elif r < 0.65:
            self._publish_and_truncate()
        elif r < 0.85:
            self._mover(final)
        elif r < 0.92:
            self._deliver()
        elif not final:
            self._fail()

    def _write(self) -> None:
        s = self.rng.randrange(self.cfg.shards)
        self._value += 1
        rec = record_of(s, self._value, self.pkeys)
        assert rec.shard == s
        [waiter] = self.answers.expect([(log_of(s, self.cfg.logs), s, rec.request_id)])
        self._count[s] += 1
        self.waiting[self._value] = (self._count[s], waiter)
        self.shard_of[self._value] = s
        self._append(s, self._value, False)

    def _retry(self) -> bool:
        """The coordinator appends each write still unanswered again, with its request id
        (a retry after its deadline): a replica that has it answers from its request ids.
        Whether there was one."""
        again = [v for v, (_, w) in self.waiting.items() if not w.done()]  # type: ignore[attr-defined]
        for v in again:
            self._append(self.shard_of[v], v, True)
        self.counts["retried"] += len(again)
        return bool(again)

    def _append(self, s: int, value: int, again: bool) -> None:
        lg = log_of(s, self.cfg.logs)
        rec = record_of(s, value, self.pkeys)
        self.log[lg].append((s, value, again))
        pos = len(self.log[lg]) - 1
        self._reference.run(rec, pos, pos, lg)
        self.digests[s].append((pos, self._reference.digest(s)))

    def _apply(self, n: int) -> None:
        node = self.nodes[n]
        if not node.alive:
            return
        for lg, tail in node.tails.items():
            if tail is None:
                continue
            if tail < self.truncated[lg]:
                if not any(self._holds(n, s) for s in self._shards_of_log(lg)):
                    # It left the log's shards: it tails it no more, and what it kept of
                    # them goes (the storage node stops, behind the truncation, and
                    # bootstraps at its restart without them).
                    node.tails[lg] = None
                    for s in self._shards_of_log(lg):
                        if s in node.state or s in node.marks:
                            node.state.pop(s, None)
                            node.marks.pop(s, None)
                            node.store.drop(s, DATASET.id)
                    continue
                self.violations.append(f"step {self.step_no}: node {n} needs log {lg} at {tail}, "
                                       f"truncated below {self.truncated[lg]}")
                node.tails[lg] = None
                continue
            end = min(len(self.log[lg]), tail + self.rng.randint(1, 5))
            for pos in range(tail, end):
                s, v, again = self.log[lg][pos]
                # As the storage node's applies_shard: a shard it holds, or one it keeps a
                # copy of (a mark) until it drops it.
                if (self._holds(n, s) or s in node.marks) and shard_copy.applies(node.marks, s, pos):
                    if not again:
                        node.state.setdefault(s, []).append(v)
                    r = node.store.run(record_of(s, v, self.pkeys), pos, pos, lg, node_id=n)
                    if n in self.sets[s]:  # a replica answers the coordinator that appended it
                        self.answers.deliver([r])
            node.tails[lg] = end

    def _publish_and_truncate(self) -> None:
        for n, node in self.nodes.items():
            if node.alive:
                for lg, tail in node.tails.items():
                    if tail is not None:
                        self.published[(lg, n)] = tail
                node.publications += 1
        for lg in range(self.cfg.logs):
            shards = self._shards_of_log(lg)
            holders = {n for s in shards for n in self.sets[s]}
            known = [self.published.get((lg, n)) for n in holders]
            low = None if any(k is None for k in known) else min(k for k in known if k is not None)
            moves = [m for s, m in self.moves.items() if s in shards]
            point = shard_moves.truncation_point(
                low, moves, {m.dest: self.published[(lg, m.dest)] for m in moves
                             if (lg, m.dest) in self.published})
            if point is not None and point > self.truncated[lg]:
                self.truncated[lg] = min(point, len(self.log[lg]))

    def _mover(self, final: bool) -> None:
        if not self.mover_alive:
            return
        if not self.moves:
            if final or self.rng.random() < 0.5:
                return
            s = self.rng.randrange(self.cfg.shards)
            leaving = self.rng.choice(self.sets[s])
            outside = [n for n in self.nodes if n not in self.sets[s] and failure_domains.allowed(
                self.sets[s], n, leaving, self.where)]
            if not outside:
                return
            to = self.rng.choice(outside)
            self.moves[s] = shard_moves.start(self.sets[s], s, to, leaving)
            self.counts["moves"] += 1
            self.trace.append(f"{self.step_no}: move shard {s} to {to} from {leaving}")
            return
        s, m = next(iter(self.moves.items()))
        dest = self.nodes[m.dest]
        if m.phase == COPYING:
            if s in dest.marks and s in dest.state and dest.alive:  # the destination installed one
                if shard_moves.may_record_copy(dest.installed_after[s], dest.publications):
                    self.moves[s] = shard_moves.copied(m, dest.marks[s])
                return  # else: once it has published
            if not final and not dest.alive and self.rng.random() < 0.3:  # give up: the destination is gone
                del self.moves[s]
                self.counts["aborted"] += 1
                self.trace.append(f"{self.step_no}: move of shard {s} aborted")
                return
            self._ask_copy(s, m.dest)
        elif m.phase == TAILING and shard_moves.may_join(m):
            self.sets[s] = shard_moves.joined_sets(self.sets[s], m)
            self.moves[s] = shard_moves.joined(m)
        elif m.phase == JOINED:
            lg = log_of(s, self.cfg.logs)
            positions = {n: node.tails[lg] for n, node in self.nodes.items() if node.tails[lg] is not None}
            if shard_moves.may_finish(m, positions):  # type: ignore[arg-type]
                self.sets[s] = shard_moves.finished_sets(self.sets[s], m)
                del self.moves[s]
                self.counts["finished"] += 1
                self.trace.append(f"{self.step_no}: move of shard {s} finished: {self.sets[s]}")

    def _ask_copy(self, s: int, dest: int) -> None:
        """The destination asks a live replica of the shard for a copy: the source's state
        of the shard and its tail position in the log, taken together."""
        live = [n for n in self.sets[s] if self._whole(n) and n != dest]
        if not live or not self.nodes[dest].alive or self.nodes[dest].rebuild is not None:
            return
        src = self.rng.choice(live)
        node = self.nodes[src]
        lg = log_of(s, self.cfg.logs)
        at = shard_copy.effective(node.tails[lg], node.marks, s)
        self.in_transit.append(Copy(s, dest, src, at, list(node.state.get(s, [])),
                                    self.step_no + self.rng.randint(1, 30),
                                    node.store.shard_copy(s, DATASET.id)))
        self.counts["copies"] += 1

    def _deliver(self) -> None:
        due = [c for c in self.in_transit if c.due <= self.step_no]
        for c in due:
            self.in_transit.remove(c)
            m = self.moves.get(c.shard)
            node = self.nodes[c.dest]
            if c.rebuild is not None:
                if node.alive and node.rebuild is not None and c.rebuild == node.generation:
                    node.rebuild[c.shard] = c
                else:
                    self.counts["lost"] += 1
                continue
            if m is None or m.dest != c.dest or m.phase != COPYING or not self._whole(c.dest):
                self.counts["lost"] += 1
                continue
            lg = log_of(c.shard, self.cfg.logs)
            values = list(c.values)
            holds_others = any(self._holds(c.dest, s) for s in self._shards_of_log(lg) if s != c.shard)
            tail = node.tails[lg]
            forward = shard_copy.catch_up(tail, c.at)
            if forward:
                self.counts["caught_up"] += 1
                if forward.start < self.truncated[lg]:
                    self.violations.append(f"step {self.step_no}: node {c.dest} brings a copy of shard "
                                           f"{c.shard} forward from {forward.start}, log {lg} truncated "
                                           f"below {self.truncated[lg]}")
                    return
                values += [v for s, v, again in self.log[lg][forward.start:forward.stop]
                           if s == c.shard and not again]
            node.tails[lg], node.marks = shard_copy.install(tail, c.at, c.shard, node.marks, holds_others)
            node.state[c.shard] = values
            node.store.install(c.shard, DATASET.id, c.store)
            for pos in forward:  # the records between the copy and the tail, as the apply loop does
                s, v, _ = self.log[lg][pos]
                if s == c.shard:
                    node.store.run(record_of(s, v, self.pkeys), pos, pos, lg, node_id=c.dest)
            node.installed_after[c.shard] = node.publications
        for n in self.nodes:
            self._rebuild(n)

    # ------------------------------------------------------------ a node rebuilt shard by shard
    def _rebuild_wants(self, n: int) -> set[int]:
        """The shards a rebuilt node must hold: those whose set names it, and those moving
        to it whose copy was recorded (it would join one without holding it)."""
        return {s for s in range(self.cfg.shards) if n in self.sets[s]
                or (s in self.moves and self.moves[s].dest == n and self.moves[s].phase != COPYING)}

    def _rebuild(self, n: int) -> None:
        """Ask the copies a rebuilt node still lacks; once it has them all, install them."""
        node = self.nodes[n]
        if node.rebuild is None or not node.alive:
            return
        want = self._rebuild_wants(n)
        missing = want - set(node.rebuild)
        if not missing:
            self._rebuilt(n, want)
            return
        asked = {c.shard for c in self.in_transit if c.dest == n and c.rebuild == node.generation}
        for s in sorted(missing - asked):
            lg = log_of(s, self.cfg.logs)
            low = 0 if self.cfg.broken == "rebuild-behind" else node.rebuild_from[lg]
            sources = [m for m in self.sets[s] if m != n and self._whole(m)
                       and shard_copy.effective(self.nodes[m].tails[lg], self.nodes[m].marks, s) >= low]
            if not sources:
                continue  # it waits: a source is down, or not yet at the head
            src_id = self.rng.choice(sources)
            src = self.nodes[src_id]
            at = shard_copy.effective(src.tails[lg], src.marks, s)
            self.in_transit.append(Copy(s, n, src_id, at, list(src.state.get(s, [])),
                                        self.step_no + self.rng.randint(1, 30),
                                        src.store.shard_copy(s, DATASET.id), rebuild=node.generation))
            self.counts["copies"] += 1

    def _rebuilt(self, n: int, want: set[int]) -> None:
        node = self.nodes[n]
        assert node.rebuild is not None
        copies = node.rebuild
        for lg in range(self.cfg.logs):
            mine = {s: copies[s].at for s in want if log_of(s, self.cfg.logs) == lg}
            if not mine:
                continue
            tail, marks = shard_copy.rebuild(mine)
            node.tails[lg] = tail
            node.marks.update(marks)
        for s in want:
            node.state[s] = list(copies[s].values)
            node.store.install(s, DATASET.id, copies[s].store)
            node.installed_after[s] = node.publications
        node.rebuild = None
        self.counts["rebuilt"] += 1
        self.trace.append(f"{self.step_no}: node {n} rebuilt: {sorted(want)}")

    def _lose_disk(self, n: int) -> None:
        """Node n loses its state (a new disk), if every shard it holds keeps another whole replica."""
        node = self.nodes[n]
        for s in self._rebuild_wants(n):
            if not any(m != n and self.nodes[m].rebuild is None for m in self.sets[s]):
                return
        self.nodes[n] = Node({lg: None for lg in range(self.cfg.logs)}, publications=node.publications,
                             alive=node.alive, rebuild={}, generation=node.generation + 1,
                             rebuild_from={lg: len(self.log[lg]) for lg in range(self.cfg.logs)})
        self.counts["disks_lost"] += 1
        self.trace.append(f"{self.step_no}: node {n} lost its disk")

    def _fail(self) -> None:
        r = self.rng.random()
        if self.cfg.disk_loss and r < 0.05:
            self._lose_disk(self.rng.randrange(self.cfg.nodes))
        elif r < 0.4:
            n = self.rng.randrange(self.cfg.nodes)
            node = self.nodes[n]
            node.alive = not node.alive  # a crash keeps what is durable
            if node.alive and node.rebuild is not None:  # a rebuild starts again
                node.rebuild, node.generation = {}, node.generation + 1
                node.rebuild_from = {lg: len(self.log[lg]) for lg in range(self.cfg.logs)}
        elif r < 0.7:
            self.mover_alive = not self.mover_alive
        else:  # a copy lost in transit (its source or the network died)
            if self.in_transit:
                self.in_transit.pop(self.rng.randrange(len(self.in_transit)))
                self.counts["lost"] += 1
        # A node that holds a copy nobody moves to it, and that is not a replica, drops it.
        for n, node in self.nodes.items():
            for s in list(node.state):
                moving_here = any(m.dest == n and m.shard == s for m in self.moves.values())
                if not self._holds(n, s) and not moving_here:
                    del node.state[s]
                    node.marks.pop(s, None)
                    node.store.drop(s, DATASET.id)

    # ------------------------------------------------------------ checks
    def _check(self) -> None:
        for s, nodes in self.sets.items():  # the placement rule: the copies that stay, apart
            m = self.moves.get(s)
            stay = [n for n in nodes if m is None or n != m.leaving]
            if failure_domains.shared(stay, self.where):
                self.violations.append(f"step {self.step_no}: shard {s}'s copies {stay} share a machine")
        if self.answers.divergences:
            self.violations.append(f"step {self.step_no}: the coordinator saw replicas diverge "
                                   f"({self.answers.divergences} answers)")
            self.answers.divergences = 0
        for s in range(self.cfg.shards):
            lg = log_of(s, self.cfg.logs)
            for n, node in self.nodes.items():
                if not self._holds(n, s):
                    continue
                at = shard_copy.effective(node.tails[lg], node.marks, s)
                got, want = node.state.get(s, []), self._expected(s, at)
                if got == want and node.store.digest(s) != self._digest_below(s, at):
                    self.violations.append(
                        f"step {self.step_no}: node {n}'s apply step left shard {s} at {at} with digest "
                        f"{node.store.digest(s):x}, not {self._digest_below(s, at):x}")
                    return
                if got != want:
                    diff = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b),
                                min(len(got), len(want)))
                    self.violations.append(
                        f"step {self.step_no}: node {n} {'member' if n in self.sets[s] else 'destination'} "
                        f"of shard {s} at {at} holds {len(got)} records, the log has {len(want)} "
                        f"(first difference at {diff})")
                    return

    def _caught_up(self, n: int) -> bool:
        node = self.nodes[n]
        return node.rebuild is None and all(
            t is None or t == len(self.log[lg]) for lg, t in node.tails.items())

    def _check_end(self) -> None:
        for value, (count, waiter) in self.waiting.items():  # every write answered, and rightly
            if not waiter.done():  # type: ignore[attr-defined]
                self.violations.append(f"the write of {value} was never answered")
                break
            r = waiter.result()  # type: ignore[attr-defined]
            got = int(r.results[0].value.value) if r.applied and r.results and r.results[0].value else None
            if got != count:
                self.violations.append(f"the write of {value} was answered with the counter at {got}, "
                                       f"not {count}")
                break
        if self.moves:
            self.violations.append(f"moves left at the end: {list(self.moves.values())}")
        for s in range(self.cfg.shards):
            if len(self.sets[s]) != self.cfg.replicas:
                self.violations.append(f"shard {s} ends with replicas {self.sets[s]}")
            for n in self.sets[s]:
                lg = log_of(s, self.cfg.logs)
                if self.nodes[n].tails[lg] is None:
                    self.violations.append(f"node {n}, a replica of shard {s}, does not tail log {lg}")
                elif self.nodes[n].state.get(s, []) != self._expected(s, len(self.log[lg])):
                    self.violations.append(f"node {n}, a replica of shard {s}, does not hold all its records")
                elif self.nodes[n].store.digest(s) != self._digest_below(s, len(self.log[lg])):
                    self.violations.append(f"node {n}, a replica of shard {s}, ends with another digest")
