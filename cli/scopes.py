"""The `midtown scope` commands: lay out a data center's local scope, list the scopes
(catalog/scopes.py; docs/operations.md, "Data centers")."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from cli.connect import CliError, log_client
from cli.output import emit, progress, unless_empty
from cli.shards import hand_offs


def _logs_arg(text: str) -> list[int]:
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--logs: {text!r}, give log ids separated by commas (1,2)") \
            from None
    if any(x < 0 for x in out):
        raise argparse.ArgumentTypeError(f"--logs: {text!r}, log ids are 0 or more")
    return out


def cmd_scope_add(a: argparse.Namespace) -> int:
    """Lay out scope DC, then hand its shards over to its logs and global's off them."""
    from catalog import datasets, registry

    return _laid_out(a, lambda zk, homes: registry.add_scope(zk, a.dc, a.shards, a.logs, homes,
                                                              lambda: datasets.used_shards(zk)),
                     f"its datasets: midtown dataset create NAME --scope {a.dc}")


def cmd_scope_grow(a: argparse.Namespace) -> int:
    """Give scope DC more logs, then spread its shards over them (and global's off them)."""
    from catalog import registry

    return _laid_out(a, lambda zk, homes: registry.grow_scope(zk, a.dc, a.logs, homes),
                     "its writes spread over them")


def cmd_scope_remove(a: argparse.Namespace) -> int:
    """Give scope DC's shards and logs back to global, then spread global's shards over its
    logs."""
    from catalog import datasets, registry, scopes

    say = progress(a.json)
    with log_client(a) as c:
        try:
            kv, gone = registry.remove_scope(c.zk, a.dc, lambda: datasets.used_shards(c.zk))
        except scopes.ScopeError as e:
            raise CliError(str(e)) from None
        say(f"scope {a.dc} removed: shards {gone.first}..{gone.first + gone.count - 1} and logs "
            f"{', '.join(map(str, gone.logs))} are global's, the logs' homes cleared")
        rows = _spread(c.zk, kv)
    hand_offs(a, kv, rows, say)
    g = scopes.global_count(kv.scopes, kv.shards)
    out = {"removed": a.dc, "shards": f"{gone.first}..{gone.first + gone.count - 1}", "logs": list(gone.logs),
           "global_shards": f"0..{g - 1}", "handoffs": rows}
    _said(a, out, rows, f"scope {a.dc} removed: its shards {out['shards']} and logs "
                        f"{', '.join(map(str, gone.logs))} are global's (shards {out['global_shards']})")
    return 0


def _laid_out(a: argparse.Namespace, write: Callable[[Any, dict[int, str]], Any], then: str) -> int:
    """Write a layout change of scope a.dc (`write(zk, the logs' homes)` -> the topology),
    then make the hand-offs that put each scope's shards on its own logs, evenly."""
    from catalog import scopes
    from log import zk as zkpaths

    say = progress(a.json)
    with log_client(a) as c:
        topo = zkpaths.read_topology(c.zk)
        try:
            kv = write(c.zk, topo.home_map if topo is not None else {})
        except scopes.ScopeError as e:
            raise CliError(str(e)) from None
        s = scopes.find(kv.scopes, a.dc)
        assert s is not None
        say(f"scope {a.dc}: shards {s.first}..{s.first + s.count - 1} on logs {', '.join(map(str, s.logs))}")
        rows = _spread(c.zk, kv)
    hand_offs(a, kv, rows, say)
    out = {"scope": s.dc, "shards": f"{s.first}..{s.first + s.count - 1}", "logs": list(s.logs),
           "handoffs": rows}
    _said(a, out, rows, f"scope {s.dc}: shards {out['shards']} on logs {', '.join(map(str, s.logs))}; "
                        f"{len(rows)} hand-offs made; {then}")
    return 0


def _spread(zk: Any, kv: Any) -> list[dict[str, Any]]:
    """The hand-offs that put each scope's shards on its own logs, evenly (to be made)."""
    from catalog import log_map, registry, scopes

    m = registry.read_log_map(zk, kv)
    return [{"shard": sh, "from_log": f, "to_log": t}
            for sh, f, t in log_map.spread(m, None, scopes.groups(kv.scopes, kv.shards, m.logs))]


def _said(a: argparse.Namespace, out: dict[str, Any], rows: list[dict[str, Any]], line: str) -> None:
    if a.json:
        emit(out, True)
    else:
        emit(rows, False, ["shard", "from_log", "to_log", "took_s"])
        print(line)


