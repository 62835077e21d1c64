"""Rebuilding a storage node shard by shard: for a node that must bootstrap (its state is
gone, or a log was truncated past it) while no single member holds every shard it holds,
as in a cluster of more than R nodes, or while a shard whose copy a move recorded is on
its way to it (a whole copy would not mark it: storage_node/shard_copy.py).

Inside the bootstrap's marker (storage_node/bootstrap.py begin/finish: a node that stops
half-way starts again at its next start), the node deletes its state and takes a copy of
each shard it is to hold from one of that shard's live replicas (the `Snapshot` stream a
move's destination uses, storage_node/shard_intake.py), each taken at or past the head its
log had when the rebuild began: so at or past any position this node published before, and
the logs, held back for this node by that position, are never truncated past what it is to
read. Once every copy is in, the log map is read again, and a copy that does not stand in
its shard's stint as the map has it now (taken before a hand-off of the shard, or while
one is under way) is taken again: kept, it would leave the node awaiting the shard's open
record in the new log while its tail there, started from its other shards' copies,
stands past it (the whole-cluster simulation's seed 88; "stint-blind").
Then, per log, its tail starts at the lowest copy and each shard is marked at its own
(storage_node/shard_copy.py rebuild), all written in one batch with the marker going last.
The whole-cluster simulation runs these steps on real nodes losing their disks and
crashing or paused mid-rebuild (tests/sim/nodes.py), and catches a rebuild that takes
copies from behind the heads ("by-shard-behind", with slow links and nodes paused) or
starts a tail at the highest copy ("rebuild-high").

What does not come: the published positions of the members (the next publications bring
them; until then this node truncates nothing) and the eventual datasets' values of shards
it did not copy (anti-entropy)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

import grpc

from catalog import registry
from catalog.log_map import LogMap
from catalog.replica_sets import ReplicaSets
from catalog.shard_moves import Move
from runtime import world
from storage_node import bootstrap, shard_copy
from storage_node.shard_intake import CopyFailed
from storage_node.state import NodeState
from storage_node.store import BatchView

log = logging.getLogger("midtown.storage.rebuild")
# (source address, shard, rate MB/s, minimum position) -> (position, log time, pairs, bytes)
Receive = Callable[[str, int, float, int], tuple[int, int, int, int]]


def wanted(node_id: int, sets: ReplicaSets, moves: Mapping[int, Move]) -> tuple[list[int], list[int]]:
    """(the shards the sets name this node for, the shards moving to it): a bootstrap must
    bring both, or it would join a shard without it. Those still copying too: the copy
    this node's lost store took in may have been answered to a mover, which records it
    after this read (the whole-cluster simulation's seed 1083: a node that lost its disk
    right after it took a copy in joined the shard empty). A mover that asks for the copy
    again is told of the one the rebuild installed."""
    moving = sorted(s for s, m in moves.items() if m.dest == node_id)
    return sorted(sets.shards_of(node_id)), moving


def known_heads(shards: list[int], heads: Mapping[int, int | None], log_map: LogMap) -> dict[int, int]:
    """The heads of the logs that carry `shards`; BootstrapFailed naming the logs whose
    head no log server told (a copy could then be taken behind a position this node
    published before, and the log truncated past its tail)."""
    logs = log_map.logs_of(shards)
    unknown = [lg for lg in logs if heads.get(lg) is None]
    if unknown:
        raise bootstrap.BootstrapFailed(f"no log server answered with the head of logs {unknown}")
    return {lg: heads[lg] for lg in logs}  # type: ignore[misc]


def by_shard(s: NodeState, shards: list[int], heads: Mapping[int, int | None], receive: Receive,
             deadline: float) -> None:
    """Replace this node's state by a copy of each of `shards`, each at or past its log's
    head in `heads` (log -> next position when the rebuild began, None if unknown: then
    BootstrapFailed before anything is deleted). BootstrapFailed when a shard has no
    replica that gives a whole copy by `deadline` (world.monotonic)."""
    known_heads(shards, heads, s.log_map)
    bootstrap.begin(s.store.db, s.store.sync)
    tails = _take(s, shards, heads, receive, deadline)
    bootstrap.finish(s.store.db, s.store.sync)
    log.info("rebuilt shard by shard: %d shards, tails %s", len(shards),
             {lg: p for lg, (p, _) in tails.items()})


def retake(s: NodeState, logs: set[int], heads: Mapping[int, int | None], receive: Receive,
           deadline: float) -> list[int]:
    """A node a fail-over condemned (catalog/failover.py) takes its shards of the cut `logs`
    again, and nothing else: each dropped, then copied from a replica not condemned for
    them (shard by shard, as a rebuild: at or past the log's head in `heads`), the node's
    tail of each of those logs started again from the copies. Its other shards, and its
    positions in the other logs, stay as they are: they are the logs' state (the scope's
    logs carry its shards only; a node holding a global shard that only condemned nodes
    hold besides it takes it from them). A node stopped half-way does it all again at its
    next start (it is condemned until it is done). The members' published positions of
    those logs are forgotten with them. The shards taken again."""
    held, moving = wanted_now(s)
    shards = sorted(x for x in {*held, *moving} if _copy_log(s, x) in logs or s.log_map.log_of(x) in logs)
    known_heads(shards, heads, s.log_map)
    view = BatchView(s.store)
    for x in shards:
        view.drop_shard(x, _copy_log(s, x))
    # The members' positions it applied past the cut were published in entries the logs no
    # longer have, and may stand past where the members retake theirs (the whole-cluster
    # simulation's seed 18 with a fail-over: node 2, retaking its shards of log 1 at 9, met
    # the log truncated to 13 by nodes that still counted its position 17 from past the
    # cut). Forgotten: the next publications bring them, and until then the logs wait.
    for lg in logs:
        view.forget_member_positions(lg)
    view.commit({})
    for key in [k for k in s.member_positions if k[0] in logs]:
        del s.member_positions[key]
    if shards:
        tails = _take(s, shards, heads, receive, deadline)
        log.info("took again the shards of the logs a fail-over cut (%s): %s, tails %s", sorted(logs), shards,
                 {lg: p for lg, (p, _) in tails.items()})
    return shards


def wanted_now(s: NodeState) -> tuple[list[int], list[int]]:
    """`wanted` for this node, by its replica sets and the moves as ZooKeeper has them now."""
    return wanted(s.node_id, s.sets, {x: m for x, (m, _) in registry.read_moves(s.zk).items()})


def _take(s: NodeState, shards: list[int], heads: Mapping[int, int | None], receive: Receive,
          deadline: float) -> dict[int, tuple[int, int]]:
    """A copy of each of `shards` into the store (none of them in it), each in its stint;
    then, per log, the node's tail started at the lowest and each shard marked at its own:
    the logs' new (tail, log time)."""
    copies: dict[int, tuple[int, int]] = {}  # shard -> (position, log time) of its copy
    todo = list(shards)
    while todo:
        known = known_heads(todo, heads, s.log_map)  # (a shard handed over since: its new log's)
        for i, shard in enumerate(todo):
            copies[shard] = _copy(s, shard, known[s.log_map.log_of(shard)], receive, deadline)
            log.info("rebuild: shard %d of %d (%d) taken at %d", i + 1, len(todo), shard, copies[shard][0])
        # Each copy must stand in its shard's stint now, with no hand-off of it under way:
        # a copy from before a hand-off would leave this node awaiting the shard's open
        # record in the new log, whose tail (started from its other shards' copies) may
        # stand past it already (the whole-cluster simulation's seed 88)
        s.learn_log_map(registry.read_log_map(s.zk, s.kv, s.log_count))
        todo = [x for x in shards if not shard_copy.in_current_stint(s.store.place(x), x, s.log_map)]
        if todo:
            log.info("rebuild: shards %s were copied before a hand-off of theirs: taken again", todo)
            view = BatchView(s.store)
            for x in todo:
                view.drop_shard(x, _copy_log(s, x))
            view.commit({})
            if world.monotonic() > deadline:
                raise bootstrap.BootstrapFailed(f"shards {todo} were handed over again and again while "
                                                "copied")
            world.sleep(0.5)
    view = BatchView(s.store)
    tails: dict[int, tuple[int, int]] = {}
    for lg in sorted({_copy_log(s, x) for x in copies}):
        mine = {x: p for x, (p, _) in copies.items() if _copy_log(s, x) == lg}
        tail, marks = shard_copy.rebuild(mine)
        tails[lg] = (tail, min(ts for p, ts in copies.values() if p == tail))
        view.marks.update(marks)
    with s.commit_lock:
        view.commit(tails)
    return tails


