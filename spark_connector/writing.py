"""Rows to Midtown writes, in bulk calls, counting what happened to each (pure but for the
client it is given): shared by the batch and the streaming writers."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from spark_connector.options import OptionError, WriteOptions

log = logging.getLogger("midtown.spark")
REASONS_KEPT = 5  # distinct failure reasons a task or job keeps
KEYS_KEPT = 3  # rows named per reason
KEY_CHARS_MAX = 40


@dataclass
class Counts:
    """What happened to a task's (or a job's) rows. Failures are kept by reason, each with
    how many rows it refused and the keys of the first few distinct ones, with how many of
    its rows each had (REASONS_KEPT reasons, KEYS_KEPT keys each)."""
    rows: int = 0
    applied: int = 0
    duplicates: int = 0
    failed: int = 0
    reasons: dict[str, tuple[int, dict[str, int]]] = field(default_factory=dict)

    def fail(self, reason: str, keys: str) -> None:
        """One row refused for `reason`; `keys` says which row (its keys)."""
        self.failed += 1
        self._note(reason, 1, {keys: 1})

    def _note(self, reason: str, n: int, keys: dict[str, int]) -> None:
        have = self.reasons.get(reason)
        if have is None and len(self.reasons) >= REASONS_KEPT:
            return
        count, kept = have or (0, {})
        kept = dict(kept)
        for k, rows in keys.items():
            if k in kept or len(kept) < KEYS_KEPT:
                kept[k] = kept.get(k, 0) + rows
        self.reasons[reason] = (count + n, kept)

    def add(self, other: Counts) -> None:
        self.rows += other.rows
        self.applied += other.applied
        self.duplicates += other.duplicates
        self.failed += other.failed
        for reason, (n, keys) in other.reasons.items():
            self._note(reason, n, keys)

    def failures(self) -> str:
        """The reasons, each with its rows: "REASON (3 rows: u1/n, u2/n and 1 more)", a key
        named once however many of the rows had it ("t029/calls 3 times")."""
        out = []
        for reason, (n, keys) in self.reasons.items():
            shown = ", ".join(k if c == 1 else f"{k} {c} times" for k, c in keys.items())
            rest = n - sum(keys.values())
            more = f" and {rest} more" if rest > 0 else ""
            out.append(f"{reason} ({n} row{'s' if n != 1 else ''}: {shown}{more})")
        return "; ".join(out)

    def write_report(self, path: str, outcome: str) -> None:
        """The counts as JSON in `path` (written whole, then renamed into place), with the
        job's `outcome` ("committed", "failed" or "aborted"): the `report` write option."""
        import json
        import os

        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump({"outcome": outcome, "rows": self.rows, "applied": self.applied,
                       "duplicates": self.duplicates, "failed": self.failed,
                       "reasons": [{"reason": r, "rows": n, "keys": list(k)}
                                   for r, (n, k) in self.reasons.items()]}, f)
        os.replace(tmp, path)

    def summary(self) -> str:
        s = (f"{self.rows} rows: {self.applied} applied, {self.duplicates} duplicates skipped, "
             f"{self.failed} failed")
        if self.reasons:
            s += " (" + self.failures() + ")"
        return s


def show_key(b: bytes) -> str:
    """A key for a message: text where it is text, at most KEY_CHARS_MAX characters."""
    t = b.decode(errors="replace")
    return t if len(t) <= KEY_CHARS_MAX else t[:KEY_CHARS_MAX - 3] + "..."


def keys_of(write: Any) -> str:
    """A Midtown write's keys, as messages name its row: PARTITION/LOCAL."""
    op = write.ops[0]
    return f"{show_key(op.partition)}/{show_key(op.local)}"


def as_bytes(v: Any, column: str) -> bytes:
    if isinstance(v, bytes | bytearray):
        return bytes(v)
    if isinstance(v, str):
        return v.encode()
    if isinstance(v, bool) or v is None:
        raise ValueError(f"{column}: {v!r} cannot be a key or an id")
    if isinstance(v, int):
        return str(v).encode()
    raise ValueError(f"{column}: a {type(v).__name__} cannot be a key or an id")


