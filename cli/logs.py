"""The `midtown log` commands: append to, read, inspect and truncate the replicated logs."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from cli.arguments import common_options, nonneg_arg, parse_payload
from cli.connect import CliError, log_client
from cli.output import emit, unless_empty
from cli.output import show_payload as _show_payload


def cmd_log_append(a: argparse.Namespace) -> int:
    from log.entry import validate_batch

    payloads = [parse_payload(x, a.encoding) for x in a.data]
    try:
        validate_batch(payloads)
    except ValueError as e:
        raise CliError(str(e)) from None
    with log_client(a) as c:
        r = c.append(a.log, payloads, timeout_s=a.timeout)
    emit({"log": a.log, "first_position": r.first_position, "count": r.count,
          "timestamp_ms": r.timestamp_ms, "epoch": r.epoch}, a.json)
    return 0


def describe_entry(payload: bytes) -> dict[str, str]:
    """What a log entry holds, for people: the operation, the dataset and the keys of a
    key-value record, or the payload itself (text, or base64) when it is not one."""
    from record import codec
    from record.model import Position

    if not payload:  # the writer's time mark on an idle log (docs/log.md)
        return {"operation": "time mark", "dataset": "", "keys": ""}
    raw = {"operation": "(raw)", "dataset": "", "keys": _show_payload(payload)}
    try:
        rec = codec.record_from_bytes(payload)
    except Exception:
        return raw
    if not rec.ops and not rec.groups and not rec.puts:
        return raw
    name = rec.dataset.rsplit("#", 1)[0]
    if rec.puts:  # a bulk write's single puts, as columns
        keys = [_show_payload(r[0]) for r in rec.puts[:3]]
        more = f" (+{len(rec.puts) - 3})" if len(rec.puts) > 3 else ""
        return {"operation": f"bulk write, {len(rec.puts)} puts", "dataset": name,
                "keys": ", ".join(keys) + more}
    if rec.groups:
        keys = [_show_payload(g.partition_key) for g in rec.groups[:3]]
        more = f" (+{len(rec.groups) - 3})" if len(rec.groups) > 3 else ""
        return {"operation": f"bulk write, {len(rec.groups)} groups", "dataset": name,
                "keys": ", ".join(keys) + more}
    if rec.publishes_positions():
        o = rec.ops[0]
        assert isinstance(o, Position)
        return {"operation": "position", "dataset": "", "keys": f"node {o.node_id} at {o.position}"}
    if rec.drops():
        return {"operation": "drop", "dataset": name, "keys": ""}
    if (h := rec.hand_off()) is not None:
        return {"operation": "hand-off", "dataset": "",
                "keys": f"shard {rec.shard} to log {h.to} from {h.from_position}"}
    if rec.opens():
        return {"operation": "open", "dataset": "", "keys": f"shard {rec.shard}"}
    kinds = [type(o).__name__.lower() for o in rec.ops]
    pk = _show_payload(rec.partition_key)
    locals_ = [_show_payload(o.local_key) for o in rec.ops if hasattr(o, "local_key")]
    return {"operation": " + ".join(kinds), "dataset": name,
            "keys": pk + ("/" + ",".join(locals_) if locals_ else "")}


def cmd_log_read(a: argparse.Namespace) -> int:
    """Committed entries of a log, as records people can read (--json: the raw fields).
    From before the first position still held (the log was truncated), from the first one."""
    from runtime.refusals import Refusal

    with log_client(a) as c:
        c.check_log(a.log)
        start = a.from_
        first = next(r["first"] for r in c.status() if r["log"] == a.log)
        if start < first:
            print(f"log {a.log} was truncated below position {first}: reading from {first}",
                  file=sys.stderr, flush=True)
            start = first
        rows = []
        if a.follow and not a.json:
            print("\t".join(k.upper() for k in LOG_COLUMNS), flush=True)
        try:
            for e in c.read(a.log, start, follow=a.follow, max_entries=a.max, server=a.server):
                if a.json:
                    row: dict[str, Any] = {"position": e.position, "timestamp_ms": e.timestamp_ms,
                                           "epoch": e.epoch, "payload": _show_payload(e.payload)}
                else:
                    when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(e.timestamp_ms / 1000))
                    row = {"position": e.position, "time": f"{when}.{e.timestamp_ms % 1000:03d}",
                           "epoch": e.epoch, **describe_entry(e.payload)}
                if a.follow:  # stream as they come
                    if a.json:
                        emit(row, True)
                    else:
                        print("\t".join(str(row[k]) for k in LOG_COLUMNS), flush=True)
                else:
                    rows.append(row)
        except Refusal as e:
            if e.code.name != "OUT_OF_RANGE":
                raise
            raise CliError(f"log {a.log} was truncated while it was read ({e.message}); "
                           "read it again") from None
        if not a.follow:
            emit(rows, a.json, LOG_COLUMNS)
    return 0


LOG_COLUMNS = ["position", "time", "epoch", "operation", "dataset", "keys"]


def cmd_log_status(a: argparse.Namespace) -> int:
    from fleet import failure_domains, machines
    from log import zk as zkpaths

    with log_client(a) as c:
        rows = c.status()
        where = machines.domains(c.zk, machines.LOG_SERVERS)
        topo = zkpaths.read_topology(c.zk)
        homes = topo.home_map if topo is not None else {}
        prefers = topo.prefer_map if topo is not None else {}
    for r in rows:  # the machines of its last segment's servers, and those that hold two
        r["home"] = homes.get(r["log"], "")
        r["prefers"] = prefers.get(r["log"], "")
        r["machines"] = {s: where(s).label() for s in sorted(r["replicas"])}
        r["data_centers"] = sorted(d for d in failure_domains.data_centers(r["replicas"], where) if d)
        r["shared_machines"] = sorted(failure_domains.shared(r["replicas"], where))
    if a.json:
        emit(rows, True)
    else:
        table = [{**r, "replicas": {f"s{k}": v for k, v in sorted(r["replicas"].items())},
                  "machines": ",".join(r["machines"].values()), "shared": ",".join(r["shared_machines"]),
                  "dcs": ",".join(r["data_centers"])} for r in rows]
        columns = ["log", "writer", "epoch", "first", "last", "replicas", "home", "prefers", "dcs",
                   "machines", "shared"]
        emit(table, False, unless_empty(table, columns, "dcs", "home", "prefers"))
        print(f"{sum(1 for r in rows if r['shared_machines'])} of {len(rows)} logs have their last segment's "
              f"servers share a machine")
    return 0


def cmd_log_home(a: argparse.Namespace) -> int:
    """Keep a log in one data center (log/homes.py), or let it go anywhere again."""
    from catalog import registry, scopes
    from log import zk as zkpaths

    _dc_or_clear(a, "to let the log go anywhere")
    with log_client(a) as c:
        kv = registry.read_kv(c.zk)
        scope = scopes.scope_of_log(kv.scopes, a.log) if kv is not None else scopes.GLOBAL
        kept = scopes.find(kv.scopes, scope) if kv is not None else None
        if kept is not None and (a.dc or "") != kept.where:  # (races a scope laid out: rare, and docs say)
            raise CliError(f"LOG: log {a.log} carries scope {scope!r} (its shards), so it is kept in "
                           f"{kept.where!r}")
        try:
            homes = zkpaths.set_home(c.zk, a.log, a.dc or "")
        except ValueError as e:
            raise CliError(str(e)) from None
    emit({"log": a.log, "home": homes.get(a.log, ""),
          "note": "its writer and its next segments move there; sealed segments stay where they are"
          if a.dc else "its writer and segments may go anywhere"}, a.json)
    return 0


def _dc_or_clear(a: argparse.Namespace, clears: str) -> None:
    if a.dc is None and not a.clear:
        raise CliError(f"DC: name a data center, or pass --clear {clears}")
    if a.dc is not None and a.clear:
        raise CliError("DC: give a data center or --clear, not both")


def cmd_log_prefer(a: argparse.Namespace) -> int:
    """Prefer a data center for a log's writer (log/homes.py rank and yields), or not."""
    from log import zk as zkpaths

    _dc_or_clear(a, "to let its writer be anywhere")
    with log_client(a) as c:
        try:
            prefers = zkpaths.set_prefer(c.zk, a.log, a.dc or "")
        except ValueError as e:
            raise CliError(str(e)) from None
    emit({"log": a.log, "prefers": prefers.get(a.log, ""),
          "note": "a server there takes its writing over while one is up; its segments stay spread"
          if a.dc else "its writer stays where it is"}, a.json)
    return 0


