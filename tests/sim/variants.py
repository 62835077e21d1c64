"""The whole cluster's broken variants (tests/sim/nodes.py): each a rule of the real code
swapped for a broken one for the run (tests/sim/broken.py), which the simulation's checks
must catch (make sim BROKEN=name; make soak runs them all). The log servers' own are
tests/sim/writers.py's."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from catalog import failover, registry, shard_moves
from coordinator import bulk
from coordinator.node import Coordinator
from drivers import moves
from fleet import failure_domains, machines
from log.rocks_store import RocksStore
from log.seals import Seals
from midtown import retries
from midtown_pb import kv_pb2 as pb
from record import staleness
from runtime import world
from storage_node import bookkeeping, handoff, holds, reads, rebuild, shard_copy, shard_intake
from storage_node import node as node_module
from storage_node.bookkeeping import Bookkeeping
from tests.sim.broken import Swap

BROKEN = ("publish-unsynced", "retry-new-id", "truncate-ahead", "read-anywhere", "copy-while-starting",
          "no-catch-up", "join-early", "rebuild-high", "moves-recreated", "no-hold",
          "by-load", "no-digest", "rebuild-behind", "by-shard-behind", "start-once",
          "no-event-ids", "open-early", "unsealed", "log-unsynced", "stint-blind", "bounded-unchecked",
          "heads-by-status",
          "clock-unchecked", "heard-near", "ahead-kept", "cut-unsynced", "cut-unheld", "cut-entries-applied")
# caught in runs with a data center lost (faults.drawn)
FAILOVER = ("heard-near", "ahead-kept", "cut-unsynced", "cut-unheld", "cut-entries-applied")


def _applied(s: Any, durable: bool = True) -> dict[int, tuple[int, int]]:
    return dict(s.positions)


def _own_position(self: Bookkeeping, log_id: int) -> int:
    return self.state.positions[log_id][0]


def _no_index(self: Coordinator, log_id: int) -> tuple[int | None, str]:
    return -1, "round"


def _followed_only(position: int, followed: bool, holds_others: bool) -> int | None:
    return position if followed else None


def _no_catch_up(tail: int | None, copy_at: int) -> range:
    return range(0)


def _joined_uncopied(*_: Any) -> pb.CopyShardResponse:
    return pb.CopyShardResponse(position=0)


def _condemned_behind(nodes: Any, sources: Any, at: Any) -> set[int]:
    cut = min((at[n][0] for n in sources), default=0)
    return {n for n in nodes if n not in sources and (n not in at or at[n][0] < cut)}


def _rebuilt_from_highest(copies: Any) -> tuple[int, dict[int, int]]:
    return max(copies.values()), dict(copies)


_start_move = registry.start_move
_truncation_point = shard_moves.truncation_point
_items = reads._items


def _heads_unknown(shards: list[int], heads: Any, log_map: Any) -> dict[int, int]:
    return dict.fromkeys(range(log_map.logs), 0)


_by_shard = rebuild.by_shard
_plan = bulk.plan


def _plan_without_event_ids(dataset_id: str, ttl_ms: int, window_ms: int, max_ids: int,
                            groups: list[Any], puts: Any, *rest: Any, **kw: Any) -> Any:
    bare = pb.PutColumns()
    bare.CopyFrom(puts)
    del bare.event_ids[:]
    return _plan(dataset_id, ttl_ms, window_ms, max_ids,
                 [pb.WriteGroup(partition_key=g.partition_key, ops=g.ops) for g in groups], bare, *rest, **kw)


def _once(fn: Callable[[], Any], what: str, timeout_s: float = 60.0) -> Any:
    return fn()


def _bounds_said_by_status(self: Any) -> dict[int, tuple[int, int | None]] | None:
    try:
        rows = self.state.logs.status()
    except Exception:
        return None
    out = {r["log"]: (r["first"], r["last"] + 1 if r["replicas"] else None)
           for r in rows if r["log"] < self.state.kv_logs}
    return out if len(out) == self.state.kv_logs else None


def _by_shard_anywhere(s: Any, shards: list[int], heads: Any, receive: Any, deadline: float) -> None:
    _by_shard(s, shards, {lg: 0 for lg in heads}, receive, deadline)


def _items_but_digest(db: Any, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
    return ((k, v) for k, v in _items(db, prefix) if not k.startswith(b"D"))


def _holds_no_copy(holders_low: int | None, moves: list[Any], positions: Any) -> int | None:
    return _truncation_point(holders_low, [m for m in moves if m.phase != shard_moves.COPYING], positions)

_mark_retry = retries.mark_retry


def _retried_under_a_new_id(req: Any) -> None:
    _mark_retry(req)
    for r in ([getattr(i, i.WhichOneof("call")) for i in req.items] if isinstance(req, pb.ManyRequest)
              else [req]):
        r.header.request_id = world.unique_id()


def _recreated_start_move(zk: Any, m: Any, sets_version: int) -> None:
    """The record of a shard's ended move deleted and a new one created for its next move
    (whose version starts again at 0), as before the whole simulation found it."""
    path = f"{registry.MOVES}/{m.shard}"
    got = zk.exists(path)
    if got is not None and zk.get(path)[0] == registry.ENDED:
        zk.delete(path, version=got.version)
    _start_move(zk, m, sets_version)


_step = handoff.step


def _opened_at_once(place: handoff.Place, log_id: int, position: int, kind: handoff.Kind, ts_ms: int = 0,
                    to: int = -1, from_position: int = 0, generation: int = 0) -> handoff.Step:
    """A replica that takes a shard's records from the new log from its open record on,
    without waiting to apply the shard's hand-off in the old log."""
    if log_id != place.log and kind is handoff.Kind.OPEN and generation > place.generation:
        return handoff.Step(handoff.Verdict.APPLY, handoff.Place(log_id, position, True, place.version_base,
                                                                 place.ts_floor, generation))
    return _step(place, log_id, position, kind, ts_ms, to, from_position, generation)


