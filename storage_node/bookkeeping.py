"""A storage node's bookkeeping, in rounds beside the apply loop (storage_node/apply_loop.py):
publish its durable positions into the logs and truncate them below every member's
(positions_round, which also appends the drop records of dropped datasets), measure how far
behind each log's writer it is and whether its shards agree with a peer's (measure), and
count what each dataset stores here for the quotas (usage_round). Each runs in a loop that
retries with backoff (runtime/loops.py): a lost ZooKeeper session or an unreachable log
never stops one for good; none of them changes what the node has applied."""

from __future__ import annotations

import logging
from collections.abc import Iterator

from catalog import datasets, registry, shard_moves
from catalog import usage as usage_reports
from catalog.registry import KvTopology
from fleet import machines
from midtown_pb import kv_pb2 as pb
from record import codec, staleness
from record.model import Drop, Position, Record
from runtime import loops, world
from runtime.process import through_zk_loss
from runtime.refusals import Refusal
from storage_node import lww, usage
from storage_node.apply_loop import ApplyLoop
from storage_node.eventual_service import EventualService
from storage_node.limits import LAG_INTERVAL_S, USAGE_DUTY, USAGE_INTERVAL_MAX_S, USAGE_SPREAD_S
from storage_node.lww import LwwReplica
from storage_node.metrics import DIVERGED, EVENT_IDS, LAG, LAG_MS
from storage_node.state import NodeState
from storage_node.truncation import handed_holders, needs_publish, truncation_point

log = logging.getLogger("midtown.storage.bookkeeping")


def durable_positions(s: NodeState) -> dict[int, tuple[int, int]]:
    """Log -> (the position this node has applied it up to, the log time there), made
    durable: read, then the store synced, so a batch applied after the read may yet be
    lost, none before it. Only these are published (DESIGN.md): a node that lost power
    restarts at or past them, and the logs, truncated below them, still hold what it must
    apply again. A fail-over cuts where they stand too (storage_node/node.py status)."""
    durable = dict(s.positions)
    s.store.sync()
    return durable


