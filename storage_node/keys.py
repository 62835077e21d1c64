"""The storage node's RocksDB key layout (big-endian, so byte order is numeric order).

  b"K" shard:4 len(dataset):1 dataset len(pkey):4 pkey lkey -> version:8 expires_at:8 value
  b"P" log_id:4                                               -> next position:8 last ts:8
  b"D" shard:4                                                -> digest:8
  b"R" shard:4 0x00 request_id                                -> ts:8 RecordResult (protobuf)
  b"R" shard:4 0x01 len(dataset):1 dataset event_id           -> ts:8 position:8 seq:4 GroupResult
       (one table of ids seen: a request id's first outcome, an event id's first outcome)
  b"O" shard:4 len(dataset):1 dataset position:8              -> ts:8 (seq:4 len:2 event_id)*
       (the ids a record recorded, one entry per record: the event ids by age, oldest first)
  b"N" shard:4 len(dataset):1 dataset                         -> event ids held:8
  b"Q" log_id:4 node_id:4                                     -> published position:8
  b"T" log_id:4 ts:8 shard:4 request_id                       -> b"" (the R entries by log time)
  b"X" log_id:4 expires_at:8 K-key                            -> b"" (values with a TTL by expiry)
  b"G" log_id:4 dataset                                       -> b"" (a drop this log applied)
  b"L"                                                        -> when this node was last up: ms:8
  b"H" shard:4                                                -> XOR of a hash of each b"E" key
                                                                 of the shard with its version
  b"E" shard:4 (as after b"K")                                -> version:8 expires_at:8 deleted:1 value
                                                                 (eventual datasets: storage_node/lww.py)
  b"M" shard:4                                                -> position:8 (the shard's records below it
                                                                 came with a copy: storage_node/shard_copy.py)
  b"C" shard:4 len(dataset):1 dataset position:8 seq:4        -> a change of a strong dataset's key
                                                                 (storage_node/changes.py)
  b"W" shard:4                                                -> position:8 (the shard's changes below it
                                                                 are reclaimed)
  b"S" shard:4                                                -> log:4 since:8 opened:1 version base:8
                                                                 (signed) time floor:8 generation:4:
                                                                 where the shard's records come from,
                                                                 once it was handed to another log
                                                                 (storage_node/handoff.py)

All local keys of one partitioning key share a prefix, so a scan is one range."""

from __future__ import annotations

import struct
from functools import lru_cache

from record.model import Stored
from storage_node.handoff import Place

_I = struct.Struct(">I")
_Q = struct.Struct(">Q")
_VH = struct.Struct(">QQ")
_SEQ = struct.Struct(">IH")
# The layout facts a page cut into columns reads (storage_node/arrow_pages.py): a stored
# value starts with its version and expiry (encode_stored), and a value key's partitioning
# key is preceded by its length (partition_prefix), all big-endian.
STORED_HEADER_BYTES = _VH.size
PARTITION_LENGTH_BYTES = _I.size


def partition_prefix(shard: int, dataset: str, pkey: bytes) -> bytes:
    return b"K" + _shard_dataset(shard, dataset) + _I.pack(len(pkey)) + pkey


def value_key(shard: int, dataset: str, pkey: bytes, lkey: bytes) -> bytes:
    return partition_prefix(shard, dataset, pkey) + lkey


def value_key_under(shard_prefix: bytes, pkey: bytes, lkey: bytes) -> bytes:
    """value_key, given dataset_shard_prefix(shard, dataset) (built once per record)."""
    return shard_prefix + _I.pack(len(pkey)) + pkey + lkey


def split_value_key(k: bytes, dataset_shard_prefix_len: int) -> tuple[bytes, bytes]:
    """(partitioning key, local key) of a value key, after its dataset-and-shard prefix."""
    n = _I.unpack_from(k, dataset_shard_prefix_len)[0]
    start = dataset_shard_prefix_len + 4
    return k[start:start + n], k[start + n:]


def position_key(log_id: int) -> bytes:
    return b"P" + _I.pack(log_id)


def member_position_key(log_id: int, node_id: int) -> bytes:
    return member_positions_prefix(log_id) + _I.pack(node_id)


