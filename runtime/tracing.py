"""Traces of operations across the processes they cross (issue 71), by OpenTelemetry.

Off by default, and then free: no OpenTelemetry module is imported, `span()` hands back one
shared do-nothing context manager and `headers()` the metadata it was given. A process
turns tracing on by naming where its spans go, from the environment (`from_env`, which
every server and the `midtown` command call at start) or by calling `configure`:

- `MIDTOWN_TRACE_FILE=PATH`: JSON lines, one span a line, appended (one write per batch,
  so the processes of a machine may share a file); `midtown trace PATH` reads them.
- `MIDTOWN_TRACE_OTLP=HOST:PORT`: OTLP over gRPC to a collector (plaintext, as a collector
  beside the process listens; the OpenTelemetry Collector, Jaeger and Tempo take it).
- `MIDTOWN_TRACE_SAMPLE=R` (0 to 1; 0.01 by default when a destination is named): the share
  of the operations that start in this process, or reach it without a trace, that are
  traced. A process follows a caller that traced (a parent-based sampler): with a ratio of
  0 it records exactly the operations its callers traced.

A sampled operation's context crosses processes in the calls' gRPC metadata (W3C
`traceparent`, `headers` and `served`; an operation not sampled sends none, and its callee
decides at its own ratio), and from a log's writer to its followers and from a call's thread
to another in a `traceparent` text of its own (`carried`, `span(..., parent=)`). A bad
setting is a ValueError naming it. Spans are exported in batches by a thread of
OpenTelemetry's SDK, at most a second after they end, and at `shutdown`."""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import os
import random
import re
from collections.abc import Mapping, Sequence
from typing import Any

from runtime import world

log = logging.getLogger("midtown.tracing")
SAMPLE_DEFAULT = 0.01
ENV_FILE = "MIDTOWN_TRACE_FILE"
ENV_OTLP = "MIDTOWN_TRACE_OTLP"
ENV_SAMPLE = "MIDTOWN_TRACE_SAMPLE"
TRACEPARENT = "traceparent"
# W3C trace context: version-traceid-parentid-flags; an all-zero id is no id
_TRACEPARENT_RE = re.compile(r"[0-9a-f]{2}-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}")
EXPORT_DELAY_MS = 1000

OFF = contextlib.nullcontext()  # the do-nothing span, shared
_tracer: Any = None  # OpenTelemetry's Tracer while tracing is on
_api: Any = None  # opentelemetry.trace, once imported
_ratio = 0.0  # the share of the operations that begin here that are traced
# Inside an operation not sampled: no span is made for its steps
_quiet: contextvars.ContextVar[bool] = contextvars.ContextVar("midtown_trace_quiet", default=False)
_provider: Any = None
_env_read = False


def on() -> bool:
    return _tracer is not None


def check_sample(raw: str | float, name: str = ENV_SAMPLE) -> float:
    """A sampling ratio from 0 to 1, else ValueError naming the setting."""
    try:
        v = float(raw)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: {raw!r} is not a number (a share of operations, 0 to 1)") from None
    if not 0.0 <= v <= 1.0:  # a NaN fails this too
        raise ValueError(f"{name}: {raw} is out of range (0 to 1: 0.01 traces one operation in 100)")
    return v


def check_otlp(raw: str, name: str = ENV_OTLP) -> str:
    """A collector's HOST:PORT, else ValueError naming the setting."""
    host, colon, port = raw.strip().rpartition(":")
    if (not colon or not host or not port.isdigit() or not 0 < int(port) < 65536
            or any(c.isspace() for c in host)):
        raise ValueError(f"{name}: {raw!r} is not HOST:PORT (an OTLP collector's gRPC address, "
                         "as 127.0.0.1:4317)")
    return f"{host}:{port}"


def check_file(raw: str, name: str = ENV_FILE) -> str:
    """A file spans can be appended to (its directory exists), else ValueError naming the setting."""
    path = os.path.abspath(os.path.expanduser(raw)) if raw.strip() else ""
    if not path or os.path.isdir(path):
        raise ValueError(f"{name}: {raw!r} is not a file's path (spans are appended to it as JSON lines)")
    if not os.path.isdir(os.path.dirname(path)):
        raise ValueError(f"{name}: {raw!r}: its directory {os.path.dirname(path)} does not exist")
    return path


def settings(env: Mapping[str, str]) -> tuple[float, str | None, str | None] | None:
    """(sample, otlp, file) from `env`, None when no destination is named (tracing off).
    ValueError naming the variable for a bad value, or a ratio with nowhere to send."""
    file = check_file(env[ENV_FILE]) if env.get(ENV_FILE) else None
    otlp = check_otlp(env[ENV_OTLP]) if env.get(ENV_OTLP) else None
    raw = env.get(ENV_SAMPLE)
    sample = check_sample(raw) if raw not in (None, "") else SAMPLE_DEFAULT
    if file is None and otlp is None:
        if raw not in (None, "") and sample > 0:
            raise ValueError(f"{ENV_SAMPLE}: {raw} with nowhere to send the spans: set {ENV_FILE} "
                             f"(JSON lines) or {ENV_OTLP} (a collector)")
        return None
    return sample, otlp, file