class Bookkeeping:
    def __init__(self, state: NodeState, lww: LwwReplica, eventual: EventualService,
                 applier: ApplyLoop) -> None:
        self.state = state
        self.applier = applier  # drops the shards not held
        self._cleaned: tuple[object, float] = (None, 0.0)  # (sets and moves, when) of the last look
        self.lww = lww
        self.eventual = eventual
        self._published: dict[int, int] = {}  # log -> position last published there
        self._truncated: dict[int, int] = {}  # log -> position last truncated below
        self._marked = False  # this node's id recorded as publishing (registry.PUBLISHED)
        self._kv_watched = False  # the key-value topology watched (once scopes are laid out)
        self._usage_busy_s = 0.0  # how long the last count kept this node busy

    def start(self) -> None:
        s = self.state
        through_zk_loss(self._watch_kv, "watching the key-value topology")
        loops.every("positions", s.settings.position_interval_s, self.positions_round, s.stop)
        # Counting reads every key: it rests as it goes, and on a node holding much it runs
        # less often, at most USAGE_DUTY of the time, and at least every USAGE_INTERVAL_MAX_S.
        loops.every("usage", s.settings.usage_interval_s, self.usage_round, s.stop,
                    first_at_once=True, duty=USAGE_DUTY, max_interval_s=USAGE_INTERVAL_MAX_S)
        loops.every("lag", LAG_INTERVAL_S, self.measure, s.stop, first_at_once=True)

    def _watch_kv(self) -> None:
        """Once scopes are laid out, learn the key-value topology as it changes: a
        fail-over moves a scope's answering replicas and condemns others at once
        (catalog/failover.py), not at the next round."""
        s = self.state
        if s.kv.scopes and not self._kv_watched:
            self._learn_data_centers()  # before the first round: who answers a local scope's shards
            registry.watch_kv(s.zk, self.learn_kv)
            self._kv_watched = True

    def _learn_data_centers(self) -> None:
        s = self.state
        s.data_centers = {n: d.dc for n, d in machines.recorded(s.zk, machines.STORAGE_NODES).items()}

    def learn_kv(self, kv: KvTopology) -> None:
        """Keep the key-value topology read; a node a fail-over condemned stops, to take a
        copy from a source when it starts again (storage_node/node.py)."""
        was, self.state.kv = self.state.kv, kv
        moved = {(x.dc, x.where) for x in kv.scopes} - {(x.dc, x.where) for x in was.scopes}
        if moved:
            log.info("scopes kept elsewhere now: %s", ", ".join(f"{a} in {b}" for a, b in sorted(moved)))
        if self.state.condemned():
            self.applier.condemned("a fail-over condemned this node's state (it may hold entries the "
                                   "failed-over logs no longer have): it stops, to take a copy from a "
                                   "source when it starts again")

    def positions_round(self) -> None:
        """Publish this node's durable position into each log it has applied data from,
        and truncate each log below the lowest position of every member, never while a
        member's position is unknown (a node that is down holds truncation back).
        ZooKeeper trouble (a lost session) raises: the loop retries with backoff."""
        s, published, truncated = self.state, self._published, self._truncated
        if not self._kv_watched:  # membership changes (node remove); once watched, the watch has the newest
            self.learn_kv(registry.read_kv(s.zk) or s.kv)
        if s.kv.scopes:  # which replicas answer for a local scope's shards (catalog/scopes.py)
            self._learn_data_centers()
            self._watch_kv()
        # The moves first, then the sets: a move that finished between the two reads is
        # seen in the sets it wrote (a copy is dropped only when neither names it).
        s.moves = {shard: m for shard, (m, _) in registry.read_moves(s.zk).items()}
        s.learn_sets(registry.read_replica_sets(s.zk, s.kv))
        s.learn_log_map(registry.read_log_map(s.zk, s.kv, s.log_count))
        self._drop_shards_not_held()
        self._append_drops()
        durable = durable_positions(s)
        for log_id in range(s.log_count):
            if needs_publish(s.last_data.get(log_id), published.get(log_id)):
                self._publish(log_id, durable[log_id][0])
            low = self._truncation_point(log_id)
            if low is not None and low > truncated.get(log_id, 0):
                try:
                    truncated[log_id] = s.logs.truncate(log_id, low)
                except Refusal as e:
                    log.debug("truncating log %d: %s", log_id, e)

    def _publish(self, log_id: int, pos: int) -> bool:
        """Append this node's durable position `pos` to a log (made durable before)."""
        rec = Record(b"", "", "", 0, b"", (Position(self.state.node_id, pos),))
        if not self._marked:  # before the first publication (registry.PUBLISHED)
            registry.mark_published(self.state.zk, self.state.node_id)
            self._marked = True
        try:
            self.state.logs.append(log_id, [codec.record_to_bytes(rec)], timeout_s=5)
            self._published[log_id] = pos
            return True
        except Refusal as e:
            log.debug("publishing position of log %d: %s", log_id, e)
            return False

    def publish_now(self, log_id: int) -> bool:
        """Publish this node's position in a log now (after a shard copy's install: the
        move is recorded only once it has, catalog/shard_moves.py may_record_copy)."""
        return self._publish(log_id, durable_positions(self.state)[log_id][0])

    def _truncation_point(self, log_id: int) -> int | None:
        """Below every holder's published position; not while a shard of the log is being
        copied; below each moving destination's from then on (catalog/shard_moves.py)."""
        s = self.state
        low = truncation_point(s.member_positions, log_id, self._holders(log_id))
        if log_id >= s.kv_logs:
            return low
        # A move of a shard handed over counts in each log that may carry it: its
        # destination may still take the shard from the old one (a copy taken there)
        moves = [m for m in s.moves.values() if s.log_of(m.shard) == log_id
                 or s.log_map.may_carry(m.shard, log_id)]
        dests = {m.dest: p for m in moves if (p := s.member_positions.get((log_id, m.dest))) is not None}
        return shard_moves.truncation_point(low, moves, dests)

    def _drop_shards_not_held(self) -> None:
        """Drop the shards this node keeps but neither holds nor takes in by a move (a
        replica that left, a copy whose move was given up): when the sets or the moves
        changed, and every minute in any case."""
        s = self.state
        seen = (s.sets.version, tuple(sorted((sh, m.dest, m.phase) for sh, m in s.moves.items())))
        now = world.monotonic()
        if seen == self._cleaned[0] and now - self._cleaned[1] < 60:
            return
        self._cleaned = (seen, now)
        incoming = {sh for sh, m in s.moves.items() if m.dest == s.node_id}
        for shard in range(s.kv.shards):
            if s.holds(shard) or shard in incoming:
                continue
            if shard in s.marks or s.store.has_shard_data(shard):
                self.applier.drop_shard(shard)

    def _holders(self, log_id: int) -> tuple[int, ...]:
        """The members a log's truncation waits for: those that hold one of its shards (all
        members when every member holds every shard), and those that hold a shard handed
        from it to another log until each of them has published a position past the
        hand-off (docs/log.md step 6: they still apply its records before it); a log that
        carries no shards, all."""
        s = self.state
        if log_id >= s.kv_logs:
            return s.kv.storage_nodes
        holders = {*s.sets.nodes_of_log(log_id, s.log_map),
                   *handed_holders(log_id, s.log_map.handoffs, s.sets.of, s.member_positions),
                   *(n for h in s.log_map.handing if log_id in (h.old, h.new) for n in s.sets.of(h.shard))}
        return tuple(n for n in sorted(holders) if n in s.kv.storage_nodes)

    def _append_drops(self) -> None:
        """Put a drop record for each dataset dropped more than DROP_DELAY_S ago into every
        log that has not applied one: applying it deletes the dataset's keys in that log's
        shards, at the same point of the log on every replica. The delay lets requests that
        were already under way when it was dropped come first. Any node may append one;
        a second one deletes nothing more."""
        s = self.state
        try:
            due = [i for i, at in datasets.dropped(s.zk)
                   if world.wall_ms() - at >= s.settings.drop_delay_s * 1000]
            for dataset_id in due:
                # (a key-value log that carries no shard, added and not handed one yet,
                # has nothing to drop, and no node applies it)
                pending = [lg for lg in range(s.kv_logs)
                           if s.log_map.shards_of_log(lg) and not s.store.drop_applied(lg, dataset_id)]
                if not pending:
                    # In every log now: every member applies it from there (the logs are
                    # not truncated past a member), so the note has done its work.
                    datasets.forget_drop(s.zk, dataset_id)
                for log_id in pending:
                    shards = s.log_map.shards_of_log(log_id)
                    rec = Record(b"", "", dataset_id, shards[0] if shards else 0, b"", (Drop(shards),))
                    s.logs.append(log_id, [codec.record_to_bytes(rec)], timeout_s=5)
        except Exception as e:  # ZooKeeper or a log unavailable: the next interval tries again
            log.debug("dropping datasets: %s", e)

    def measure(self) -> None:
        """How far behind each log's writer this node is (health and metrics), whether its
        shards' digests agree with a peer's at the same positions, and its event ids."""
        s = self.state
        lag, away = {}, set()
        for log_id in s.tailed_logs():
            try:
                tail = s.logs.writer_tail(log_id)
            except Refusal as e:  # its writer away: its last figure stands, the other logs are measured
                log.debug("the writer of log %d: %s", log_id, e)
                away.add(log_id)
                if log_id in s.lag:
                    lag[log_id] = s.lag[log_id]
                continue
            if tail is None:
                continue
            if tail.clock_ms:  # read by the writer before the answer came: its clock against this one's
                s.watch_clock(log_id, tail.clock_ms, checked=True)
            lag[log_id] = max(0, int(tail.last) + 1 - s.positions[log_id][0])
            LAG.labels(log=str(log_id)).set(lag[log_id])
            if tail.clock_ms:  # (a replica across data centers: how stale a read of it may be)
                LAG_MS.labels(log=str(log_id)).set(staleness.lag_ms(tail.clock_ms, s.positions[log_id][1],
                                                                    lag[log_id]))
        s.lag, s.writers_away = lag, frozenset(away)  # a health check never sees them half made
        peers = s.peers(members_only=True)
        if peers:
            theirs = s.peer_calls.call(world.choice(peers), "Status", pb.NodeStatusRequest(), 5)
            mine = {shard: (pos, digest) for shard, _, pos, digest in s.shard_digests()}
            DIVERGED.set(sum(1 for t in theirs.shards if mine.get(t.shard, (None, 0))[0] == t.position
                             and mine[t.shard][1] != t.digest))
        held: dict[str, int] = {}
        for _, dataset, n in s.store.event_counts():
            held[dataset] = held.get(dataset, 0) + n
        for dataset, n in held.items():
            EVENT_IDS.labels(dataset=dataset.rsplit("#", 1)[0]).set(n)

    def usage_round(self) -> float:
        """Now and every usage interval: note that this node is up, count what each dataset
        takes here and publish it for the quota checks (coordinator/quotas.py), then purge
        the eventual tombstones and expired values older than the grace, seen on the way.
        Publishing comes first: its time is what a node coming back compares with its own
        last time up to judge whether tombstones it missed may be gone
        (eventual_service.py drop_if_outlived), so no purge as of a time precedes the report
        of that time; a ZooKeeper outage holds purging back. The count rests as it reads
        (loops.Spread); returns the seconds it was busy."""
        s = self.state
        now_ms = world.wall_ms()
        s.store.set_last_up(now_ms)
        old: list[tuple[bytes, bytes]] = []

        def watch(items: Iterator[tuple[bytes, bytes]]) -> Iterator[tuple[bytes, bytes]]:
            for k, v in items:
                if (k[:1] == b"E" and len(old) < lww.PURGE_BATCH_MAX
                        and lww.purgeable(v, now_ms, self.lww.grace_ms)):
                    old.append((k, v))
                yield k, v
        spread = loops.Spread(USAGE_DUTY, USAGE_SPREAD_S, self._usage_busy_s, s.stop.wait)
        counts, shard_bytes = usage.tally(watch(usage.data_items(s.store, spread.piece_done)))
        self._usage_busy_s = spread.busy_s
        if s.node_id in s.kv.storage_nodes:  # a removed node's data is behind
            usage_reports.publish(s.zk, s.node_id, counts, now_ms, shard_bytes)
        self.eventual.purged += self.lww.purge(old)
        return spread.busy_s
