"""Traces across real processes (runtime/tracing.py), checked in both layouts: the split
layout's cluster in test_operations.py and the host layout's in test_machines.py start
their servers with `env(path)` (spans to a file, following their callers: a ratio of 0),
and `check_operations` traces a put, a strong get, a check-and-set, a bulk write and a watch
from this process (its own spans in memory) and finds each one's spans in the servers'
file, from every process the operation crosses."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from midtown import Client, Write
from runtime import tracing
from tests.integration.conftest import wait_for


def env(path: Path) -> dict[str, str]:
    return {tracing.ENV_FILE: str(path), tracing.ENV_SAMPLE: "0"}


def all_spans(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _spans(path: Path, trace: str) -> list[dict[str, Any]]:
    return [d for d in all_spans(path) if d["trace"] == trace]


# The traces begun in this process (a watch's check puts a value in another thread: a trace
# of its own)
BEGUN: set[str] = set()


def traced(fn: Callable[[], Any], name: str) -> tuple[str, list[Any]]:
    """Run `fn` traced in this process; (the trace id of its operation `name`, this
    process's spans of it)."""
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    ex = InMemorySpanExporter()
    tracing.configure("test client", sample=1.0, exporter=ex)
    try:
        fn()
    finally:
        tracing.shutdown()
    spans = list(ex.get_finished_spans())
    BEGUN.update(f"{s.context.trace_id:032x}" for s in spans)
    roots = [s for s in spans if s.parent is None and s.name == name]
    assert len(roots) == 1, [s.name for s in spans]
    trace = roots[0].context.trace_id
    return f"{trace:032x}", [s for s in spans if s.context.trace_id == trace]


def check_operations(addrs: list[str], dataset: str, file: Path,
                     expect: Callable[[str, list[dict[str, Any]]], bool],
                     only: tuple[str, ...] | None = None) -> dict[str, list[dict[str, Any]]]:
    """Each operation's trace: its root in this process, the rest in the servers' `file`
    once `expect(operation, spans)` holds for them (each is waited for: spans are written
    within a second of their end). The servers' spans of each, by operation (of `only`)."""
    out: dict[str, list[dict[str, Any]]] = {}
    with Client(addrs, timeout=30, coalesce=False) as db:
        db.put(dataset, "tr", "k", b"v0")  # routes and connections made before the traces

        def watch() -> None:
            w = db.watch(dataset, "now", partition_key="tr")
            t = threading.Timer(0.3, lambda: db.put(dataset, "tr", "w", b"x"))
            t.start()
            try:
                next(iter(w))
            finally:
                t.join()
                w.close()
        ops: dict[str, Callable[[], Any]] = {
            "Put": lambda: db.put(dataset, "tr", "k", b"v1"),
            "Get": lambda: db.get(dataset, "tr", "k"),
            "CheckAndSet": lambda: db.cas(dataset, "tr", "k", b"v2", expected=b"v1"),
            "WriteMany": lambda: db.write_many(dataset, [Write.put("tr", f"b{i}", b"x") for i in range(5)]),
            "Watch": watch,
        }
        for name, fn in ops.items():
            if only is not None and name not in only:
                continue
            trace, mine = traced(fn, name)
            assert [s.name for s in mine if s.parent is None] == [name]
            ids = {f"{s.context.span_id:016x}" for s in mine}

            def whole(ss: list[dict[str, Any]]) -> bool:
                # every server span hangs below this process's root, through spans in the trace
                return expect(name, ss) and all(s["parent"] in ids | {t["span"] for t in ss} for s in ss)
            out[name] = wait_for(lambda: (lambda ss: ss if whole(ss) else None)(_spans(file, trace)), 15,
                                 f"the servers' spans of the {name} (whole)")
    return out


def services(spans: list[dict[str, Any]], name: str | None = None) -> set[str]:
    return {s["service"] for s in spans if name is None or s["name"] == name}
