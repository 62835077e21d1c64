"""How many bytes a stored value takes on a storage node, as the nodes count it for the
quotas (storage_node/usage.py): its key as storage_node/keys.py lays it out, and its
value with the version and expiry stored beside it (tests/test_quotas.py checks both
against the layout)."""

from __future__ import annotations

# b"K" shard:4 len(dataset):1 dataset len(pkey):4 pkey lkey
VALUE_KEY_FIXED = 1 + 4 + 1 + 4
# Bytes a stored value takes beyond its own: version and expiry, and an eventual dataset's
# tombstone flag (storage_node/lww.py).
VALUE_OVERHEAD = 17


def value_key_len(dataset_id: str, pkey: bytes, lkey: bytes) -> int:
    """The length of a value's key on a storage node."""
    return VALUE_KEY_FIXED + len(dataset_id.encode()) + len(pkey) + len(lkey)
