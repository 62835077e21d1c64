"""Traces (runtime/tracing.py) and `midtown trace` (cli/trace.py), within one process: the
settings refused naming themselves, nothing made while tracing is off or an operation is
not sampled, a trace's context carried through gRPC metadata, across threads and from a
log's writer to its followers, and the breakdown read back from the JSON lines. Across
real processes: tests/integration/traced.py."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from cli import trace as trace_cli
from cli.arguments import ratio_arg
from cli.connect import CliError
from cli.main import parser
from log import codec
from log.messages import AddEntries
from runtime import tracing
from runtime.refusals import BadRequest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    ex = InMemorySpanExporter()
    tracing.configure("unit", sample=1.0, exporter=ex)
    try:
        yield ex
    finally:
        tracing.shutdown()


def test_off_by_default_and_then_free() -> None:
    """No OpenTelemetry module is imported by the SDK or the servers' modules, and a span is
    one shared do-nothing context manager."""
    code = ("import sys, midtown, coordinator.server, log.server, storage_node.server\n"
            "from runtime import tracing\n"
            "c = midtown.Client(['127.0.0.1:1'])\n"
            "assert tracing.span('x') is tracing.span('y')\n"
            "assert tracing.headers(None) is None and tracing.carried() == ''\n"
            "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env,
                         cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_a_span_nests_and_its_context_crosses_metadata_threads_and_the_log(
        spans: InMemorySpanExporter, tmp_path: Path) -> None:
    with tracing.span("Put", dataset="t"):
        md = tracing.headers((("authorization", "Bearer x"),))
        assert md is not None and md[0] == ("authorization", "Bearer x") and md[1][0] == "traceparent"
        with tracing.served("put", md):  # the coordinator's method, called with it
            with tracing.span("log append"):
                carried = tracing.carried()
                start = tracing.now_ns()
            tracing.record("log quorum", carried, start, log=0)  # the writer's thread
            with tracing.within(carried, "log store"):  # a follower, the context in AddEntries
                pass
    with tracing.within("", "not traced"):
        pass
    got = {s.name: s for s in spans.get_finished_spans()}
    assert set(got) == {"Put", "put", "log append", "log quorum", "log store"}
    assert len({s.context.trace_id for s in got.values()}) == 1
    parent = {n: s.parent.span_id if s.parent else None for n, s in got.items()}
    assert parent["put"] == got["Put"].context.span_id
    assert parent["log append"] == got["put"].context.span_id
    assert parent["log quorum"] == parent["log store"] == got["log append"].context.span_id
    assert got["Put"].attributes == {"dataset": "t"}


def test_sampling_zero_makes_no_span_and_sends_no_context() -> None:
    """An operation not sampled makes no span for any step and sends nothing (a header on
    every call cost a tenth of the throughput); a call that comes with an unsampled context
    (another tracer's) is followed: nothing made for it either."""
    ex = InMemorySpanExporter()
    tracing.configure("unit", sample=0.0, exporter=ex)
    try:
        with tracing.span("Put"):
            assert tracing.headers(None) is None and tracing.carried() == ""
            with tracing.span("step"):
                pass
        with tracing.served("put", None):  # a server, its ratio 0, called without a trace
            with tracing.span("append"):
                pass
        unsampled = ((tracing.TRACEPARENT, f"00-{'1' * 32}-{'2' * 16}-00"),)
        with tracing.served("put", unsampled), tracing.span("append"):
            assert tracing.headers(None) is None
        assert ex.get_finished_spans() == ()
        assert tracing.begun("Watch") == (None, "")
    finally:
        tracing.shutdown()


def test_a_bad_setting_is_refused_naming_it(tmp_path: Path) -> None:
    to = {tracing.ENV_FILE: str(tmp_path / "s")}
    for env, names in [
        ({tracing.ENV_SAMPLE: "0.5"}, f"{tracing.ENV_SAMPLE}: 0.5 with nowhere to send the spans"),
        ({**to, tracing.ENV_SAMPLE: "1.5"}, f"{tracing.ENV_SAMPLE}: 1.5 is out"),
        ({**to, tracing.ENV_SAMPLE: "nan"}, f"{tracing.ENV_SAMPLE}: nan is out"),
        ({**to, tracing.ENV_SAMPLE: "often"}, "'often' is not a number"),
        ({tracing.ENV_FILE: str(tmp_path / "no" / "s")}, f"{tracing.ENV_FILE}: "),
        ({tracing.ENV_FILE: str(tmp_path)}, "is not a file's path"),
        ({tracing.ENV_OTLP: "collector"}, f"{tracing.ENV_OTLP}: 'collector' is not HOST:PORT"),
        ({tracing.ENV_OTLP: "h:99999"}, "is not HOST:PORT"),
    ]:
        with pytest.raises(ValueError, match=names.replace("(", r"\(").replace(".", r"\.")):
            tracing.settings(env)
    assert tracing.settings({}) is None and tracing.settings({tracing.ENV_SAMPLE: "0"}) is None
    assert tracing.settings({tracing.ENV_OTLP: "127.0.0.1:4317"}) == (0.01, "127.0.0.1:4317", None)


@given(st.text(max_size=12))
def test_any_sampling_text_is_a_ratio_or_refused_naming_the_setting(raw: str) -> None:
    try:
        v = tracing.check_sample(raw)
    except ValueError as e:
        assert str(e).startswith(f"{tracing.ENV_SAMPLE}: ")
    else:
        assert 0.0 <= v <= 1.0


@given(st.text(max_size=30))
def test_any_collector_address_is_one_or_refused_naming_the_setting(raw: str) -> None:
    try:
        tracing.check_otlp(raw)
    except ValueError as e:
        assert str(e).startswith(f"{tracing.ENV_OTLP}: ")


def test_the_trace_crosses_to_the_followers_on_the_wire() -> None:
    t = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    a = AddEntries(1, 2, 2, (), trace=t)
    assert codec.add_from_pb(codec.add_to_pb(a)).trace == t
    with pytest.raises(BadRequest, match="trace: 200 characters"):
        AddEntries(1, 2, 2, (), trace="x" * 200)


def _line(trace: str, span: str, parent: str | None, name: str, service: str, start: int, end: int) -> str:
    return json.dumps({"trace": trace, "span": span, "parent": parent, "name": name, "service": service,
                       "pid": 1, "start_ns": start * 1_000_000, "end_ns": end * 1_000_000, "attrs": {},
                       "error": None})


def test_the_breakdown_says_where_the_time_went(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Self time is what no step below accounts for (overlapping copies counted once); the
    summary takes each step's median over the traces, the same step on another host as one."""
    f = tmp_path / "spans.jsonl"
    lines = []
    for i, (host, store) in enumerate([("host 0", 2), ("host 1", 4), ("host 2", 6)]):
        t = f"{i:032x}"
        lines += [_line(t, "a", None, "Put", "app", 0, 10),
                  _line(t, "b", "a", "put", host, 1, 9),
                  _line(t, "c", "b", "log store", host, 2, 2 + store),
                  _line(t, "d", "b", "log store", "host 9", 3, 3 + store),  # overlaps: counted once
                  _line(t, "e", "zz", "late", host, 1, 2)]  # its parent not written: hangs from the root
    f.write_text("\n".join(lines) + "\nnot json\n")
    spans, bad = trace_cli.load(str(f))
    assert bad == 1
    roots = trace_cli.traces(spans)
    assert [r.trace for r in roots] == [f"{i:032x}" for i in range(3)]
    rows = trace_cli.rows(roots[0])
    assert [(r["step"], r["took_ms"], r["self_ms"]) for r in rows] == [
        ("Put", 10.0, 2.0), ("  put", 8.0, 5.0), ("    log store", 2.0, 2.0), ("    log store", 2.0, 2.0),
        ("  late", 1.0, 1.0)]
    summary = {r["step"]: r for r in trace_cli.summary(roots)}
    assert summary["    log store"]["p50_ms"] == 5.0  # (3, 5, 7): each trace's covered time
    assert summary["  host: put"]["in"] == 3 and summary["app: Put"]["share"] == 1.0
    capsys.readouterr()
    assert trace_cli.run(parser().parse_args(["trace", str(f), "--op", "Put", "--summary", "--json"])) == 0
    assert json.loads(capsys.readouterr().out)["traces"] == 3


def test_the_trace_command_names_what_is_wrong(tmp_path: Path) -> None:
    f = tmp_path / "spans.jsonl"
    f.write_text(_line("1" * 32, "a", None, "Put", "app", 0, 1) + "\n"
                 + _line("2" * 32, "a", None, "Get", "app", 0, 1))
    for argv, says in [(["trace", str(f), "--op", "Scan"], "--op: no traced Scan"),
                       (["trace", str(f), "--id", "77"], "--id: no trace 77"),
                       (["trace", str(f), "--summary"], "--summary: the file has operations of 2 kinds")]:
        with pytest.raises(CliError, match=says):
            trace_cli.run(parser().parse_args(argv))
    out = subprocess.run([sys.executable, "-m", "cli", "trace", str(tmp_path / "none")], capture_output=True,
                         text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 2 and "FILE: " in out.stderr and "No such file" in out.stderr, out.stderr


def test_spans_reach_an_otlp_collector() -> None:
    """OTLP over gRPC, as the OpenTelemetry Collector takes it: a collector played by the
    protocol's own service gets the spans, named by the process's service."""
    from concurrent import futures

    import grpc
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as ts
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc as ts_grpc

    got: list[ts.ExportTraceServiceRequest] = []

    class Collector(ts_grpc.TraceServiceServicer):  # type: ignore[misc]
        def Export(self, req: ts.ExportTraceServiceRequest, ctx: object) -> ts.ExportTraceServiceResponse:
            got.append(req)
            return ts.ExportTraceServiceResponse()
    server = grpc.server(futures.ThreadPoolExecutor(2))
    ts_grpc.add_TraceServiceServicer_to_server(Collector(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        tracing.configure("otlp test", sample=1.0, otlp=f"127.0.0.1:{port}")
        with tracing.span("Put"):
            with tracing.span("append"):
                pass
        tracing.shutdown()  # flushes
    finally:
        server.stop(0)
    names = {s.name for r in got for rs in r.resource_spans for ss in rs.scope_spans for s in ss.spans}
    services = {a.value.string_value for r in got for rs in r.resource_spans for a in rs.resource.attributes
                if a.key == "service.name"}
    assert names == {"Put", "append"} and services == {"otlp test"}


def test_a_call_without_a_trace_starts_one_at_the_servers_ratio(spans: InMemorySpanExporter) -> None:
    with tracing.served("put", (("authorization", "Bearer x"),)):
        with tracing.span("append"):
            pass
    got = {s.name: s for s in spans.get_finished_spans()}
    assert got["put"].parent is None and got["append"].parent.span_id == got["put"].context.span_id


def test_the_tracing_benchmark_times_its_calls_and_refuses_a_bad_ratio() -> None:
    from bench import main as bench_main
    from bench import traced as bench_traced

    a = bench_main.parser().parse_args(["trace", "--sample", "0.1", "--clients", "1,4"])
    assert (a.sample, a.clients, a.rounds) == (0.1, (1, 4), 3)
    with pytest.raises(SystemExit):
        bench_main.parser().parse_args(["trace", "--sample", "1.5"])
    with pytest.raises(argparse.ArgumentTypeError, match="--sample: 1.5 is out of range"):
        ratio_arg("--sample")("1.5")
    costs = bench_traced.step_costs(0.01, n=500)
    assert set(costs) == {"off_us", "client_us", "server_unsampled_us", "traced_whole_us"}
    assert 0 < costs["off_us"] < costs["traced_whole_us"] and not tracing.on()


@pytest.mark.parametrize("text", ["00-xyz-01", "1", "00-" + "0" * 32 + "-" + "2" * 16 + "-01",
                                  "00-" + "A" * 32 + "-" + "2" * 16 + "-01", "0" * 55])
def test_a_context_that_is_not_a_traceparent_is_no_trace(text: str) -> None:
    """What a caller or a peer sends may be anything: a text that is not a W3C traceparent
    forces no trace on a server (its own ratio decides, 0 here), joins none, and a
    follower's store records nothing for it."""
    ex = InMemorySpanExporter()
    tracing.configure("unit", sample=0.0, exporter=ex)
    try:
        assert not tracing.valid(text) and not tracing.sampled(text)
        with tracing.served("put", ((tracing.TRACEPARENT, text),)), tracing.span("append"):
            assert tracing.carried() == ""
        with tracing.served("Append", ((tracing.TRACEPARENT, text),), root=False):
            pass
        with tracing.within(text, "log store"):
            pass
        tracing.record("log quorum", text, tracing.now_ns())
        assert ex.get_finished_spans() == ()
    finally:
        tracing.shutdown()


def test_a_trace_file_that_cannot_be_written_is_said_once(tmp_path: Path,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    from opentelemetry.sdk.trace.export import SpanExportResult

    out = tracing.JsonLines(str(tmp_path / "gone" / "spans.jsonl"))
    with caplog.at_level("WARNING", logger="midtown.tracing"):
        assert out.export([]) == SpanExportResult.FAILURE
        assert out.export([]) == SpanExportResult.FAILURE
    said = [r for r in caplog.records if r.name == "midtown.tracing"]
    assert len(said) == 1 and "spans dropped" in said[0].getMessage() and said[0].exc_info is None
    (tmp_path / "gone").mkdir()
    assert out.export([]) == SpanExportResult.SUCCESS and not out.failing