def from_env(service: str, env: Mapping[str, str] | None = None) -> bool:
    """Turn tracing on as the environment says (module doc); True when it is on."""
    s = settings(os.environ if env is None else env)
    if s is None:
        return False
    configure(service, sample=s[0], otlp=s[1], file=s[2])
    return True


def from_env_once(env: Mapping[str, str] | None = None) -> None:
    """`from_env` for an SDK process, the first time a client is made there (unless it was
    configured already): named by OTEL_SERVICE_NAME, else "midtown client"."""
    global _env_read
    if _env_read or _tracer is not None:
        return
    env = os.environ if env is None else env
    from_env(env.get("OTEL_SERVICE_NAME") or "midtown client", env)
    _env_read = True


def configure(service: str, *, sample: float = SAMPLE_DEFAULT, otlp: str | None = None,
              file: str | None = None, exporter: Any = None) -> None:
    """Trace this process as `service`: `sample` of the operations that start here, the
    spans to an OTLP collector at `otlp`, appended to `file` as JSON lines, and/or handed to
    `exporter` (an OpenTelemetry SpanExporter: tests give an in-memory one, exported at
    once). Again: the new settings replace the old (the old spans are flushed first)."""
    global _tracer, _provider, _api, _ratio
    sample = check_sample(sample, "sample")
    otlp = check_otlp(otlp, "otlp") if otlp is not None else None
    file = check_file(file, "file") if file is not None else None
    try:
        from opentelemetry import trace as api
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
        from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased
    except ImportError:
        raise ValueError("tracing needs OpenTelemetry's SDK: pip install 'midtown[trace]' "
                         "(the servers' install has it)") from None
    shutdown()
    # The ratio is applied where a trace would begin (`_root`), so that an operation not
    # sampled costs no OpenTelemetry span at all; what reaches the SDK is sampled
    provider = TracerProvider(resource=Resource.create({"service.name": service, "process.pid": os.getpid()}),
                              sampler=ParentBased(ALWAYS_ON))
    if otlp is not None:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=otlp, insecure=True),
                                                       schedule_delay_millis=EXPORT_DELAY_MS))
    if file is not None:
        provider.add_span_processor(BatchSpanProcessor(JsonLines(file),  # type: ignore[arg-type]
                                                       schedule_delay_millis=EXPORT_DELAY_MS))
    if exporter is not None:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    _provider, _api, _ratio = provider, api, sample
    _tracer = provider.get_tracer("midtown")


def shutdown() -> None:
    """Flush what is pending and turn tracing off."""
    global _tracer, _provider
    p, _provider, _tracer = _provider, None, None
    if p is not None:
        p.shutdown()


def flush() -> None:
    if _provider is not None:
        _provider.force_flush()


def span(name: str, parent: str | None = None, **attributes: Any) -> Any:
    """A context manager timing `name` as a child of the current span (or of `parent`, a
    `carried` text from another thread or process); a new trace, sampled by the process's
    ratio, where there is none. The do-nothing one while tracing is off, and inside an
    operation not sampled (nothing is made for its steps)."""
    if _tracer is None:
        return OFF
    if parent is None:
        if _quiet.get():
            return OFF
        c = _api.get_current_span().get_span_context()
        if not c.is_valid:
            return _root(name, attributes)
        if not c.trace_flags.sampled:
            return OFF
    return _tracer.start_as_current_span(name, context=_context(parent), attributes=attributes or None,
                                         record_exception=False)


def _root(name: str, attributes: dict[str, Any]) -> Any:
    """A new trace begins here: sampled at the process's ratio; otherwise nothing is made
    for the operation's steps."""
    if random.random() < _ratio:
        return _tracer.start_as_current_span(name, attributes=attributes or None, record_exception=False)
    return _Quiet()


def valid(traceparent: str) -> bool:
    """Whether a text is a W3C traceparent (what a caller or a peer sent may be anything:
    one that is not is taken as no trace at all)."""
    return len(traceparent) == 55 and _TRACEPARENT_RE.fullmatch(traceparent) is not None


def sampled(traceparent: str) -> bool:
    """Whether a W3C traceparent says its trace is sampled (the flags' lowest bit)."""
    return valid(traceparent) and bool(int(traceparent[-2:], 16) & 1)


class _Quiet:
    """Inside an operation not sampled: no span is made for its steps."""

    __slots__ = ("token",)

    def __enter__(self) -> None:
        self.token = _quiet.set(True)

    def __exit__(self, *exc: object) -> None:
        _quiet.reset(self.token)


def _context(parent: str | None) -> Any:
    if not parent:
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
    return TraceContextTextMapPropagator().extract({TRACEPARENT: parent})


def within(parent: str, name: str, **attributes: Any) -> Any:
    """A span `name` in the trace `parent` (a `carried` text) only: the do-nothing one
    when it is "" or not a sampled traceparent (work for many operations, as a follower
    storing a batch, is traced when one of them was)."""
    if _tracer is None or not sampled(parent):
        return OFF
    return _tracer.start_as_current_span(name, context=_context(parent), attributes=attributes or None,
                                         record_exception=False)


