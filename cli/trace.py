"""`midtown trace FILE`: where an operation's time went, hop by hop, from the spans the
processes wrote to FILE (MIDTOWN_TRACE_FILE: JSON lines, runtime/tracing.py).

By default the last traced operation (of `--op NAME`, or `--id TRACE`) as a tree: when each
step started after the operation did, how long it took, the part of that no step below it
accounts for (self), and the process it ran in. `--summary`: over every traced operation
of a kind, the median of each step, so one slow call does not mislead. `--json` for both."""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from cli.connect import CliError
from cli.output import emit


@dataclass
class Span:
    trace: str
    span: str
    parent: str | None
    name: str
    service: str
    start_ns: int
    end_ns: int
    attrs: dict[str, Any]
    error: str | None = None
    children: list[Span] = field(default_factory=list)

    @property
    def took_ns(self) -> int:
        return self.end_ns - self.start_ns

    def self_ns(self) -> int:
        """Its time no child accounts for (children's overlaps counted once, clipped to it)."""
        covered, at = 0, self.start_ns
        for c in sorted(self.children, key=lambda c: c.start_ns):
            s, e = max(c.start_ns, at), min(c.end_ns, self.end_ns)
            if e > s:
                covered += e - s
                at = e
        return max(0, self.took_ns - covered)


def load(path: str) -> tuple[list[Span], int]:
    """The spans in `path` and the number of lines that are not one (CliError naming FILE
    when it cannot be read)."""
    spans, bad = [], 0
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                try:
                    d = json.loads(line)
                    spans.append(Span(str(d["trace"]), str(d["span"]), d.get("parent"), str(d["name"]),
                                      str(d.get("service", "")), int(d["start_ns"]), int(d["end_ns"]),
                                      dict(d.get("attrs") or {}), d.get("error")))
                except (ValueError, KeyError, TypeError):
                    bad += 1
    except OSError as e:
        raise CliError(f"FILE: {path}: {e.strerror or e}") from None
    return spans, bad


def traces(spans: Iterable[Span]) -> list[Span]:
    """Each trace's root (its spans linked below it), in the order the roots started. A span
    whose parent is not in the file (a process that had not written it yet) hangs from the
    root too."""
    by_trace: dict[str, list[Span]] = {}
    for s in spans:
        by_trace.setdefault(s.trace, []).append(s)
    roots = []
    for group in by_trace.values():
        ids = {s.span: s for s in group}
        top = [s for s in group if s.parent is None or s.parent not in ids]
        root = min(top, key=lambda s: (s.parent is not None, s.start_ns))
        for s in group:
            if s is root:
                continue
            (ids[s.parent] if s.parent in ids else root).children.append(s)
        roots.append(root)
    return sorted(roots, key=lambda r: r.start_ns)


def rows(root: Span) -> list[dict[str, Any]]:
    """The tree under `root`, depth first, children in the order they started."""
    out: list[dict[str, Any]] = []

    def walk(s: Span, depth: int) -> None:
        out.append({"at_ms": round((s.start_ns - root.start_ns) / 1e6, 3),
                    "took_ms": round(s.took_ns / 1e6, 3), "self_ms": round(s.self_ns() / 1e6, 3),
                    "process": s.service,
                    "step": "  " * depth + s.name, "detail": _detail(s)})
        for c in sorted(s.children, key=lambda c: c.start_ns):
            walk(c, depth + 1)
    walk(root, 0)
    return out


def _detail(s: Span) -> str:
    parts = [f"{k}={v}" for k, v in sorted(s.attrs.items())]
    if s.error:
        parts.append(f"error: {s.error}")
    return " ".join(parts)


def role(service: str) -> str:
    """A process's part, its number left out ("host 2" -> "host"): the same step on
    another host is the same step."""
    return service.rstrip("0123456789 ") or service


def paths(root: Span) -> dict[tuple[tuple[str, str], ...], list[Span]]:
    """Each step of a trace by its path from the root ((process's role, step) each), the
    spans at it."""
    out: dict[tuple[tuple[str, str], ...], list[Span]] = {}

    def walk(s: Span, above: tuple[tuple[str, str], ...]) -> None:
        p = (*above, (role(s.service), s.name))
        out.setdefault(p, []).append(s)
        for c in s.children:
            walk(c, p)
    walk(root, ())
    return out


