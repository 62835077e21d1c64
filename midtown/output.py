"""Command output, for the `midtown` command and the benchmarks it runs: readable tables by
default, JSON with --json."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any


def table(rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None) -> str:
    if not rows:
        return "(none)"
    cols = list(columns or rows[0].keys())
    cells = [[_fmt(r.get(c)) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(cols, widths)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in cells]
    return "\n".join(lines)


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, dict):
        return " ".join(f"{k}:{_fmt(x)}" for k, x in v.items())
    if isinstance(v, (list, tuple)):
        return ",".join(_fmt(x) for x in v)
    return str(v)


def emit(data: Any, as_json: bool, columns: Sequence[str] | None = None) -> None:
    if as_json:
        print(json.dumps(data, sort_keys=True, default=str))
    elif isinstance(data, list):
        print(table(data, columns))
    elif isinstance(data, dict):
        print(table([data], columns))
    else:
        print(data)
    sys.stdout.flush()
