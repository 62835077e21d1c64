"""Rows to Midtown writes, in bulk calls, counting what happened to each (pure but for the
client it is given): shared by the batch and the streaming writers."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from spark_connector.options import OptionError, WriteOptions

log = logging.getLogger("midtown.spark")
REASONS_KEPT = 5


@dataclass
class Counts:
    rows: int = 0
    applied: int = 0
    duplicates: int = 0
    failed: int = 0
    reasons: list[str] = field(default_factory=list)  # the first few failures

    def add(self, other: Counts) -> None:
        self.rows += other.rows
        self.applied += other.applied
        self.duplicates += other.duplicates
        self.failed += other.failed
        self.reasons += other.reasons[: REASONS_KEPT - len(self.reasons)]

    def write_report(self, path: str, outcome: str) -> None:
        """The counts as JSON in `path` (written whole, then renamed into place), with the
        job's `outcome` ("committed" or "aborted"): the `report` write option."""
        import json
        import os

        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump({"outcome": outcome, "rows": self.rows, "applied": self.applied,
                       "duplicates": self.duplicates, "failed": self.failed,
                       "reasons": self.reasons}, f)
        os.replace(tmp, path)

    def summary(self) -> str:
        s = (f"{self.rows} rows: {self.applied} applied, {self.duplicates} duplicates skipped, "
             f"{self.failed} failed")
        if self.reasons:
            s += " (" + "; ".join(self.reasons) + ")"
        return s


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
    time; count each row's outcome. A row that cannot become a write counts as failed."""
    c = Counts()
    batch: list[Any] = []

    def flush() -> None:
        if not batch:
            return
        for out in send(batch):
            if out.status == "applied":
                c.applied += 1
            elif out.status == "duplicate":
                c.duplicates += 1
            else:
                c.failed += 1
                if len(c.reasons) < REASONS_KEPT:
                    c.reasons.append(out.error)
        batch.clear()

    for row in rows:
        c.rows += 1
        try:
            batch.append(row_to_write(o, row))
        except ValueError as e:
            c.failed += 1
            if len(c.reasons) < REASONS_KEPT:
                c.reasons.append(str(e))
            continue
        if len(batch) >= o.rows_per_call:
            flush()
    flush()
    return c


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