def row_to_write(o: WriteOptions, row: Any) -> Any:
    """One row as one Midtown write (midtown.Write)."""
    from midtown import Write

    pk = as_bytes(row[o.partition_key_column], o.partition_key_column)
    lk = as_bytes(row[o.local_key_column], o.local_key_column) if o.local_key_column in row else b""
    eid = as_bytes(row[o.id_column], o.id_column) if o.id_column else None
    v = row[o.value_column] if o.value_column in row else None
    if o.operation == "increment":
        if not isinstance(v, int) or isinstance(v, bool):
            raise ValueError(f"{o.value_column}: increments need whole numbers, got {v!r}")
        return Write.incr(pk, lk, v, event_id=eid)
    value = b"" if v is None else as_bytes(v, o.value_column)
    if o.operation == "insert_if_absent":
        return Write.insert(pk, lk, value, event_id=eid)
    ttl = int(row[o.ttl_column] or 0) if o.ttl_column else o.ttl_ms
    return Write.put(pk, lk, value, ttl_ms=ttl, event_id=eid)


def write_rows(o: WriteOptions, rows: Iterable[Any], send: Callable[[list[Any]], list[Any]]) -> Counts:
    """Write `rows` through `send` (a bulk write, Client.write_many), o.rows_per_call at a
    time; count each row's outcome. A row that cannot become a write, or that the store
    refuses, counts as failed with its reason and keys; the other rows are written."""
    c = Counts()
    batch: list[Any] = []
    for row in rows:
        c.rows += 1
        try:
            batch.append(row_to_write(o, row))
        except ValueError as e:
            c.fail(str(e), _row_keys(o, row))
            continue
        if len(batch) >= o.rows_per_call:
            _send(batch, send, c)
            batch = []
    if batch:
        _send(batch, send, c)
    return c


def _send(writes: list[Any], send: Callable[[list[Any]], list[Any]], c: Counts) -> None:
    """One bulk call, each row's outcome counted. A call refused as a whole for what one of
    its rows holds (INVALID_ARGUMENT: a value over the limit, say) is split in halves and
    sent again until the refused rows stand alone: they fail, the others are written.
    Nothing was applied by the refused call (requests are checked before they are
    appended), so sending its rows again applies none twice."""
    from midtown import errors

    try:
        outcomes = send(writes)
    except errors.InvalidArgument as e:
        if len(writes) == 1:
            c.fail(e.message, keys_of(writes[0]))
            return
        half = len(writes) // 2
        _send(writes[:half], send, c)
        _send(writes[half:], send, c)
        return
    for w, out in zip(writes, outcomes):
        if out.status == "applied":
            c.applied += 1
        elif out.status == "duplicate":
            c.duplicates += 1
        else:
            c.fail(out.error, keys_of(w))


def _row_keys(o: WriteOptions, row: Any) -> str:
    """A row's keys for a message, whatever their types."""
    def one(column: str) -> str:
        try:
            v = row[column]
        except (KeyError, ValueError, IndexError):
            return "?"
        return show_key(v if isinstance(v, bytes) else str(v).encode())
    return f"{one(o.partition_key_column)}/{one(o.local_key_column)}"


KEY_TYPES = ("StringType", "BinaryType", "IntegerType", "LongType", "ShortType", "ByteType")
INT_TYPES = ("IntegerType", "LongType", "ShortType", "ByteType")


def check_schema(o: WriteOptions, fields: dict[str, str]) -> None:
    """The DataFrame's columns (name -> Spark type name) against the options, at planning."""
    def need(option: str, column: str, types: tuple[str, ...], what: str) -> None:
        if column not in fields:
            raise OptionError(f"{option}: no column {column!r} in the DataFrame (it has "
                              f"{', '.join(fields) or 'none'})")
        if fields[column] not in types:
            raise OptionError(f"{option}: column {column!r} is {fields[column]}; {what}")

    need("partition_key_column", o.partition_key_column, KEY_TYPES, "keys are strings, binary or integers")
    if o.local_key_column in fields:
        need("local_key_column", o.local_key_column, KEY_TYPES, "keys are strings, binary or integers")
    elif o.local_key_column != "local_key":
        need("local_key_column", o.local_key_column, KEY_TYPES, "")
    if o.operation == "increment":
        need("value_column", o.value_column, INT_TYPES, "increments need an integer column")
    else:
        need("value_column", o.value_column, ("StringType", "BinaryType"),
             "values are strings or binary")
    if o.id_column:
        need("id_column", o.id_column, KEY_TYPES, "event ids are strings, binary or integers")
    if o.ttl_column:
        need("ttl_column", o.ttl_column, INT_TYPES, "a TTL is a whole number of milliseconds")


def rows_of(iterator: Iterator[Any]) -> Iterator[Any]:
    """Spark Rows as dictionaries (column -> value)."""
    for r in iterator:
        yield r.asDict()
