"""A shard move's destination takes in a copy of the shard (catalog/shard_moves.py): from
one of the shard's replicas, as of one log position, streamed at a bounded rate (the
source paces it) and written to the store; then the apply loop installs it
(storage_node/shard_copy.py says where it stands) and this node publishes its positions,
so the mover may record it. Idempotent: a copy installed already is reported again, and
an earlier try's leftovers are dropped before a new one."""

from __future__ import annotations

import logging
from typing import Any

import grpc

from catalog import failover, registry
from catalog.routing import check_shard
from fleet.connect import bounded
from midtown_pb import kv_pb2 as pb
from runtime import membership, world
from runtime.refusals import BadRequest, Refusal
from storage_node import keys, shard_copy
from storage_node.state import NodeState

log = logging.getLogger("midtown.storage.intake")
SOURCE_WAIT_MS = 10_000  # how long a source may take to reach this node's position in the log
COPY_TIMEOUT_S = 3600.0
RATE_MB_S_MAX = 10_000.0
# A shard copy's chunks: small enough that a rate limit paces them evenly.
SHARD_CHUNK_BYTES = 256 * 1024


class CopyFailed(Exception):
    pass


def takes_copies(s: NodeState) -> bool:
    """Whether a node takes a shard copy in: not while it starts (its positions may yet be
    replaced by a bootstrap, and its tails are not started)."""
    return s.started