def member_positions_prefix(log_id: int) -> bytes:
    """The prefix of every member's published position of `log_id`."""
    return b"Q" + _I.pack(log_id)


def decode_member_position_key(k: bytes) -> tuple[int, int]:
    return _I.unpack_from(k, 1)[0], _I.unpack_from(k, 5)[0]


def digest_key(shard: int) -> bytes:
    return b"D" + _I.pack(shard)


def dedup_key(shard: int, request_id: bytes) -> bytes:
    return b"R" + _I.pack(shard) + b"\x00" + request_id


@lru_cache(maxsize=1 << 16)  # every key of a record starts with it: built once
def _shard_dataset(shard: int, dataset: str) -> bytes:
    d = dataset.encode()
    return _I.pack(shard) + bytes([len(d)]) + d


@lru_cache(maxsize=1 << 16)
def _event_prefix(shard: int, dataset: str) -> bytes:
    return b"R" + _I.pack(shard) + b"\x01" + _shard_dataset(shard, dataset)[4:]


def event_key(shard: int, dataset: str, event_id: bytes) -> bytes:
    return _event_prefix(shard, dataset) + event_id


def event_order_prefix(shard: int, dataset: str) -> bytes:
    return b"O" + _shard_dataset(shard, dataset)


def event_chunk_key(shard: int, dataset: str, position: int) -> bytes:
    """The entry of the event ids recorded at `position`: one per record, not one per id."""
    return event_order_prefix(shard, dataset) + _Q.pack(position)


def encode_event_chunk(ts_ms: int, ids: list[tuple[int, bytes]]) -> bytes:
    """A record's log time, then each (seq, event id) it recorded, in seq order."""
    return _Q.pack(ts_ms) + b"".join(_SEQ.pack(seq, len(e)) + e for seq, e in ids)


def decode_event_chunk(b: bytes) -> tuple[int, list[tuple[int, bytes]]]:
    ts = _Q.unpack_from(b)[0]
    out: list[tuple[int, bytes]] = []
    i = 8
    while i < len(b):
        seq, n = _SEQ.unpack_from(b, i)
        i += _SEQ.size
        out.append((seq, bytes(b[i:i + n])))
        i += n
    return ts, out


def event_count_key(shard: int, dataset: str) -> bytes:
    return b"N" + _shard_dataset(shard, dataset)


def decode_event_count_key(k: bytes) -> tuple[int, str]:
    """(shard, dataset) of an event count key."""
    n = k[5]
    return _I.unpack_from(k, 1)[0], k[6:6 + n].decode()


def dedup_time_prefix(log_id: int) -> bytes:
    return b"T" + _I.pack(log_id)


def dedup_time_key(log_id: int, ts_ms: int, shard: int, request_id: bytes) -> bytes:
    return dedup_time_prefix(log_id) + _Q.pack(ts_ms) + _I.pack(shard) + request_id


def decode_dedup_time_key(k: bytes) -> tuple[int, int, int, bytes]:
    """(log_id, ts_ms, shard, request_id)"""
    return _I.unpack_from(k, 1)[0], _Q.unpack_from(k, 5)[0], _I.unpack_from(k, 13)[0], bytes(k[17:])


def expiry_prefix(log_id: int) -> bytes:
    return b"X" + _I.pack(log_id)


def expiry_key(log_id: int, expires_at_ms: int, value_key: bytes) -> bytes:
    return expiry_prefix(log_id) + _Q.pack(expires_at_ms) + value_key


def eventual(k_key: bytes) -> bytes:
    """The eventual datasets' counterpart (b"E") of a b"K" key or prefix."""
    assert k_key[:1] == b"K"
    return b"E" + k_key[1:]


def eventual_shard_prefix(shard: int) -> bytes:
    return b"E" + _I.pack(shard)


def dataset_of(k: bytes) -> str:
    """The dataset id in a b"K" or b"E" key."""
    n = k[5]
    return k[6:6 + n].decode()


LAST_UP = b"L"


def lww_hash_key(shard: int) -> bytes:
    return b"H" + _I.pack(shard)


