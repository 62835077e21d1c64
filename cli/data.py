"""The data commands: get, put, delete, incr, cas and scan of a dataset's keys."""

from __future__ import annotations

import argparse
from typing import Any

from cli.arguments import common_options, nonneg_arg, parse_duration_ms, parse_payload, parse_value
from cli.connect import CliError, kv_client
from cli.output import emit
from cli.output import show_payload as _show_payload
from midtown.checks import MAX_STALENESS_MS


# ---------------------------------------------------------------- data
def _value_row(local: bytes, v: Any) -> dict:
    return {"local_key": _show_payload(local), "value": _show_payload(v.value), "version": v.version,
            "expires_at_ms": v.expires_at_ms or None}


def _staleness(a: argparse.Namespace) -> dict[str, Any]:
    """get's and scan's --consistency and --max-staleness, as the SDK's arguments."""
    given = getattr(a, "max_staleness", None)
    if a.consistency != "bounded":
        if given:
            raise CliError("--max-staleness: only with --consistency bounded")
        return {"consistency": a.consistency}
    if not given:
        raise CliError("--max-staleness: --consistency bounded needs a bound (say 2s or 500ms)")
    bound = parse_duration_ms(given, "--max-staleness")
    if not 0 < bound <= MAX_STALENESS_MS:
        raise CliError(f"--max-staleness: {given}; from 1ms to a day (1d)")
    return {"consistency": "bounded", "max_staleness_ms": bound}


def cmd_data(a: argparse.Namespace) -> int:

    enc = a.encoding
    p, lk = parse_payload(a.partition, enc), parse_payload(getattr(a, "local", "") or "", enc)
    with kv_client(a) as c:
        if a.group == "get":
            v = c.get(a.dataset, p, lk, **_staleness(a))
            if v is None:
                if a.json:
                    emit({"found": False}, True)
                else:
                    print("(not found)")
                return 3
            if a.output is not None:
                return _write_value(a, lk, v)
            bounded = {"staleness_bound_ms": v.staleness_bound_ms} if a.consistency == "bounded" else {}
            emit({"found": True, **_value_row(lk, v), **bounded}, a.json,
                 ["local_key", "value", "version", "expires_at_ms", *bounded])
        elif a.group == "put":
            ttl = parse_duration_ms(a.ttl, "--ttl") if a.ttl else 0
            ver = c.put(a.dataset, p, lk, parse_value(a.value, enc, "VALUE"), ttl_ms=ttl)
            emit({"version": ver}, a.json)
        elif a.group == "delete":
            n = c.delete(a.dataset, p, lk)
            emit({"deleted": n}, a.json)
            if not n and not a.json:
                print("(nothing deleted: no such key)")
        elif a.group == "cas":
            if a.expect is None and not a.expect_absent and not a.expect_version:
                raise CliError("cas: give --expect VALUE, --expect-absent or --expect-version N")
            r = c.cas(a.dataset, p, lk, parse_value(a.new or "", enc, "--new"),
                      expected=parse_value(a.expect, enc, "--expect") if a.expect is not None else None,
                      expect_absent=a.expect_absent, expected_version=a.expect_version,
                      delete=a.delete)
            cur = r.current
            emit({"succeeded": r.succeeded, "version": r.version or None,
                  "current": _show_payload(cur.value) if cur else None,
                  "current_version": cur.version if cur else None}, a.json)
            return 0 if r.succeeded else 4
        elif a.group == "incr":
            n = c.incr(a.dataset, p, lk, a.delta)
            emit({"value": n}, a.json)
        elif a.group == "scan":
            page = c.scan(a.dataset, p, start=parse_payload(a.start, enc), end=parse_payload(a.end, enc),
                          limit=a.limit, **_staleness(a))
            rows = [_value_row(i.local_key, i.value) for i in page.items]
            bounded = {"staleness_bound_ms": page.staleness_bound_ms} if a.consistency == "bounded" else {}
            if a.json:
                nxt = _show_payload(page.next) if page.next else None
                emit({"items": rows, "next": nxt, **bounded}, True)
            else:
                emit(rows, False, ["local_key", "value", "version", "expires_at_ms"])
                if page.next:
                    print(f"(more: --start {_show_payload(page.next)})")
                if bounded:
                    print(_served_as(page.staleness_bound_ms))
    return 0


