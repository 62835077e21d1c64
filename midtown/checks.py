"""The checks every SDK operation makes on its arguments before anything is sent: a wrong
type or an out-of-range number is InvalidArgument naming the field (docs/api.md)."""

from __future__ import annotations

import re
from typing import Any

from midtown import errors
from midtown_pb import kv_pb2 as pb

Key = str | bytes
U64_MAX = 2**64 - 1
I64_MIN, I64_MAX = -(2**63), 2**63 - 1


def to_bytes(k: Key, field: str = "key") -> bytes:
    """A key (or an id) as bytes; a wrong type is InvalidArgument naming the field."""
    if isinstance(k, str):
        return k.encode()
    if isinstance(k, bytes | bytearray | memoryview):
        return bytes(k)
    raise errors.InvalidArgument(f"{field}: expected str or bytes, got {type(k).__name__}")


def to_value(v: object, field: str) -> bytes:
    if isinstance(v, bytes | bytearray | memoryview):
        return bytes(v)
    raise errors.InvalidArgument(f"{field}: expected bytes, got {type(v).__name__}"
                                 + (" (encode it: .encode())" if isinstance(v, str) else ""))



def to_int(n: object, field: str, lo: int, hi: int) -> int:
    if isinstance(n, bool) or not isinstance(n, int):
        raise errors.InvalidArgument(f"{field}: expected a whole number, got {n!r}")
    if not lo <= n <= hi:
        raise errors.InvalidArgument(f"{field}: {n} is out of range ({lo}..{hi})")
    return n


def to_shard(shard: object) -> int:
    return to_int(shard, "shard", 0, 2**32 - 1)


def to_key(partition: Key, local: Key) -> pb.Key:
    return pb.Key(partition=to_bytes(partition, "partition"), local=to_bytes(local, "local"))


def to_dataset(dataset: str) -> str:
    if not isinstance(dataset, str):
        raise errors.InvalidArgument(f"dataset: expected a name (str), got {type(dataset).__name__}")
    return dataset


def to_consistency(c: str, bounded: bool = False) -> Any:
    """A consistency's name as the wire's (`bounded`: a read that may be bounded)."""
    names = {"strong": pb.STRONG, "eventual": pb.EVENTUAL, **({"bounded": pb.BOUNDED} if bounded else {})}
    if c not in names:
        raise errors.InvalidArgument(f"consistency: {c!r}; choose {' or '.join(map(repr, names))}")
    return names[c]


# The largest staleness bound a read may ask for (record/staleness.py MAX_STALENESS_MS: a day).
MAX_STALENESS_MS = 86_400_000


def to_staleness(consistency: str, max_staleness_ms: int | None) -> int:
    """A read's staleness bound: required with consistency "bounded", refused otherwise."""
    if consistency != "bounded":
        if max_staleness_ms is not None:
            raise errors.InvalidArgument("max_staleness_ms: only a bounded read (consistency='bounded') "
                                         "takes a bound")
        return 0
    if max_staleness_ms is None:
        raise errors.InvalidArgument("max_staleness_ms: a bounded read needs a bound (ms, above 0)")
    return to_int(max_staleness_ms, "max_staleness_ms", 1, MAX_STALENESS_MS)


def to_dc(dc: str | None) -> str:
    """The caller's data center (as the servers' localities name it: dc=NAME)."""
    if dc is None:
        return ""
    if not isinstance(dc, str) or not _DC_RE.fullmatch(dc):
        raise errors.InvalidArgument(f"dc: {dc!r} is not a data center's name (up to 63 letters, digits, "
                                     "'.', '_' and '-', starting with a letter or digit)")
    return dc


_DC_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")  # a locality's value (fleet/failure_domains.py)