def _copy_log(s: NodeState, shard: int) -> int:
    """The log a copy of `shard` in the store stands in: its place's, which the copy brings
    if the shard was ever handed over (storage_node/handoff.py), else the map's."""
    place = s.store.place(shard)
    return place.log if place is not None else s.log_map.log_of(shard)


def _copy(s: NodeState, shard: int, head: int, receive: Receive, deadline: float) -> tuple[int, int]:
    """A copy of `shard` at or past `head` from one of its live replicas, into the store."""
    errors: list[str] = []
    while True:
        live = s.peer_ids(_copy_log(s, shard))  # (not condemned for the shard's log)
        sources = [n for n in s.sets.of(shard) if n in live]
        world.shuffle(sources)
        for n in sources:
            try:
                at, ts, _, _ = receive(live[n], shard, 0.0, head)
                return at, ts
            except (grpc.RpcError, CopyFailed) as e:
                msg = f"{e.code().name}: {e.details()}" if isinstance(e, grpc.RpcError) else str(e)
                log.warning("rebuild: copying shard %d from node %d: %s", shard, n, msg)
                errors.append(f"node {n}: {msg}")
                view = BatchView(s.store)  # what the failed try left
                view.drop_shard(shard, _copy_log(s, shard))
                view.commit({})
        if world.monotonic() > deadline:
            raise bootstrap.BootstrapFailed(f"no replica of shard {shard} gave a whole copy ("
                                            + ("; ".join(errors[-3:]) or "none is up") + ")")
        world.sleep(1)