def covered(spans: Iterable[Span]) -> int:
    """The time the spans cover, overlaps counted once."""
    total, at = 0, 0
    for s in sorted(spans, key=lambda s: s.start_ns):
        start = max(s.start_ns, at)
        if s.end_ns > start:
            total += s.end_ns - start
            at = s.end_ns
    return total


def step_text(path: tuple[tuple[str, str], ...]) -> str:
    """A step indented by its depth, its process named where a hop enters another."""
    (r, name), above = path[-1], path[-2][0] if len(path) > 1 else None
    return "  " * (len(path) - 1) + (name if r == above else f"{r}: {name}")


def summary(roots: Sequence[Span]) -> list[dict[str, Any]]:
    """Over `roots` (operations of one kind), each step's median time and self time, and in
    how many of them it ran; depth first, in the order the steps first appear. A step an
    operation took more than once (a retry, or a log's copies storing an entry at once)
    counts the time it covered."""
    per: dict[tuple[tuple[str, str], ...], list[tuple[int, int]]] = {}
    for r in roots:
        for p, ss in paths(r).items():
            took = covered(ss)
            per.setdefault(p, []).append((took, min(took, sum(s.self_ns() for s in ss))))
    total = statistics.median(r.took_ns for r in roots) if roots else 0
    out = []
    for p in sorted(per, key=lambda p: [list(per).index(p[:i + 1]) for i in range(len(p))]):
        v = per[p]
        mid = statistics.median(t for t, _ in v)
        out.append({"step": step_text(p), "in": len(v), "p50_ms": round(mid / 1e6, 3),
                    "p50_self_ms": round(statistics.median(s for _, s in v) / 1e6, 3),
                    "share": round(mid / total, 3) if total else 0.0})
    return out


def run(a: argparse.Namespace) -> int:
    spans, bad = load(a.file)
    roots = traces(spans)
    if a.id:
        roots = [r for r in roots if r.trace.startswith(a.id.lower())]
        if not roots:
            raise CliError(f"--id: no trace {a.id} in {a.file}")
    if a.op:
        roots = [r for r in roots if r.name == a.op]
        if not roots:
            raise CliError(f"--op: no traced {a.op} in {a.file}")
    if not roots:
        raise CliError(f"FILE: no spans in {a.file}" + (f" ({bad} lines are not spans)" if bad else ""))
    if a.summary:
        kinds = sorted({r.name for r in roots})
        if len(kinds) > 1:
            raise CliError(f"--summary: the file has operations of {len(kinds)} kinds ({', '.join(kinds)}): "
                           "name one with --op")
        table = summary(roots)
        head = {"operation": kinds[0], "traces": len(roots),
                "p50_ms": round(statistics.median(r.took_ns for r in roots) / 1e6, 3),
                "processes": sorted({s.service for r in roots for ss in paths(r).values() for s in ss})}
        if a.json:
            emit({**head, "steps": table}, True)
        else:
            print(f"{head['operation']}: {head['traces']} traces, p50 {head['p50_ms']} ms")
            emit(table, False, ["p50_ms", "p50_self_ms", "share", "in", "step"])
        return 0
    root = roots[-1]
    table = rows(root)
    if a.json:
        emit({"trace": root.trace, "operation": root.name, "took_ms": table[0]["took_ms"], "steps": table},
             True)
        return 0
    procs = list(dict.fromkeys(r["process"] for r in table))
    print(f"trace {root.trace}: {root.name}, {table[0]['took_ms']} ms, {len(procs)} processes "
          f"({', '.join(procs)})")
    emit(table, False, ["at_ms", "took_ms", "self_ms", "process", "step", "detail"])
    return 0


def add_parser(sub: Any) -> None:
    t = sub.add_parser("trace", help="where a traced operation's time went, hop by hop, from a trace file")
    t.add_argument("file", metavar="FILE", help="the spans' JSON lines (MIDTOWN_TRACE_FILE)")
    t.add_argument("--op", help="operations of this kind only (Put, Get, CheckAndSet, ...)")
    t.add_argument("--id", help="the trace with this id (or its first characters)")
    t.add_argument("--summary", action="store_true",
                   help="each step's median over every traced operation (of --op)")
    t.add_argument("--json", action="store_true", help="JSON instead of a table")
    t.set_defaults(fn=run)