def shard_of_key(k: bytes) -> int:
    """The shard of a b"K" or b"E" key (or prefix)."""
    return int(_I.unpack_from(k, 1)[0])


def drop_key(log_id: int, dataset: str) -> bytes:
    return b"G" + _I.pack(log_id) + dataset.encode()


def prefix_end(prefix: bytes) -> bytes | None:
    """The least key past every key that starts with `prefix` (None: there is none, the
    prefix being empty or all 0xff bytes)."""
    p = prefix.rstrip(b"\xff")
    return p[:-1] + bytes([p[-1] + 1]) if p else None


def dataset_shard_prefix(shard: int, dataset: str) -> bytes:
    return b"K" + _shard_dataset(shard, dataset)


def encode_stored(s: Stored) -> bytes:
    return _VH.pack(s.version, s.expires_at_ms) + s.value


def decode_stored(b: bytes) -> Stored:
    version, exp = _VH.unpack_from(b)
    return Stored(bytes(b[16:]), version, exp)


def encode_u64(*xs: int) -> bytes:
    return b"".join(_Q.pack(x) for x in xs)


def decode_u64(b: bytes, n: int) -> tuple[int, ...]:
    return struct.unpack(">" + "Q" * n, b[: 8 * n])


def change_prefix(shard: int, dataset: str) -> bytes:
    return b"C" + _shard_dataset(shard, dataset)


_CHANGE_AT = struct.Struct(">QI")


def change_key(shard: int, dataset: str, position: int, seq: int) -> bytes:
    """A change at `position` of the shard's log; `seq` orders those of one position."""
    return change_prefix(shard, dataset) + _CHANGE_AT.pack(position, seq)


def change_position(k: bytes) -> int:
    """The log position of a change key."""
    return int(_CHANGE_AT.unpack_from(k, len(k) - _CHANGE_AT.size)[0])


def change_group(k: bytes) -> bytes:
    """The (shard, dataset) prefix of a change key."""
    return k[:6 + k[5]]


def change_floor_key(shard: int) -> bytes:
    return b"W" + _I.pack(shard)


def mark_key(shard: int) -> bytes:
    return b"M" + _I.pack(shard)


def shard_of_mark(k: bytes) -> int | None:
    """The shard of a mark's key (None: `k` is not one)."""
    return int(_I.unpack(k[1:])[0]) if len(k) == 1 + _I.size and k[:1] == b"M" else None


_PLACE = struct.Struct(">IQ?qQI")


def place_key(shard: int) -> bytes:
    return b"S" + _I.pack(shard)


def encode_place(p: Place) -> bytes:
    return _PLACE.pack(p.log, p.since, p.opened, p.version_base, p.ts_floor, p.generation)


def decode_place(b: bytes) -> Place:
    return Place(*_PLACE.unpack(b))


# The key families that belong to one shard (a shard copy takes them all): b"K" values,
# b"D" digest, b"R" ids seen, b"O" ids by age, b"N" ids held, b"H" eventual hash, b"E"
# eventual values, b"C" changes, b"W" their floor, b"S" its place among the logs. Its log's
# b"T" and b"X" index entries are picked out (shard_index_entry).
_SHARD_FAMILIES = (b"K", b"D", b"R", b"O", b"N", b"H", b"E", b"C", b"W", b"S")


def shard_prefixes(shard: int) -> tuple[bytes, ...]:
    return tuple(f + _I.pack(shard) for f in _SHARD_FAMILIES)


def index_prefixes(log_id: int) -> tuple[bytes, bytes]:
    """The b"T" and b"X" index entries of a log (each names its shard inside)."""
    return dedup_time_prefix(log_id), expiry_prefix(log_id)


def with_log(index_key: bytes, log_id: int) -> bytes:
    """A b"T" or b"X" index entry as the same entry of another log's index."""
    return index_key[:1] + _I.pack(log_id) + index_key[5:]


def shard_index_entry(k: bytes, shard: int) -> bool:
    """Whether a b"T" or b"X" index entry belongs to `shard`."""
    if k[:1] == b"T":
        return _I.unpack_from(k, 13)[0] == shard
    return k[:1] == b"X" and k[13:14] == b"K" and _I.unpack_from(k, 14)[0] == shard
