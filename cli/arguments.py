"""What the commands' arguments accept: values given inline, in a file or on standard input
(with an encoding), durations, sizes and lists, each refused naming its option, and the
options every command that talks to a cluster takes."""

from __future__ import annotations

import argparse
import base64
import sys
from collections.abc import MutableMapping

from cli.connect import CliError


# ---------------------------------------------------------------- log
def parse_payload(s: str, encoding: str) -> bytes:
    if encoding == "base64":
        try:
            return base64.b64decode(s, validate=True)
        except ValueError:
            raise CliError(f"DATA: {s!r} is not valid base64") from None
    return s.encode()


def parse_value(s: str, encoding: str, name: str) -> bytes:
    """A value on the command line: `@FILE` reads a file, `-` standard input (for values
    beyond what a command line holds, ~128 KiB); anything else as `parse_payload` says."""
    if s == "-":
        return sys.stdin.buffer.read()
    if s.startswith("@"):
        try:
            with open(s[1:], "rb") as f:
                return f.read()
        except OSError as e:
            raise CliError(f"{name}: cannot read {s[1:]}: {e.strerror}") from None
    return parse_payload(s, encoding)


# ---------------------------------------------------------------- datasets
_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(s: str, name: str) -> int:
    """'500ms', '30s', '5m', '2h', '7d', or 0. A number without its unit is refused: `--ttl
    3` read as 3 ms was a surprise where 3 s or 3 h was meant (etcd's and Go's durations
    refuse it too)."""
    s = s.strip()
    for unit in ("ms", "s", "m", "h", "d"):
        if s.endswith(unit) and s[: -len(unit)].isdigit():
            return int(s[: -len(unit)]) * _UNITS[unit]
    if s.isdigit() and int(s) == 0:
        return 0
    if s.isdigit():
        raise CliError(f"{name}: {s!r} has no unit; say {s}ms, {s}s, {s}m, {s}h or {s}d")
    raise CliError(f"{name}: {s!r} is not a duration (examples: 500ms, 30s, 5m, 2h, 7d)")


def parse_ms(s: str | None, name: str) -> int:
    return parse_duration_ms(s, name) if s else 0


# ---------------------------------------------------------------- parser
def at_least_one_arg(name: str):  # type: ignore[no-untyped-def]
    nonneg = nonneg_arg(name)

    def conv(s: str) -> int:
        v = nonneg(s)
        if v < 1:
            raise argparse.ArgumentTypeError(f"{name} must be at least 1, got {v}")
        return v  # type: ignore[no-any-return]
    return conv


def size_arg(name: str):  # type: ignore[no-untyped-def]
    def conv(s: str) -> int:
        from catalog.datasets import parse_size
        try:
            return parse_size(s)
        except ValueError as e:
            raise argparse.ArgumentTypeError(f"{name}: {e}") from None
    return conv


def positive_arg(name: str):  # type: ignore[no-untyped-def]
    def conv(s: str) -> float:
        try:
            v = float(s)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name}: {s!r} is not a number of seconds") from None
        if not v > 0:
            raise argparse.ArgumentTypeError(f"{name}: must be above 0")
        return v
    return conv


def subset_arg(name: str, allowed: tuple[str, ...]):  # type: ignore[no-untyped-def]
    def conv(s: str) -> tuple[str, ...]:
        got = tuple(x.strip() for x in s.split(",") if x.strip())
        bad = [x for x in got if x not in allowed]
        if bad:
            raise argparse.ArgumentTypeError(f"{name}: {', '.join(bad)} not among {','.join(allowed)}")
        if not got:
            raise argparse.ArgumentTypeError(f"{name}: give one or more of {','.join(allowed)}")
        return tuple(x for x in allowed if x in got)  # in the benchmark's order
    return conv


def nonneg_arg(name: str):  # type: ignore[no-untyped-def]
    def conv(s: str) -> int:
        try:
            v = int(s)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a whole number, got {s!r}") from None
        if v < 0:
            raise argparse.ArgumentTypeError(f"{name} must be >= 0, got {v}")
        return v
    return conv


def ratio_arg(name: str):  # type: ignore[no-untyped-def]
    """A share from 0 to 1 (a sampling ratio)."""
    def conv(s: str) -> float:
        from runtime import tracing

        try:
            return tracing.check_sample(s, name)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    return conv


def ascending_arg(name: str):  # type: ignore[no-untyped-def]
    """A list option (--keys, --watchers): whole numbers above 0, comma-separated, ascending."""
    def parse(raw: str) -> tuple[int, ...]:
        try:
            out = tuple(int(x) for x in raw.split(","))
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name}: {raw!r}: whole numbers, comma-separated") from None
        if not out or min(out) < 1 or list(out) != sorted(out):
            raise argparse.ArgumentTypeError(f"{name}: {raw!r}: numbers above 0, ascending")
        return out
    return parse


def common_options(sp: argparse.ArgumentParser, dir_required: bool = False, timeout_s: float = 10.0) -> None:
    """The options every command that talks to a cluster takes."""
    sp.add_argument("--dir", required=dir_required, help="a local cluster's directory")
    sp.add_argument("--zk", help="ZooKeeper HOST:PORT (default: $MIDTOWN_ZK)")
    sp.add_argument("--json", action="store_true", help="print JSON")
    sp.add_argument("--timeout", type=positive_arg("--timeout"), default=timeout_s,
                    help="seconds to wait for the cluster (default %(default)s)")


# ---------------------------------------------------------------- tracing
def trace_options(p: argparse.ArgumentParser) -> None:
    """--trace-file, --trace-otlp and --trace-sample of a command that starts servers: the
    MIDTOWN_TRACE_* settings its processes are started with (runtime/tracing.py)."""
    p.add_argument("--trace-file", help="trace operations: every process appends its spans to this file "
                                        "as JSON lines (`midtown trace FILE` reads them)")
    p.add_argument("--trace-otlp", metavar="HOST:PORT",
                   help="trace operations: send the spans to this OTLP collector (gRPC)")
    p.add_argument("--trace-sample", metavar="RATIO", type=ratio_arg("--trace-sample"),
                   help="the share of operations traced where they start (0 to 1; default 0.01 once a "
                        "destination is named; 0: only those a traced client sends)")


def use_trace_options(a: argparse.Namespace, env: MutableMapping[str, str]) -> None:
    """Set the MIDTOWN_TRACE_* variables of `env` (the processes' to come) from the
    options, each checked and refused naming its option."""
    from runtime import tracing

    try:
        if a.trace_file:
            env[tracing.ENV_FILE] = tracing.check_file(a.trace_file, "--trace-file")
        if a.trace_otlp:
            env[tracing.ENV_OTLP] = tracing.check_otlp(a.trace_otlp, "--trace-otlp")
        if a.trace_sample is not None:
            env[tracing.ENV_SAMPLE] = str(a.trace_sample)  # (checked by ratio_arg)
        tracing.settings(env)
    except ValueError as e:
        raise CliError(str(e)) from None
