"""What each dataset takes on this node: the bytes of its stored keys and values, counted
every Settings.usage_interval_s (storage_node/settings.py) and published for the coordinators' quota checks
(coordinator/quotas.py says how they are used). A count reads in pieces with rests between
them, spread over up to USAGE_SPREAD_S (storage_node/limits.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from runtime import world
from storage_node import keys
from storage_node.store import NodeStore

DATA_PREFIXES = (b"E", b"K")  # eventual and strong datasets' values (storage_node/keys.py)
# Keys read between two rests of a count (about 2 ms of work here).
COUNT_PIECE = 2_000


def tally(items: Iterable[tuple[bytes, bytes]]) -> tuple[dict[str, int], dict[int, int]]:
    """(dataset id -> bytes, shard -> bytes) of the keys and stored values, over b"K" and
    b"E" entries (the shards' bytes are what `midtown cluster rebalance` evens out)."""
    by_dataset: dict[str, int] = {}
    by_shard: dict[int, int] = {}
    for k, v in items:
        d = keys.dataset_of(k)
        n = len(k) + len(v)
        by_dataset[d] = by_dataset.get(d, 0) + n
        shard = keys.shard_of_key(k)
        by_shard[shard] = by_shard.get(shard, 0) + n
    return by_dataset, by_shard


def data_items(store: NodeStore, piece_done: Callable[[float], None] = lambda took_s: None,
               piece: int = COUNT_PIECE) -> Iterator[tuple[bytes, bytes]]:
    """Every stored value entry of every dataset, strong and eventual, `piece` at a time,
    each piece from an iterator of its own (NodeStore.local_range; one held through a rest
    would pin memtables that ingestion has filled since). `piece_done` gets the seconds each piece took, the
    consumer's work on it included (runtime.loops.Spread rests then)."""
    for prefix in DATA_PREFIXES:
        start = b""
        while True:
            t0 = world.monotonic()
            page = store.local_range(prefix, start, b"", piece)
            for lkey, v in page:
                yield prefix + lkey, v
            piece_done(world.monotonic() - t0)
            if len(page) < piece:
                break
            start = page[-1][0] + b"\x00"
