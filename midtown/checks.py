"""The checks every SDK operation makes on its arguments before anything is sent: a wrong
type or an out-of-range number is InvalidArgument naming the field (docs/api.md)."""

from __future__ import annotations

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


def to_consistency(c: str) -> Any:
    if c not in ("strong", "eventual"):
        raise errors.InvalidArgument(f"consistency: {c!r}; choose 'strong' or 'eventual'")
    return pb.EVENTUAL if c == "eventual" else pb.STRONG