class Intake:
    def __init__(self, state: NodeState, applier: Any, bookkeeping: Any) -> None:
        """`applier`: the apply loop (it installs and drops copies); `bookkeeping`: it
        publishes this node's positions."""
        self.state = state
        self.applier = applier
        self.bookkeeping = bookkeeping
        self._busy = world.lock()  # one copy at a time
        # shard -> the answer of the call that installed its copy: a mover that retries (the
        # call in flight was cut, this node went on) is told what that copy took.
        self._installed: dict[int, pb.CopyShardResponse] = {}

    def copy(self, req: pb.CopyShardRequest) -> pb.CopyShardResponse:
        s = self.state
        check_shard(req.shard, s.kv.shards)
        if not 0 <= req.rate_mb_s <= RATE_MB_S_MAX:
            raise BadRequest(f"rate_mb_s: {req.rate_mb_s}, must be between 0 and {RATE_MB_S_MAX:g}")
        if not takes_copies(s):
            raise Refusal(grpc.StatusCode.UNAVAILABLE, f"storage node {s.node_id} is starting; retry")
        if not self._busy.acquire(timeout=1):
            raise Refusal(grpc.StatusCode.UNAVAILABLE, f"storage node {s.node_id} is taking in another "
                          "copy; retry")
        try:
            return self._copy(req)
        finally:
            self._busy.release()

    def _copy(self, req: pb.CopyShardRequest) -> pb.CopyShardResponse:
        s, shard = self.state, req.shard
        self._check_moving_here(shard)
        # Where the shard is now: a move never runs with a hand-off of the shard (both hold
        # its record under /midtown/moves), and the copy brings the shard's place with it.
        # The map read after the sync above names a hand-off that ended before the move began
        # (within the read's wait: a caller waits).
        s.learn_log_map(registry.read_log_map(bounded(s.zk), s.kv, s.log_count))
        log_id = s.log_map.log_of(shard)
        if shard in s.marks:  # installed by an earlier call: publish again and say so
            self._publish(log_id)
            done = pb.CopyShardResponse(position=s.marks[shard], installed_before=True)
            earlier = self._installed.get(shard)
            if earlier is not None and earlier.position == s.marks[shard]:
                done.keys, done.bytes, done.source = earlier.keys, earlier.bytes, earlier.source
            return done
        kv = registry.read_kv(s.zk) or s.kv
        holders = registry.read_replica_sets(s.zk, kv).of(shard)
        live = membership.members(s.zk, registry.STORAGE_NODES)
        # (not a replica a fail-over condemned for the shard's log: its copy is not the log's)
        condemned = failover.condemned(kv.failovers, log_id)
        order = [n for n in holders if n in live and n != s.node_id and n not in condemned]
        world.shuffle(order)
        order.sort(key=lambda n: n != req.prefer_source)
        errors = []
        for n in order:
            self.applier.drop_shard(shard)  # what an earlier try left
            try:
                at, ts, count, size = self.receive(live[n], shard, req.rate_mb_s,
                                                   min_position=s.positions[log_id][0])
            except (grpc.RpcError, CopyFailed) as e:
                msg = f"{e.code().name}: {e.details()}" if isinstance(e, grpc.RpcError) else str(e)
                log.warning("copying shard %d from node %d: %s", shard, n, msg)
                errors.append(f"node {n}: {msg}")
                continue
            self._check_moving_here(shard)  # not given up meanwhile
            if not shard_copy.in_current_stint(s.store.place(shard), shard, s.log_map):
                why = "its copy is of the shard's stint before its hand-off, or before the open record"
                log.warning("copying shard %d from node %d: %s", shard, n, why)
                errors.append(f"node {n}: {why}")
                continue
            position = self.applier.install(shard, at, ts)
            self._publish(log_id)
            log.info("took in shard %d from node %d: %d keys, %d bytes, at %d",
                     shard, n, count, size, position)
            done = pb.CopyShardResponse(position=position, keys=count, bytes=size, source=live[n])
            self._installed[shard] = done
            return done
        self.applier.drop_shard(shard)
        raise Refusal(grpc.StatusCode.UNAVAILABLE, f"no replica of shard {shard} gave a whole copy"
                      + (f" ({'; '.join(errors)})" if errors else " (none is up)") + "; retry")

    def _check_moving_here(self, shard: int) -> None:
        """FAILED_PRECONDITION unless a move of `shard` to this node is under way. The
        node's view of the sets is read again first: one a little old may still name it
        for a shard it left a moment ago, and it must not apply the shard's records while
        a copy of it comes in. ZooKeeper is synced first: the mover wrote the move through
        another member, and a read from this node's member may not have it yet (`cluster
        rebalance` over a three-member ensemble under load: "no move ... is under way")."""
        s = self.state
        quick = bounded(s.zk)  # a caller waits: ZooKeeper not answering ends it (UNAVAILABLE)
        quick.sync(registry.MOVES)
        s.read_sets()
        if s.holds(shard):
            raise Refusal(grpc.StatusCode.FAILED_PRECONDITION,
                          f"storage node {s.node_id} holds shard {shard} already", field="shard")
        m = registry.read_moves(quick).get(shard)
        if m is None or m[0].dest != s.node_id:
            raise Refusal(grpc.StatusCode.FAILED_PRECONDITION,
                          f"no move of shard {shard} to storage node {s.node_id} is under way", field="shard")

    def _publish(self, log_id: int) -> None:
        if not self.bookkeeping.publish_now(log_id):
            raise Refusal(grpc.StatusCode.UNAVAILABLE, "the copy is installed, but publishing this node's "
                          "position failed; retry")

    def receive(self, addr: str, shard: int, rate_mb_s: float,
                min_position: int) -> tuple[int, int, int, int]:
        """Stream a copy of `shard` from `addr` into the store, taken at `min_position` or
        past it: (its position, log time, pairs, bytes). A move asks for this node's own
        position in the log: a position it published before is then never above the
        copy's (catalog/shard_moves.py may_record_copy); a rebuild asks for the log's head
        (storage_node/rebuild.py)."""
        s = self.state
        want = pb.SnapshotRequest(one_shard=True, shard=shard, min_position=min_position,
                                  wait_ms=SOURCE_WAIT_MS, rate_mb_s=rate_mb_s)
        prefixes = keys.shard_prefixes(shard)
        count = size = 0
        chunks, call = s.peer_calls.stream(addr, "Snapshot", want, COPY_TIMEOUT_S)
        try:
            for chunk in chunks:
                if len(chunk.keys) != len(chunk.values):
                    raise CopyFailed(f"a chunk with {len(chunk.keys)} keys and {len(chunk.values)} values")
                wb = s.store.batch()
                for k, v in zip(chunk.keys, chunk.values):
                    if not (k.startswith(prefixes) or keys.shard_index_entry(k, shard)):
                        raise CopyFailed(f"a key that is not shard {shard}'s: {k[:20]!r}")
                    wb.put(k, v)
                    size += len(k) + len(v)
                s.store.write(wb)
                count += len(chunk.keys)
                if chunk.last:
                    if chunk.count != count:
                        raise CopyFailed(f"{count} keys received, the source sent {chunk.count}")
                    s.store.sync()
                    return chunk.position, chunk.log_time_ms, count, size
        finally:
            if call is not None:  # a copy given up: its stream too
                call.cancel()
        raise CopyFailed("the stream ended before its last chunk")