def _served_as(bound_ms: int) -> str:
    return (f"(served by a replica near you, at most {bound_ms} ms stale)" if bound_ms
            else "(served as a strong read: no replica near you was recent enough)")


def _write_value(a: argparse.Namespace, local: bytes, v: Any) -> int:
    """`get --output FILE`: the value's bytes as stored, written to FILE (`-`: standard
    output, and nothing else there, as `etcdctl get --print-value-only`); the row, with the
    value's size in place of the value, on standard output (or standard error with `-`)."""
    import sys

    if a.output == "-":
        sys.stdout.buffer.write(v.value)
        sys.stdout.flush()
        return 0
    try:
        with open(a.output, "wb") as f:
            f.write(v.value)
    except OSError as e:
        raise CliError(f"--output: cannot write {a.output}: {e.strerror}") from None
    emit({"found": True, "local_key": _show_payload(local), "bytes": len(v.value), "output": a.output,
          "version": v.version, "expires_at_ms": v.expires_at_ms or None}, a.json,
         ["local_key", "bytes", "output", "version", "expires_at_ms"])
    return 0


def add_parser(sub: Any) -> None:
    """get, put, delete, cas, incr, scan: the data."""
    def data(name: str, helptext: str, local: str = "required") -> argparse.ArgumentParser:
        sp = sub.add_parser(name, help=helptext)
        sp.add_argument("dataset")
        sp.add_argument("partition", help="partitioning key")
        if local == "required":
            sp.add_argument("local", help="local key")
        elif local == "optional":
            sp.add_argument("local", nargs="?", default="", help="local key (default empty)")
        sp.add_argument("--coordinator", help="coordinator HOST:PORT (default: discover)")
        sp.add_argument("--token", help="a user's token, for datasets with an access list "
                                        "(default: $MIDTOWN_TOKEN)")
        sp.add_argument("--tls-ca", help="call over TLS, trusting this CA's PEM file "
                                         "(default: $MIDTOWN_TLS_CA; none: plaintext)")
        sp.add_argument("--encoding", choices=["utf8", "base64"], default="utf8",
                        help="how keys and values are written on the command line")
        sp.add_argument("--dc", help="the data center you call from: bounded reads are served by "
                                     "replicas there (default: $MIDTOWN_DC)")
        common_options(sp)
        sp.set_defaults(fn=cmd_data)
        return sp

    g = data("get", "read a value", "optional")
    read_modes(g)
    g.add_argument("--output", metavar="FILE", help="write the value's bytes, as stored, to FILE "
                   "(-: standard output, the value alone); the row shows its size instead")
    pt = data("put", "write a value")
    pt.add_argument("value", help="the value; @FILE reads a file, - standard input (up to ~960 KiB)")
    pt.add_argument("--ttl", help="expire after (30s, 5m, 2h, 7d)")
    data("delete", "delete a value", "optional")
    cs = data("cas", "check-and-set")
    cs.add_argument("new", nargs="?", help="the new value (omit with --delete)")
    cs.add_argument("--expect", help="the value expected now")
    cs.add_argument("--expect-absent", action="store_true", help="expect no value")
    cs.add_argument("--expect-version", type=nonneg_arg("--expect-version"), default=0)
    cs.add_argument("--delete", action="store_true", help="delete instead of writing NEW")
    ic = data("incr", "add to a decimal counter")
    ic.add_argument("delta", nargs="?", type=int, default=1)
    sc = data("scan", "list local keys of a partitioning key, in byte order", "none")
    sc.add_argument("--start", default="")
    sc.add_argument("--end", default="")
    sc.add_argument("--limit", type=nonneg_arg("--limit"), default=100)
    read_modes(sc)


def read_modes(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--consistency", choices=["strong", "eventual", "bounded"], default="strong",
                    help="strong: linearizable; eventual: one replica's state; bounded: a replica near "
                         "you no staler than --max-staleness, else as strong")
    sp.add_argument("--max-staleness", metavar="DURATION",
                    help="with --consistency bounded: how stale the answer may be (500ms, 2s, 1m)")
