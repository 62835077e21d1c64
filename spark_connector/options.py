"""The data source's options, checked once on the driver when Spark plans the read or the
write: a bad option fails the job before any task runs, with a message naming it."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

OPERATIONS = ("put", "increment", "insert_if_absent")
CONSISTENCIES = ("strong", "eventual")
ROWS_PER_CALL_DEFAULT = 2_000
ROWS_PER_CALL_MAX = 20_000  # the coordinator's limit of writes per bulk call
# Reads: as the Cassandra connector's split.sizeInMB and fetch.sizeInRows. A shard larger
# than a split is read by several tasks: with 512 MB (the Cassandra connector's default) a
# shard of 2,000,000 keys (about 240 MB) was one task at 21,858 rows/s here, and with 32 MB
# eight at 90,785 (issue 47); 64 MB gives such a shard four tasks, enough for the cores a
# worker has, without cutting small shards.
SPLIT_MB_DEFAULT = 64
PAGE_ROWS_DEFAULT = 1_000
PAGE_ROWS_MAX = 10_000  # the coordinator's limit of items per page


# Partitioning keys the connector writes for itself (a streaming sink's commits): left out
# of reads and change streams.
INTERNAL_PARTITION_PREFIX = b"\x00midtown-"


class OptionError(ValueError):
    """A bad option: the message starts with the option's name."""


# The check a job makes on the driver when Spark plans it (the cluster answers, the dataset
# exists) ends within this long, or within the `timeout_s` option if that is shorter: a
# job that names a wrong address fails at once, not after the tasks' longer timeout.
PLANNING_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Connection:
    """How tasks reach the cluster; opened inside each task, never pickled open."""
    zk: str = ""
    coordinators: tuple[str, ...] = ()
    token: str = ""
    tls_ca: str = ""
    timeout_s: float = 60.0

    def client(self, timeout_s: float | None = None):  # type: ignore[no-untyped-def]
        """A Client; its calls end within `timeout_s` (by default the `timeout_s` option)."""
        from midtown import Client

        return Client(list(self.coordinators) or None, zk=self.zk or None,
                      timeout=self.timeout_s if timeout_s is None else timeout_s,
                      token=self.token or None, tls_ca=self.tls_ca or None)

    def shared(self):  # type: ignore[no-untyped-def]
        """This process's Client for this connection, made on first use and kept: Spark runs a
        job's tasks one after another in the same Python workers, and a Client made per
        task cost each one a ZooKeeper session, route lookups and new connections. (A
        worker forked from a process that held one makes its own.)"""
        with _SHARED_LOCK:
            pid, db = _SHARED.get(self, (0, None))
            if db is None or pid != os.getpid():
                db = self.client()
                _SHARED[self] = (os.getpid(), db)
            return db

    def where(self) -> str:
        """The address tried, for messages."""
        return (f"ZooKeeper at {self.zk}" if self.zk else
                f"coordinators {', '.join(self.coordinators)}")


_SHARED: dict[Connection, tuple[int, Any]] = {}
_SHARED_LOCK = threading.Lock()


@dataclass(frozen=True)
class ReadOptions:
    conn: Connection
    dataset: str
    consistency: str = "strong"
    partition_key: bytes | None = None  # read this partitioning key only
    decode: bool = False  # keys and values as UTF-8 strings
    split_bytes: int = SPLIT_MB_DEFAULT << 20  # a shard larger than this is read by several tasks
    page_rows: int = PAGE_ROWS_DEFAULT  # rows per page fetched (and per Arrow batch)
    start: bytes = b""  # with partition_key: local keys from this one (inclusive) ...
    end: bytes = b""  # ... to this one (exclusive; b"": to the last)


@dataclass(frozen=True)
class ChangeOptions:
    """A streaming read of a dataset's changes (spark.readStream, option changes=true)."""
    conn: Connection
    dataset: str
    partition_key: bytes | None = None
    decode: bool = False
    start: dict[int, int] | None = None  # startingPositions as positions per shard; None: latest


@dataclass(frozen=True)
class WriteOptions:
    conn: Connection
    dataset: str
    operation: str = "put"
    partition_key_column: str = "partition_key"
    local_key_column: str = "local_key"
    value_column: str = "value"
    id_column: str = ""  # exactly once per value of this column
    ttl_ms: int = 0
    ttl_column: str = ""
    rows_per_call: int = ROWS_PER_CALL_DEFAULT
    query_id: str = ""  # streaming: the query's identity in Midtown (default: Spark's query id)
    report: str = ""  # a file the job's commit (or abort) writes its counts to, as JSON
    # Streaming: a query id whose last commit is older than this may be taken over by a new
    # copy of the query (a lost checkpoint); `takeover` takes it over at once.
    lease_s: int = 60
    takeover: bool = False