# Each broken variant: the (owner, name, broken rule) swapped in for the run.
RULES: dict[str, list[Swap]] = {
    # a log server's store that does not sync what it writes: a power loss takes back
    # entries and fences it acknowledged
    "log-unsynced": [(RocksStore, "_write", lambda store, wb: store.synced.write(wb, sync=False))],
    # positions published as applied, perhaps not synced yet
    "publish-unsynced": [(bookkeeping, "durable_positions", _applied)],
    # a node truncates the log below its own position, ignoring the other holders'
    "truncate-ahead": [(Bookkeeping, "_truncation_point", _own_position)],
    # a strong read asks a replica for its state without waiting for the read index
    "read-anywhere": [(Coordinator, "read_index_by", _no_index)],
    # the rules before the whole simulation found a node restarting in the middle of a move:
    # a copy is taken in while the node starts, and installed as if it tailed the log only
    # once its tail thread runs, so its position jumps to the copy's, past its other shards'
    # records (storage_node/shard_intake.py takes_copies, storage_node/shard_copy.py tail)
    "copy-while-starting": [(shard_intake, "takes_copies", lambda s: True),
                            (shard_copy, "tail", _followed_only)],
    # the shard moves' model's variants (tests/sim/moves.py, retired), on the real code: a
    # copy installed behind the node's tail without the shard's records between
    # (storage_node/shard_copy.py catch_up), the mover recording a copy the destination
    # never took in (drivers/moves.py _copy). (Its no-hold: below.)
    "no-catch-up": [(shard_copy, "catch_up", _no_catch_up)],
    "join-early": [(moves, "_copy", _joined_uncopied)],
    # and its rebuild-high: a node that lost its disk rebuilt shard by shard
    # (storage_node/rebuild.py) with its tail of the log starting at the highest copy, the
    # other shards' records between never applied (shard_copy.rebuild). (Its rebuild-behind,
    # copies taken wherever their sources stand, was caught in none of seeds 1-30 here: the
    # sources stand near the log's head anyway.)
    "rebuild-high": [(shard_copy, "rebuild", _rebuilt_from_highest)],
    # a race only the whole simulation reaches: a mover paused past its session wakes with
    # the version it read of a move that ended since, and its stale write lands on the
    # shard's next move, whose record starts again at that version (catalog/registry.py
    # ENDED): the ended move's destination joins the next one and its leaving replica goes
    "moves-recreated": [(registry, "start_move", _recreated_start_move)],
    # the moves' model's no-hold: the log truncated while a shard of it is being copied (a
    # destination that holds no other shard of the log does not hold its truncation back)
    "no-hold": [(shard_moves, "truncation_point", _holds_no_copy)],
    # (Its stale-position, a copy recorded before the destination published its position
    # again, storage_node/shard_intake.py _publish, is harmless on the real code while the
    # copy is asked at the destination's own position, a position it published before then
    # never above the copy: caught in none of the seeds tried, docs/storage.md, so it is
    # no variant here: every variant must be caught, make soak.)
    # and its by-load, with the log's: placement blind to the machines the nodes run on
    "by-load": [(machines, "domains", lambda zk, role: failure_domains.unknown)],
    # and its no-digest: a shard's copy without its digest (storage_node/reads.py, what a
    # copy streams), and rebuild-behind: a bootstrap's copies (a rebuild's, or a whole one)
    # taken wherever their sources stand, not at or past the logs' heads
    # (storage_node/rebuild.py known_heads; caught with slow disks and links)
    "no-digest": [(reads, "_items", _items_but_digest)],
    "rebuild-behind": [(rebuild, "known_heads", _heads_unknown)],
    # a bootstrap's heads as the log servers' Status says them (a server that has not heard
    # the writer's last acknowledgement says a committed end before it), where they come
    # from a ReadIndex round past every entry acknowledged before it (storage_node/node.py
    # _log_bounds; seed 130 found it when rebuilds were rarer: a copy taken below what the
    # node had published from the disk it lost)
    "heads-by-status": [(node_module.StorageNode, "_log_bounds", _bounds_said_by_status)],
    # a node's start made once, through a ZooKeeper session lost meanwhile (runtime/process.py
    # through_zk_loss), as before nodes were paused in the simulation: the start ends there
    "start-once": [(node_module, "through_zk_loss", _once)],
    # the coordinator dropping a bulk write's event ids (coordinator/bulk.py plan): a task
    # run again under a new request id applies its events again
    "no-event-ids": [(bulk, "plan", _plan_without_event_ids)],
    # ... in a rebuild shard by shard only (storage_node/rebuild.py by_shard)
    "by-shard-behind": [(rebuild, "by_shard", _by_shard_anywhere)],
    # a rebuild, or a move's destination, that keeps a shard's copy taken before the shard's
    # hand-off to another log (storage_node/shard_copy.py in_current_stint): the node awaits
    # the shard's open record in the new log, whose tail its other shards' copies (or other
    # shards) took past it
    "stint-blind": [(shard_copy, "in_current_stint", lambda place, shard, log_map: True)],
    # a replica serving a bounded read however long ago it applied its log (record/staleness.py)
    "bounded-unchecked": [(staleness, "fresh_enough", lambda *_: True)],
    # a replica serving bounded reads whatever its log's stamps say of its clock
    # (record/staleness.py ClockWatch): caught with a node's clock off by seconds
    "clock-unchecked": [(staleness.ClockWatch, "doubt", lambda self, log_id, mono_s: None)],
    # the SDK sending a write again under a new request id (midtown/retries.py mark_retry)
    "retry-new-id": [(retries, "mark_retry", _retried_under_a_new_id)],
    # with HANDOFFS=1: a replica that takes the new log's records of a shard before it has
    # applied the shard's hand-off in the old log (storage_node/handoff.py step)
    "open-early": [(handoff, "step", _opened_at_once)],
    # ... and a log that takes a shard's records after its hand-off (log/seals.py admit):
    # a coordinator with an old map has them acknowledged on the old log
    "unsealed": [(Seals, "admit", lambda self, tags: None)],
    # with a data center lost and a scope failed over (tests/sim/failover_sim.py): what it
    # reports lost for sure counted from the new home's replicas alone (catalog/failover.py
    # _heard), while another data center's had applied more
    "heard-near": [(failover, "_heard", lambda at, there: max(p for p, _ in there.values()) - 1)],
    # ... and the replicas past the cut kept, not condemned (catalog/failover.py _condemned):
    # they hold writes the log no longer has
    "ahead-kept": [(failover, "_condemned", _condemned_behind)],
    # ... and its cut taken where the replicas said they stood, not made durable first
    # (storage_node/node.py said_positions): a source that loses power then holds the cut's
    # state no more
    "cut-unsynced": [(node_module, "said_positions", _applied)],
    # ... and its sources not held where they said they stand (storage_node/holds.py): one
    # cut off from ZooKeeper applies the old writer's entries past the cut meanwhile
    "cut-unheld": [(holds.Holds, "hold", lambda self, logs, hold: None)],
    # ... and the entries past a cut that the old home's writer still streams applied
    # (catalog/failover.py before_cut)
    "cut-entries-applied": [(failover, "before_cut", lambda cuts, position, epoch: False)],
}
