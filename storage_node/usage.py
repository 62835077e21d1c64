"""What each dataset takes on this node: the bytes of its stored keys and values, counted
every Settings.usage_interval_s (storage_node/settings.py) and published for the coordinators' quota checks
(coordinator/quotas.py says how they are used)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from storage_node import keys
from storage_node.store import NodeStore

DATA_PREFIXES = (b"E", b"K")  # eventual and strong datasets' values (storage_node/keys.py)


def tally(items: Iterable[tuple[bytes, bytes]]) -> dict[str, int]:
    """Dataset id -> bytes of its keys and stored values, over b"K" and b"E" entries."""
    out: dict[str, int] = {}
    for k, v in items:
        d = keys.dataset_of(k)
        out[d] = out.get(d, 0) + len(k) + len(v)
    return out


def data_items(store: NodeStore) -> Iterator[tuple[bytes, bytes]]:
    """Every stored value entry of every dataset, strong and eventual."""
    for prefix in DATA_PREFIXES:
        yield from store.under(prefix)


def count(store: NodeStore) -> dict[str, int]:
    return tally(data_items(store))