def _get(o: Mapping[str, str], name: str, default: str = "") -> str:
    return str(o.get(name, default) or default)


def _int(o: Mapping[str, str], name: str, default: int, lo: int, hi: int) -> int:
    raw = _get(o, name, str(default))
    try:
        v = int(raw)
    except ValueError:
        raise OptionError(f"{name}: {raw!r} is not a whole number") from None
    if not lo <= v <= hi:
        raise OptionError(f"{name}: {v} must be between {lo} and {hi}")
    return v


def connection(o: Mapping[str, str]) -> Connection:
    zk = _get(o, "zk")
    coords = tuple(c.strip() for c in _get(o, "coordinators").split(",") if c.strip())
    if not zk and not coords:
        raise OptionError("zk: set option zk (ZooKeeper HOST:PORT) or coordinators (HOST:PORT,...)")
    timeout = _int(o, "timeout_s", 60, 1, 3600)
    return Connection(zk, coords, _get(o, "token"), _get(o, "tls_ca"), float(timeout))


def dataset(o: Mapping[str, str]) -> str:
    d = _get(o, "dataset")
    if not d:
        raise OptionError("dataset: required (the Midtown dataset to read or write)")
    return d


def read_options(o: Mapping[str, str]) -> ReadOptions:
    consistency = _get(o, "consistency", "strong")
    if consistency not in CONSISTENCIES:
        raise OptionError(f"consistency: {consistency!r}; choose strong or eventual")
    pk = _get(o, "partition_key")
    decode = _get(o, "decode", "binary")
    if decode not in ("binary", "utf8"):
        raise OptionError(f"decode: {decode!r}; choose binary (the default) or utf8")
    return ReadOptions(connection(o), dataset(o), consistency, pk.encode() if pk else None, decode == "utf8",
                       _int(o, "split.sizeInMB", SPLIT_MB_DEFAULT, 1, 1 << 20) << 20,
                       _int(o, "fetch.sizeInRows", PAGE_ROWS_DEFAULT, 1, PAGE_ROWS_MAX))


def changes_asked(o: Mapping[str, str]) -> bool:
    """Whether the read is of the dataset's changes (option changes=true): the streaming
    read's schema, which Spark asks before it says whether the read streams."""
    return _bool(o, "changes")


def change_options(o: Mapping[str, str]) -> ChangeOptions:
    if not changes_asked(o):
        raise OptionError("changes: a streaming read reads the dataset's changes; set option changes=true "
                          "(docs/spark.md)")
    decode = _get(o, "decode", "binary")
    if decode not in ("binary", "utf8"):
        raise OptionError(f"decode: {decode!r}; choose binary (the default) or utf8")
    raw = _get(o, "startingPositions", "latest").strip()
    start: dict[int, int] | None = None
    if raw != "latest":
        try:
            got = json.loads(raw)
            start = {int(k): int(v) for k, v in got.items()}
        except (ValueError, AttributeError, TypeError):
            start = None
        if not start or min(start) < 0 or min(start.values()) < 0:
            raise OptionError(f"startingPositions: {raw!r}; say latest, or a JSON object of shard to "
                              'position such as {"0": 120, "1": 98} (a query\'s offsets)')
    pk = _get(o, "partition_key")
    return ChangeOptions(connection(o), dataset(o), pk.encode() if pk else None, decode == "utf8", start)


def write_options(o: Mapping[str, str]) -> WriteOptions:
    op = _get(o, "operation", "put")
    if op not in OPERATIONS:
        raise OptionError(f"operation: {op!r}; choose one of {', '.join(OPERATIONS)}")
    return WriteOptions(
        connection(o), dataset(o), op,
        _get(o, "partition_key_column", "partition_key"), _get(o, "local_key_column", "local_key"),
        _get(o, "value_column", "value"), _get(o, "id_column"),
        _int(o, "ttl_ms", 0, 0, 10 * 365 * 24 * 3600 * 1000), _get(o, "ttl_column"),
        _int(o, "rows_per_call", ROWS_PER_CALL_DEFAULT, 1, ROWS_PER_CALL_MAX), _get(o, "query_id"),
        _get(o, "report"), _int(o, "lease_s", 60, 1, 7 * 24 * 3600), _bool(o, "takeover"))


def _bool(o: Mapping[str, str], name: str) -> bool:
    raw = _get(o, name, "false").strip().lower()
    if raw not in ("true", "false"):
        raise OptionError(f"{name}: {raw!r}; say true or false")
    return raw == "true"
