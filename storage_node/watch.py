"""A storage node's change stream: the changes it recorded of one dataset in some of its
shards (storage_node/changes.py), from given positions, as the node applies them.

A message carries whole positions, in order per shard, and each shard's resume point
(every change below it was sent). With nothing new, a message with the resume points
alone goes about once a second, so a watcher learns how far it has seen. The stream ends
after its duration, when the node stops, or with a refusal: a position below what the node
keeps (OUT_OF_RANGE, naming the first one held), or a shard the node no longer holds."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import grpc

from catalog.log_map import LogMap
from midtown_pb import kv_pb2 as pb
from runtime import world
from runtime.refusals import BadRequest, Refusal
from storage_node import changes, checks, keys
from storage_node.handoff import Place
from storage_node.store import NodeStore

PROGRESS_S = 1.0  # a message with the resume points alone, at least this often
WATCH_DURATION_MS_DEFAULT = 60_000
WATCH_DURATION_MS_MAX = 600_000
WATCH_CHANGES_DEFAULT = 1_000
WATCH_BYTES_MAX = 1 << 20  # per message, about: a position's changes all go together


def change_to_pb(shard: int, c: changes.Change) -> pb.Change:
    return pb.Change(kind=pb.Change.Kind.Value(c.kind.name), shard=shard, partition_key=c.partition_key,
                     local_key=c.local_key, value=c.value, version=c.version, expires_at_ms=c.expires_at_ms,
                     position=c.position, log_time_ms=c.log_time_ms)


class ChangeFeed:
    def __init__(self, node_id: int, store: NodeStore, cond: threading.Condition,
                 positions: dict[int, tuple[int, int]], log_map: Callable[[], LogMap],
                 holds: Callable[[int], bool], stop: threading.Event,
                 place_of: Callable[[int], Place]) -> None:
        """`positions`: the node's (next position, log time) per log, moved by its applier
        once a batch (with its changes) is written, which then notifies `cond`;
        `place_of(shard)`: the log the node takes the shard's records from (handoff.py)."""
        self.node_id = node_id
        self.store = store
        self.cond = cond
        self.positions = positions
        self.log_map = log_map
        self.holds = holds
        self.stop = stop
        self.place_of = place_of

    def _applied(self, shard: int) -> int:
        """The shard's position (in its own order: changes.py) below which every change of it
        is written here."""
        p = self.place_of(shard)
        return self.positions[p.log][0] + p.version_base

    def _check(self, shard: int, at: int) -> None:
        if not self.holds(shard):
            raise Refusal(grpc.StatusCode.UNAVAILABLE, f"storage node {self.node_id} does not hold "
                          f"shard {shard} (now); another replica serves its changes")
        floor = self.store.change_floor(shard)
        if at < floor:
            raise Refusal(grpc.StatusCode.OUT_OF_RANGE, f"from: shard {shard} position {at} is no longer "
                          f"held; its changes are kept from position {floor}")

    def watch(self, req: pb.StorageWatchRequest) -> Iterator[pb.WatchResponse]:
        """Checks the request at once (BadRequest names a bad field; Refusal), then streams."""
        if not req.dataset:
            raise BadRequest("dataset: empty")
        if not getattr(req, "from"):
            raise BadRequest("from: no shard to watch")
        shards = len(self.log_map().of)
        at = dict(getattr(req, "from"))
        for shard, p in at.items():
            if shard >= shards:
                raise BadRequest(f"from: shard {shard}, this cluster has shards 0..{shards - 1}")
            self._check(shard, p)
        for shard, log_id in req.logs.items():
            if shard not in at:
                raise BadRequest(f"logs: shard {shard} is not watched (no from position)")
            checks.placed_in(self.place_of(shard).log, shard, log_id, "logs: ")
        if req.duration_ms > WATCH_DURATION_MS_MAX:
            raise BadRequest(f"duration_ms: {req.duration_ms}, the limit is {WATCH_DURATION_MS_MAX}")
        pkey = req.partition_key if req.HasField("partition_key") else None
        end = world.monotonic() + (req.duration_ms or WATCH_DURATION_MS_DEFAULT) / 1000
        max_changes = req.max_changes or WATCH_CHANGES_DEFAULT
        return self._stream(req.dataset, at, pkey, end, max_changes)

    def _stream(self, dataset: str, at: dict[int, int], pkey: bytes | None, end: float,
                max_changes: int) -> Iterator[pb.WatchResponse]:
        sent = 0.0
        first = True
        while True:
            out: list[pb.Change] = []
            more = False
            for shard in sorted(at):
                upto = self._applied(shard)  # all written below it
                start = at[shard]
                if start >= upto or len(out) >= max_changes:
                    more = more or start < upto
                    continue
                prefix = keys.change_prefix(shard, dataset)
                items = self.store.synced.items(keys.change_key(shard, dataset, start, 0),
                                                keys.prefix_end(prefix))
                got, nxt = changes.page(items, upto, max_changes - len(out), WATCH_BYTES_MAX, pkey)
                self._check(shard, start)  # none of what it read was reclaimed meanwhile, nor moved away
                out.extend(change_to_pb(shard, c) for c in got)
                at[shard] = upto if nxt is None else nxt
                more = more or nxt is not None
            now = world.monotonic()
            if out or first or now - sent >= PROGRESS_S:
                first = False
                sent = now
                yield pb.WatchResponse(changes=out, positions=at)
            if now >= end or self.stop.is_set():
                return
            if not more:
                with self.cond:
                    if all(at[s] >= self._applied(s) for s in at):
                        self.cond.wait(max(0.01, min(PROGRESS_S, end - now)))
