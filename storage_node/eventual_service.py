"""A storage node's eventual side: the Lww* calls of eventually consistent datasets,
anti-entropy with a peer, and the decision to drop this node's eventual values when it
was down longer than the tombstone grace. storage_node/lww.py is the replica it drives;
storage_node/node.py builds one and hands it the node's ZooKeeper session, store and
membership."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import grpc
from kazoo.client import KazooClient

from catalog import registry
from catalog import usage as usage_reports
from catalog.replica_sets import ReplicaSets
from midtown_pb import kv_pb2 as pb
from runtime import world
from runtime.refusals import BadRequest
from runtime.stubs import Calls
from storage_node import lww
from storage_node.limits import LWW_PAGE_MAX
from storage_node.lww import LwwReplica
from storage_node.reads import check_held
from storage_node.store import NodeStore

log = logging.getLogger("midtown.storage.eventual")
# Rows a page of anti-entropy asks a peer for.
ANTI_ENTROPY_PAGE = 1000
PEER_CALL_TIMEOUT_S = 30


def _check_lww_limit(limit: int) -> None:
    if not 1 <= limit <= LWW_PAGE_MAX:
        raise BadRequest(f"limit: {limit}, must be between 1 and {LWW_PAGE_MAX}")


class EventualService:
    def __init__(self, node_id: int, zk: KazooClient, store: NodeStore, replica: LwwReplica,
                 kv: Callable[[], registry.KvTopology], peers: Callable[[], dict[int, str]],
                 sets: Callable[[], ReplicaSets], stop: threading.Event, calls: Calls) -> None:
        """`kv`: the cluster's key-value topology as the node last read it (members change);
        `peers`: the other storage nodes that are up, id -> address; `sets`: which nodes
        hold each shard, as last read; `calls`: the way to them."""
        self.node_id = node_id
        self.zk = zk
        self.store = store
        self.lww = replica
        self.kv = kv
        self._peers = peers
        self._sets = sets
        self._stop = stop
        self.calls = calls
        self.purged = 0  # tombstones and expired values purged since start
        self.shards_pulled = 0  # shards anti-entropy read from a peer (hashes differed)
        self.repaired = 0  # values taken from peers by anti-entropy
        self.refill = False  # values dropped at start: take them from a peer at once

    # ---------------------------------------------------------------- calls
    def write(self, req: pb.LwwWriteRequest) -> pb.LwwWriteResponse:
        self._check_held(req.shard)
        return pb.LwwWriteResponse(applied=self.lww.write(req))

    def range(self, req: pb.LwwRangeRequest) -> pb.LwwRangeResponse:
        self._check_held(req.shard)
        _check_lww_limit(req.limit)
        return self.lww.range(req)

    def read(self, req: pb.LwwReadRequest) -> pb.LwwReadResponse:
        self._check_held(req.shard)
        if req.scan:
            _check_lww_limit(req.limit)
        return self.lww.read(req)

    def _check_held(self, shard: int) -> None:
        check_held(self.node_id, shard, self.kv().shards, lambda s: self._sets().holds(self.node_id, s))

    def hashes(self) -> pb.LwwHashesResponse:
        return pb.LwwHashesResponse(hashes=self.lww.hashes(self.kv().shards))

    # ---------------------------------------------------------------- background
    def anti_entropy_pass(self) -> None:
        """Pull from a random peer every eventual value newer than ours, shard by shard
        (storage_node/lww.py); run every anti-entropy interval, at once if this node
        dropped its own at start."""
        peers = self._peers()
        sets = self._sets()
        both = {nid: [sh for sh in sets.shards_of(self.node_id) if sets.holds(nid, sh)]
                for nid in peers}
        both = {nid: shared for nid, shared in both.items() if shared}  # peers with a shard of ours
        if not both:
            return
        peer = world.choice(sorted(both))
        shards = self.kv().shards
        addr = peers[peer]
        try:
            hashes = self.calls.call(addr, "LwwHashes", pb.LwwHashesRequest(), PEER_CALL_TIMEOUT_S)
            theirs = list(hashes.hashes)
            mine = self.lww.hashes(shards)
            for shard in both[peer]:
                if shard < len(theirs) and theirs[shard] == mine[shard]:
                    continue  # the same (key, version) pairs: nothing to take
                self.shards_pulled += 1
                after = b""
                while not self._stop.is_set():
                    page = self.calls.call(addr, "LwwRange", pb.LwwRangeRequest(
                        shard=shard, after=after, limit=ANTI_ENTROPY_PAGE), PEER_CALL_TIMEOUT_S)
                    self.repaired += self.lww.merge(page)
                    if not page.more:
                        break
                    after = page.keys[-1]
        except grpc.RpcError as e:
            log.debug("anti-entropy: %s", e.code())

    def drop_if_outlived(self) -> None:
        """If the peers have run for longer than the tombstone grace since this node was
        last up, they may have purged tombstones of values it still holds: drop its
        eventual values rather than hand those back (storage_node/lww.py)."""
        last_up = self.store.last_up_ms()
        peers_up = max((r.at_ms for n, r in usage_reports.read_reports(self.zk).items() if n != self.node_id),
                       default=0)
        if lww.outlived(last_up, peers_up, self.lww.grace_ms):
            log.warning("storage node %d was down for %.0f s of its peers' time, more than the "
                        "tombstone grace (%.0f s): dropping its eventual values; anti-entropy takes "
                        "them again from the peers", self.node_id, (peers_up - last_up) / 1000,
                        self.lww.grace_ms / 1000)
            self.lww.drop_all()
            self.refill = True
