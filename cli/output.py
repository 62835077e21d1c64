"""Command output, for the `midtown` command and the benchmarks it runs: readable tables by
default, JSON with --json."""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

# A cell of a listing (a scan, a list) shows at most this many characters and says how long
# it was; one record (a get) is shown whole, and --json always shows everything.
CELL_CHARS_MAX = 64


def abbreviated(s: str, limit: int = CELL_CHARS_MAX) -> str:
    if len(s) <= limit:
        return s
    return f"{s[:limit - 16]}... ({len(s)} chars)"


def table(rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None,
          whole: bool = False) -> str:
    """Rows as a table; long cells abbreviated unless `whole`."""
    if not rows:
        return "(none)"
    cols = list(columns or rows[0].keys())
    cut = str if whole else abbreviated
    cells = [[cut(_fmt(r.get(c))) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(cols, widths)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in cells]
    return "\n".join(lines)


def show_payload(b: bytes) -> str:
    """Bytes as text when they are printable UTF-8, else "base64:..."."""
    try:
        s = b.decode()
        if s.isprintable():
            return s
    except UnicodeDecodeError:
        pass
    return "base64:" + base64.b64encode(b).decode()


def stream_line(row: dict[str, Any] | None, widths: dict[str, int]) -> str:
    """One line of a table printed as its rows come (None: the header), each column at
    least its width wide, long cells abbreviated."""
    if row is None:
        return "  ".join(c.upper().ljust(w) for c, w in widths.items()).rstrip()
    return "  ".join(abbreviated(_fmt(row.get(c))).ljust(w) for c, w in widths.items()).rstrip()


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, dict):
        return " ".join(f"{k}:{_fmt(x)}" for k, x in v.items())
    if isinstance(v, (list, tuple)):
        return ",".join(_fmt(x) for x in v)
    return str(v)


def unless_empty(rows: Sequence[dict[str, Any]], columns: Sequence[str], *optional: str) -> list[str]:
    """`columns` without those of `optional` that are empty in every row (a table's data-center
    column on a cluster that names none: there is nothing to choose)."""
    return [c for c in columns if c not in optional or any(r.get(c) for r in rows)]


def progress(quiet: bool) -> Callable[[str], None]:
    """A long command's progress lines: on stderr, none with --json (`quiet`)."""
    return (lambda msg: None) if quiet else (lambda msg: print(msg, file=sys.stderr, flush=True))


def emit(data: Any, as_json: bool, columns: Sequence[str] | None = None) -> None:
    if as_json:
        print(json.dumps(data, sort_keys=True, default=str))
    elif isinstance(data, list):
        print(table(data, columns))
    elif isinstance(data, dict):
        print(table([data], columns, whole=True))
    else:
        print(data)
    sys.stdout.flush()