def segment_tail(addr: str, log_id: int, segment_epoch: int) -> int:
    """A log server's last stored position in one segment of a log (drivers/failover.py)."""
    from midtown_pb import log_pb2, log_pb2_grpc
    from runtime import transport

    req = log_pb2.TailRequest(log_id=log_id, segment_epoch=segment_epoch)
    return int(log_pb2_grpc.LogStub(transport.channel(addr)).Tail(req, timeout=5).segment_last)


def scope_rows(zk: Any, tail: Callable[[str, int, int], int] | None = None) -> list[dict[str, Any]]:
    """One row per scope (global first): its shards, logs, those logs' homes, the shards not
    on its logs yet and the datasets in it."""
    from catalog import datasets, registry, scopes
    from log import zk as zkpaths

    kv = registry.read_kv(zk)
    if kv is None:
        raise CliError("no key-value topology in this cluster (midtown cluster init)")
    m = registry.read_log_map(zk, kv)
    topo = zkpaths.read_topology(zk)
    homes = topo.home_map if topo is not None else {}
    away = scopes.misplaced(kv.scopes, m.of)
    found = [datasets.get(zk, n) for n in datasets.names(zk)]
    rows = []
    for name in [scopes.GLOBAL, *(s.dc for s in kv.scopes)]:
        first, count = scopes.range_of(kv.scopes, name, kv.shards)
        logs = scopes.logs_of(kv.scopes, name, m.logs)
        rows.append({"scope": name, "shards": f"{first}..{first + count - 1}", "logs": list(logs),
                     "homes": sorted({homes.get(lg, "") or "-" for lg in logs}),
                     "not_on_its_logs": sum(1 for sh in away if scopes.scope_of_shard(kv.scopes, sh) == name),
                     "datasets": sum(1 for d in found if d is not None and d.scope == name)})
    if tail is not None and kv.failovers:  # what each fail-over cut, and what the old home holds past it
        from drivers.failover import kept_aside
        cuts = kept_aside(zk, tail, list(kv.failovers))
        for r in rows:
            got = cuts.get(str(r["scope"]), [])
            r["failed_over"] = f"{got[0]['from']}->{got[0]['to']}" if got else ""
            r["cuts"] = got
    return rows


def cmd_scope_list(a: argparse.Namespace) -> int:
    with log_client(a) as c:
        rows = scope_rows(c.zk, segment_tail)
    if a.json:
        emit(rows, True)
    else:
        shown = [{**r, "logs": ",".join(map(str, r["logs"])), "homes": ",".join(r["homes"]),
                  "lost": "; ".join(f"log {x['log']}: cut at {x['cut_at']}, {x['lost_for_sure']} lost for "
                                    "sure" + (f", {x['kept_aside']} kept aside" if x["kept_aside"] else "")
                                    for x in r.get("cuts", []))} for r in rows]
        columns = ["scope", "shards", "logs", "homes", "not_on_its_logs", "datasets", "failed_over", "lost"]
        emit(shown, False, unless_empty(shown, columns, "failed_over", "lost"))
    return 0


def add_parser(sub: Any, common: Callable[..., None]) -> None:
    """scope add|grow|remove|list."""
    sc = sub.add_parser("scope", help="lay out data centers' local scopes "
                                      "(docs/operations.md, 'Data centers')")
    scs = sc.add_subparsers(dest="cmd", metavar="COMMAND", required=True)
    ad = scs.add_parser("add", help="give data center DC a local scope: shards of its own on logs kept there")
    ad.add_argument("dc", metavar="DC", help="the data center (its logs' home: midtown log home LOG DC)")
    ad.add_argument("--shards", type=int, required=True, help="how many of global's shards it takes")
    ad.add_argument("--logs", type=_logs_arg, required=True,
                    help="the key-value logs that carry them, comma-separated, each kept in DC")
    common(ad, timeout_s=60.0)
    ad.set_defaults(fn=cmd_scope_add)
    gr = scs.add_parser("grow", help="give scope DC more logs (kept where it is kept), its shards spread "
                                     "over them")
    gr.add_argument("dc", metavar="DC", help="the scope (midtown scope list)")
    gr.add_argument("--logs", type=_logs_arg, required=True,
                    help="global's key-value logs it takes, comma-separated, each kept where the scope is "
                         "(midtown log add, then midtown log home LOG DC)")
    common(gr, timeout_s=60.0)
    gr.set_defaults(fn=cmd_scope_grow)
    rm = scs.add_parser("remove", help="give scope DC's shards and logs back to global (no dataset in it; "
                                       "the last laid out first)")
    rm.add_argument("dc", metavar="DC", help="the scope (midtown scope list)")
    common(rm, timeout_s=60.0)
    rm.set_defaults(fn=cmd_scope_remove)
    ls = scs.add_parser("list", help="the scopes: their shards, logs and datasets")
    common(ls)
    ls.set_defaults(fn=cmd_scope_list)