def now_ns() -> int:
    """The clock spans are timed by (ns since the Unix epoch, as OpenTelemetry's)."""
    return int(world.wall() * 1e9) if _tracer is not None else 0


def record(name: str, parent: str, start_ns: int, end_ns: int | None = None, **attributes: Any) -> None:
    """A span `name` in the trace `parent` that began at `start_ns` (`now_ns`) and ends at
    `end_ns` (now): a step timed in a thread other than the operation's, as a log's writer
    timing the quorum round of a traced operation's batch."""
    if _tracer is None or not sampled(parent):
        return
    s = _tracer.start_span(name, context=_context(parent), start_time=start_ns, attributes=attributes or None)
    s.end(end_time=end_ns)


def carried() -> str:
    """The current span's context as a W3C traceparent text, to carry to another thread or
    process; "" when tracing is off or the current operation is not sampled."""
    if _tracer is None or _quiet.get():
        return ""
    c = _api.get_current_span().get_span_context()
    if not c.is_valid or not c.trace_flags.sampled:
        return ""
    return _text(c)


def _text(c: Any) -> str:
    """A span context as a W3C traceparent."""
    return f"00-{c.trace_id:032x}-{c.span_id:016x}-{int(c.trace_flags):02x}"


def begun(name: str, **attributes: Any) -> tuple[Any, str]:
    """A span `name` started now but not made current, for an operation whose calls are
    made as an iterator is consumed (a watch), and its context for `headers`; end it with
    `ended`. (None, "") when it is not sampled or tracing is off."""
    if _tracer is None or random.random() >= _ratio:
        return None, ""
    s = _tracer.start_span(name, attributes=attributes or None)
    return s, _text(s.get_span_context())


def ended(span: Any) -> None:
    if span is not None and span.is_recording():
        span.end()


def headers(metadata: Sequence[tuple[str, str]] | None, parent: str = "") -> Sequence[tuple[str, str]] | None:
    """The gRPC metadata of an outgoing call, with the current span's context (or
    `parent`'s: `begun`) when its operation is sampled. An operation not sampled sends
    nothing: a header on every call cost a tenth of the throughput of 16 clients' puts
    (`midtown-bench trace`), and the callee decides at its own ratio for what comes without
    a trace (servers at 0 trace exactly what their callers sample)."""
    t = parent if parent and sampled(parent) else carried()
    if not t:
        return metadata
    return (*(metadata or ()), (TRACEPARENT, t))


def served(name: str, metadata: Sequence[tuple[str, Any]] | None, root: bool = True) -> Any:
    """A context manager for a gRPC method `name` called with `metadata`: a span that is a
    child of the caller's when it sent a trace, sampled as the caller decided; without one
    (or with a text that is not a traceparent), for a `root` method (an operation a client
    asks for) a new trace sampled at this process's ratio, for another nothing
    (runtime/handlers.py wraps every method in it)."""
    if _tracer is None:
        return OFF
    parent = next((str(v) for k, v in metadata or () if k == TRACEPARENT), "")
    if not valid(parent):
        return _root(name, {}) if root else OFF
    if not sampled(parent):
        return _Quiet()
    return within(parent, name)


def add(**attributes: Any) -> None:
    """Attributes of the current span (its outcome, sizes)."""
    if _tracer is None:
        return
    s = _api.get_current_span()
    for k, v in attributes.items():
        s.set_attribute(k, v)


class JsonLines:
    """An OpenTelemetry SpanExporter (by its methods: OpenTelemetry's SDK is imported only
    once tracing is on) writing a JSON line per span to a file, appended with
    one write per batch (O_APPEND: processes sharing the file do not interleave lines).
    The line: trace, span, parent (hex ids), name, service, pid, start_ns, end_ns, attrs,
    error."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.failing = False  # said once, until a write succeeds again

    def export(self, spans: Sequence[Any]) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult
        data = "".join(json.dumps(line(s), separators=(",", ":")) + "\n" for s in spans).encode()
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
        except OSError as e:
            if not self.failing:
                log.warning("trace file %s: %s: spans dropped until it can be written", self.path,
                            e.strerror or e)
            self.failing = True
            return SpanExportResult.FAILURE
        self.failing = False
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def line(s: Any) -> dict[str, Any]:
    """One finished OpenTelemetry span as the JSON line `midtown trace` reads."""
    ctx, parent, res = s.context, s.parent, s.resource.attributes
    status = s.status
    return {"trace": f"{ctx.trace_id:032x}", "span": f"{ctx.span_id:016x}",
            "parent": f"{parent.span_id:016x}" if parent is not None else None,
            "name": s.name, "service": str(res.get("service.name", "")), "pid": res.get("process.pid"),
            "start_ns": s.start_time, "end_ns": s.end_time,
            "attrs": {k: v if isinstance(v, (str, int, float, bool)) else str(v)
                      for k, v in (s.attributes or {}).items()},
            "error": status.description if not status.is_ok and status.description else None}