def cmd_log_truncate(a: argparse.Namespace) -> int:
    with log_client(a) as c:
        first = c.truncate(a.log, a.before)
    emit({"log": a.log, "first_position": first}, a.json)
    return 0


def cmd_log_add(a: argparse.Namespace) -> int:
    """Give the key-value store N more of the log service's logs (docs/log.md, "Adding logs
    and handing shards over": no shard is handed to them yet)."""
    from kazoo.exceptions import BadVersionError

    from catalog import registry

    with log_client(a) as c:
        service = c.topology().logs
        try:
            m = registry.add_kv_logs(c.zk, a.n, service)
        except ValueError as e:
            raise CliError(str(e)) from None
        except BadVersionError:
            raise CliError("the shard -> log map changed while logs were added; run the command "
                           "again") from None
    emit({"kv_logs": m.logs, "added": list(range(m.logs - a.n, m.logs)), "log_service_logs": service,
          "map_version": m.version}, a.json)
    return 0


def add_parser(sub: Any) -> None:
    """log append|read|status|truncate|home|prefer|add: the replicated logs."""
    lg = sub.add_parser("log", help="operate the replicated logs")
    lgs = lg.add_subparsers(dest="cmd", metavar="COMMAND", required=True)
    ap = lgs.add_parser("append", help="append entries to a log")
    ap.add_argument("log", type=nonneg_arg("LOG"))
    ap.add_argument("data", nargs="+", metavar="DATA")
    ap.add_argument("--encoding", choices=["utf8", "base64"], default="utf8")
    common_options(ap, timeout_s=30.0)
    ap.set_defaults(fn=cmd_log_append)
    rd = lgs.add_parser("read", help="read committed entries")
    rd.add_argument("log", type=nonneg_arg("LOG"))
    rd.add_argument("--from", dest="from_", type=nonneg_arg("--from"), default=0)
    rd.add_argument("--follow", action="store_true", help="keep reading new entries")
    rd.add_argument("--max", type=nonneg_arg("--max"), default=0, help="stop after N entries")
    rd.add_argument("--server", help="read from this log server (HOST:PORT)")
    common_options(rd)
    rd.set_defaults(fn=cmd_log_read)
    ls = lgs.add_parser("status", help="writer, epoch, positions and replicas of every log")
    common_options(ls)
    ls.set_defaults(fn=cmd_log_status)
    tr = lgs.add_parser("truncate", help="remove a log's prefix")
    tr.add_argument("log", type=nonneg_arg("LOG"))
    tr.add_argument("--before", type=nonneg_arg("--before"), required=True)
    common_options(tr)
    tr.set_defaults(fn=cmd_log_truncate)
    for name, what, clears, fn in (
            ("home", "keep a log's writer and new segments in one data center",
             "let the log go anywhere again", cmd_log_home),
            ("prefer", "prefer one data center for a log's writer (its copies stay spread)", "no preference",
             cmd_log_prefer)):
        sp = lgs.add_parser(name, help=what)
        sp.add_argument("log", type=nonneg_arg("LOG"))
        sp.add_argument("dc", nargs="?", metavar="DC", help="a data center of the pool's log servers")
        sp.add_argument("--clear", action="store_true", help=clears)
        common_options(sp)
        sp.set_defaults(fn=fn)
    ad = lgs.add_parser("add", help="give the key-value store N more of the log service's logs")
    ad.add_argument("n", type=nonneg_arg("N"), metavar="N")
    common_options(ad)
    ad.set_defaults(fn=cmd_log_add)
