"""The change stream of strong datasets: which changes a record makes, when a value
expires, and how changes are stored and read back (pure; the apply loop records them and
storage_node/watch.py serves them).

A change is one key's new state at one log position of its shard's log:
- PUT: a put, a check-and-set or an increment wrote a value (its version is the record's
  position + 1, as for every write);
- DELETE: a delete (or a check-and-set that deletes) removed a value that was live;
  deleting a key that held nothing, or only an expired value, changes nothing;
- EXPIRE: a value's TTL ran out. It happens at the first position whose log time is at or
  past the value's expiry (`Stored.live_at`), before that position's own record, and
  carries the version of the value that expired.

Every replica applies the same records at the same log times, so every replica records
the same changes at the same positions, in the same order (`seq`: expiries first, by key,
then the record's writes, by key). A change is recorded in the same write batch as the
effects it describes, so a watcher never sees a change that a crash undoes."""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable, Iterable
from typing import NamedTuple

from record.model import Stored
from storage_node import keys


class Kind(enum.IntEnum):
    PUT = 1
    DELETE = 2
    EXPIRE = 3


class Change(NamedTuple):
    kind: Kind
    partition_key: bytes
    local_key: bytes
    value: bytes  # the new value (PUT); empty otherwise
    version: int  # PUT: the new version; DELETE: the record's (position + 1); EXPIRE: the value's
    expires_at_ms: int  # PUT: its expiry (0: none); EXPIRE: when it expired; DELETE: 0
    position: int
    log_time_ms: int
    seq: int = 0


# kind:1 version:8 expires_at:8 log_time:8 len(pkey):4, then pkey, lkey, value; the
# position and seq are in the key, the local key's length after the partitioning key's.
_HEAD = struct.Struct(">BQQQII")


def encode(c: Change) -> bytes:
    return _HEAD.pack(c.kind, c.version, c.expires_at_ms, c.log_time_ms, len(c.partition_key),
                      len(c.local_key)) + c.partition_key + c.local_key + c.value


def decode(key: bytes, b: bytes) -> Change:
    kind, version, exp, ts, np, nl = _HEAD.unpack_from(b)
    i = _HEAD.size
    pkey, lkey, value = bytes(b[i:i + np]), bytes(b[i + np:i + np + nl]), bytes(b[i + np + nl:])
    seq = int.from_bytes(key[-4:], "big")
    return Change(Kind(kind), pkey, lkey, value, version, exp, keys.change_position(key), ts, seq)


def log_time_of(b: bytes) -> int:
    """The log time of an encoded change (without decoding the rest)."""
    return int(_HEAD.unpack_from(b)[3])


def partition_of(b: bytes) -> bytes:
    n = _HEAD.unpack_from(b)[4]
    return bytes(b[_HEAD.size:_HEAD.size + n])


def of_writes(writes: dict[bytes, Stored | None], before: Callable[[bytes], Stored | None],
              position: int, ts_ms: int, prefix_len: int) -> list[Change]:
    """The changes of one record's writes (value key -> new value, None: deleted), in key
    order; `before(key)`: the value it held before the record; `prefix_len`: the length of
    the keys' dataset-and-shard prefix. (seq is left 0: the caller numbers a position's
    changes.)"""
    out: list[Change] = []
    for k in sorted(writes):
        v = writes[k]
        pkey, lkey = keys.split_value_key(k, prefix_len)
        if v is not None:
            out.append(Change(Kind.PUT, pkey, lkey, v.value, v.version, v.expires_at_ms, position, ts_ms))
            continue
        old = before(k)
        if old is not None and old.live_at(ts_ms):
            out.append(Change(Kind.DELETE, pkey, lkey, b"", position + 1, 0, position, ts_ms))
    return out


def expires_now(stored: Stored | None, expires_at_ms: int, prev_ts_ms: int, ts_ms: int) -> bool:
    """Whether a value found under an expiry index entry for `expires_at_ms` expires at an
    entry of log time `ts_ms` that follows one of `prev_ts_ms`: it is still the value the
    entry was written for (not rewritten or deleted since) and its expiry falls in
    (prev_ts_ms, ts_ms]."""
    return (stored is not None and stored.expires_at_ms == expires_at_ms
            and prev_ts_ms < expires_at_ms <= ts_ms)


def page(items: Iterable[tuple[bytes, bytes]], upto: int, max_changes: int, max_bytes: int,
         partition_key: bytes | None = None) -> tuple[list[Change], int | None]:
    """Read stored changes (key, encoded), in order, of positions below `upto`: up to about
    `max_changes` and `max_bytes`, always whole positions (a page never ends between two
    changes of one position, so a reader resuming at a position misses none of it). Returns
    the changes (of `partition_key` only, if given) and the position the next page starts
    at, or None if every change below `upto` was read."""
    out: list[Change] = []
    size = count = 0
    last = -1
    for k, v in items:
        pos = keys.change_position(k)
        if pos >= upto:
            return out, None
        if pos != last and (count >= max_changes or size >= max_bytes):
            return out, pos
        last = pos
        count += 1
        size += len(k) + len(v)
        if partition_key is not None and partition_of(v) != partition_key:
            continue
        out.append(decode(k, v))
    return out, None
