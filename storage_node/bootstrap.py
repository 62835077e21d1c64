"""Bootstrapping a storage node from a peer: for a node that is new, or whose saved
positions lie below what the logs still hold (it was taken out of the membership and the
logs were truncated past it).

The peer streams a consistent copy of its whole state from a RocksDB snapshot: shards,
digests, the dedup table, the replicated table of published positions and, in the same
snapshot, the position of every log that state stands at. Effects and positions are
written together (storage_node/store.py), so the copy is the state after exactly those
log prefixes; the new node then applies each log from there. A log is truncated only below
every holder's published position, and a holder publishes only what it has applied, so a
peer's position is not below the truncation point when the copy is taken. But the node
taking it may have published positions before (its store lost): until it publishes again,
those hold truncation back, no lower. A peer that was behind them (restarted, or on a slow
disk) catches up and publishes while its copy is on its way, and the log may then be
truncated past the copy before the node reads on from it (the whole-cluster simulation
found it with slow disks and links). So a copy must stand at or past the head each log it
applies had when the bootstrap began (`behind`; storage_node/node.py takes another copy
otherwise), as a rebuild's copies do (storage_node/rebuild.py).

The copy replaces the node's state in place: a marker key goes in first (synced), then
everything else is deleted and the pairs written in batches; the marker goes last. A node
that stops half-way finds the marker at its next start and bootstraps again.

A node that holds shards no single member holds all of is rebuilt shard by shard instead,
inside the same marker (storage_node/rebuild.py)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from typing import Any

import grpc
from rocksdict import Rdict, WriteBatch

from midtown_pb import kv_pb2 as pb
from runtime.stubs import Calls
from storage_node import keys

log = logging.getLogger("midtown.storage.bootstrap")

MARKER = b"\x00bootstrapping"  # sorts before every state key (they start with a letter)


def unfinished(store: Any) -> bool:
    """Whether a bootstrap began on this store and did not finish (its state is partial:
    the node bootstraps again when it starts)."""
    return store._get(MARKER) is not None
STATE_FIRST, STATE_END = b"\x01", b"\xff"
CHUNK_BYTES = 1 << 20
# How long a peer asked for a whole copy waits to apply the logs up to the bootstrap's
# heads before it refuses (Behind) and the next peer is asked: a peer a little behind (its
# tail following a new writer, a pause) catches up, where a copy taken at once would be
# of no use (the whole-cluster simulation's seed 152: a node copied from a lagging peer
# over and over, each copy behind the heads its try began with, to the run's end).
HEADS_WAIT_MS = 5_000


class BootstrapFailed(Exception):
    pass


def chunks(pairs: Iterable[tuple[bytes, bytes]],
           chunk_bytes: int = CHUNK_BYTES) -> Iterator[pb.SnapshotChunk]:
    """The peer's side: key-value pairs in chunks of about `chunk_bytes`, the last one
    marked and counting every pair."""
    keys: list[bytes] = []
    values: list[bytes] = []
    size = count = 0
    for k, v in pairs:
        if k == MARKER:
            continue
        keys.append(k)
        values.append(v)
        size += len(k) + len(v)
        count += 1
        if size >= chunk_bytes:
            yield pb.SnapshotChunk(keys=keys, values=values)
            keys, values, size = [], [], 0
    yield pb.SnapshotChunk(keys=keys, values=values, last=True, count=count)


def needed(saved: dict[int, int], first_available: dict[int, int], marker: bool, lost: bool = False) -> bool:
    """Whether a node must bootstrap: an earlier bootstrap did not finish, or some log
    it applies was truncated past its saved position, or its store was lost (`lost`: it
    is empty while the node's id published positions before; the logs may be truncated
    below those any moment now, past where it would start reading: the whole-cluster
    simulation's seed 1159 saw the truncation land just after this check)."""
    return marker or lost or any(saved.get(lg, 0) < first for lg, first in first_available.items())


def behind(positions: dict[int, int], heads: dict[int, int]) -> dict[int, int]:
    """The logs of `heads` (log -> its head when the bootstrap began) at whose head or past
    it a copy standing at `positions` (log -> position) is not: log -> its position."""
    return {lg: positions.get(lg, 0) for lg, head in heads.items() if positions.get(lg, 0) < head}


def copy_from(db: Rdict, peers: list[str], sync: Callable[[], None], calls: Calls,
              heads: Mapping[int, int] | None = None, shards: Collection[int] | None = None) -> str:
    """Replace the state in `db` (a rocksdict Rdict) by a peer's; returns the peer used.
    `sync()` makes what was written durable; `calls`: the way to the peers; `heads`: the
    positions of each log the copy must stand at or past (a peer waits up to
    HEADS_WAIT_MS to apply them, else refuses and the next is asked). BootstrapFailed if
    no peer gave a whole copy.

    With `shards` (the shards this node holds), the copy must come from a peer that held
    every one of them when it took its checkpoint (it says which it held: a peer chosen
    because it held them may have left one by a move by the time its copy is taken; the
    whole-cluster simulation's seed 431 with the faults drawn for any-generation: node 1
    copied node 3's store just after node 3 had dropped shard 3, and held shard 3 empty);
    another peer, or another try, is asked if not. The peer's marks of shards this node
    does not hold are left out: a mark says a copy of the shard was installed *here* (by a
    move: storage_node/shard_copy.py), and the peer's are not this node's. Kept, one made
    this node apply a shard it does not hold from the mark on, and its intake take it for
    the copy of a move of that shard to this node begun meanwhile (make soak's every-broken
    step, seed 96 with any-generation's faults, as built: node 3, its disk lost, copied node
    0's store with node 0's mark of shard 5 at 117 while shard 5 was moved to node 3; log 1
    was truncated to 147 meanwhile, and node 3 stopped behind it). The shard's other keys
    stay until the node drops what it neither holds nor takes in
    (storage_node/bookkeeping.py), and an intake drops them before its copy."""
    errors = []
    at_least = [(heads or {}).get(lg, 0) for lg in range(max(heads, default=-1) + 1)] if heads else []
    for addr in peers:
        try:
            n = _copy_one(db, addr, sync, calls, at_least, shards)
            log.info("bootstrapped from %s: %d keys", addr, n)
            return addr
        except (grpc.RpcError, BootstrapFailed) as e:
            msg = e.details() if isinstance(e, grpc.RpcError) else str(e)
            log.warning("bootstrap from %s failed: %s", addr, msg)
            errors.append(f"{addr}: {msg}")
    raise BootstrapFailed("no peer gave a whole copy" + (f" ({'; '.join(errors)})" if errors else
                                                         " (no live peer)"))


def begin(db: Rdict, sync: Callable[[], None]) -> None:
    """The marker in (synced), then the old state out: a node that stops before `finish`
    copies again at its next start."""
    db.put(MARKER, b"1")
    sync()
    db.delete_range(STATE_FIRST, STATE_END)


def finish(db: Rdict, sync: Callable[[], None]) -> None:
    """The copy is whole: make it durable, then take the marker out."""
    sync()
    db.delete(MARKER)
    sync()


def _copy_one(db: Rdict, addr: str, sync: Callable[[], None], calls: Calls, at_least: list[int],
              shards: Collection[int] | None) -> int:
    begin(db, sync)
    req = pb.SnapshotRequest(min_positions=at_least, wait_ms=HEADS_WAIT_MS if at_least else 0)
    chunks, call = calls.stream(addr, "Snapshot", req, 3600)
    try:
        n = 0
        for chunk in chunks:
            if len(chunk.keys) != len(chunk.values):
                raise BootstrapFailed(f"a chunk with {len(chunk.keys)} keys and {len(chunk.values)} values")
            wb = WriteBatch(raw_mode=True)
            for k, v in zip(chunk.keys, chunk.values):
                if not STATE_FIRST <= k < STATE_END:
                    raise BootstrapFailed(f"a key outside the state: {k[:20]!r}")
                marked = keys.shard_of_mark(k)
                if marked is None or shards is None or marked in shards:
                    wb.put(k, v)
            db.write(wb)
            n += len(chunk.keys)
            if chunk.last:
                if chunk.count != n:
                    raise BootstrapFailed(f"{n} keys received, the peer sent {chunk.count}")
                gone = sorted(set(shards or ()) - set(chunk.held)) if chunk.held_known else []
                if gone:
                    raise BootstrapFailed(f"the peer no longer held shards {gone} when it took its copy")
                finish(db, sync)
                return n
    finally:
        if call is not None:  # a copy given up: its stream too
            call.cancel()
    raise BootstrapFailed("the stream ended before its last chunk")
