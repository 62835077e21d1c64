"""The newest committed entries of every log, encoded once for the Read streams.

Every storage node tails every log it replicates from the log's writer, so the same entries
go out on several streams. Each entry is encoded once, as the bytes of one `entries` field
of a ReadResponse (protobuf field 1, length-delimited), and a stream message is the join of
its entries' chunks. Only committed entries are cached: they never change."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

from log.entry import Entry
from midtown_pb import log_pb2 as pb
from runtime import world

_ENTRIES_FIELD = b"\x0a"  # field 1, wire type 2


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def encode(e: Entry) -> bytes:
    """One entry as a ReadResponse `entries` field."""
    b = pb.Entry(position=e.position, epoch=e.epoch, timestamp_ms=e.timestamp_ms,
                 payload=e.payload).SerializeToString()
    return _ENTRIES_FIELD + _varint(len(b)) + b


class ReadCache:
    def __init__(self, per_log: int = 20_000) -> None:
        self.per_log = per_log
        self._lock = world.lock()
        self._logs: dict[int, OrderedDict[int, bytes]] = {}

    def chunks(self, log_id: int, lo: int, hi: int,
               read: Callable[[int, int], list[Entry]]) -> list[bytes]:
        """The encoded entries lo..hi, all committed: from the cache as far as it has them
        in a row, the rest from `read(first_missing, hi)`."""
        with self._lock:
            cached = self._logs.setdefault(log_id, OrderedDict())
            out: list[bytes] = []
            p = lo
            while p <= hi:
                c = cached.get(p)
                if c is None:
                    break
                out.append(c)
                p += 1
        if p > hi:
            return out
        fresh = [(e.position, encode(e)) for e in read(p, hi)]
        with self._lock:
            for pos, c in fresh:
                cached[pos] = c
            while len(cached) > self.per_log:
                cached.popitem(last=False)
        return out + [c for _, c in fresh]
