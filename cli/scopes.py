"""The `midtown scope` commands: lay out a data center's local scope, list the scopes
(catalog/scopes.py; docs/datacenters.md)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from cli.connect import CliError, log_client
from cli.output import emit


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
    from catalog import datasets, log_map, registry, scopes
    from cli.shards import hand_offs
    from log import zk as zkpaths

    say = (lambda msg: None) if a.json else (lambda msg: print(msg, file=sys.stderr, flush=True))
    with log_client(a) as c:
        topo = zkpaths.read_topology(c.zk)
        homes = topo.home_map if topo is not None else {}
        try:
            kv = registry.add_scope(c.zk, a.dc, a.shards, a.logs, homes, lambda: datasets.used_shards(c.zk))
        except scopes.ScopeError as e:
            raise CliError(str(e)) from None
        s = scopes.find(kv.scopes, a.dc)
        assert s is not None
        say(f"scope {a.dc}: shards {s.first}..{s.first + s.count - 1} on logs {', '.join(map(str, s.logs))}")
        m = registry.read_log_map(c.zk, kv)
        rows = [{"shard": sh, "from_log": f, "to_log": t}
                for sh, f, t in log_map.spread(m, None, scopes.groups(kv.scopes, kv.shards, m.logs))]
    hand_offs(a, kv, rows, say)
    out = {"scope": s.dc, "shards": f"{s.first}..{s.first + s.count - 1}", "logs": list(s.logs),
           "handoffs": rows}
    if a.json:
        emit(out, True)
    else:
        emit(rows, False, ["shard", "from_log", "to_log", "took_s"])
        print(f"scope {s.dc}: shards {out['shards']} on logs {', '.join(map(str, s.logs))}; "
              f"{len(rows)} hand-offs made; its datasets: midtown dataset create NAME --scope {s.dc}")
    return 0


def scope_rows(zk: Any) -> list[dict[str, Any]]:
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
    return rows


def cmd_scope_list(a: argparse.Namespace) -> int:
    with log_client(a) as c:
        rows = scope_rows(c.zk)
    if a.json:
        emit(rows, True)
    else:
        emit([{**r, "logs": ",".join(map(str, r["logs"])), "homes": ",".join(r["homes"])} for r in rows],
             False, ["scope", "shards", "logs", "homes", "not_on_its_logs", "datasets"])
    return 0


def add_parser(sub: Any, common: Callable[..., None]) -> None:
    """scope add|list."""
    sc = sub.add_parser("scope", help="lay out data centers' local scopes (docs/datacenters.md)")
    scs = sc.add_subparsers(dest="cmd", metavar="COMMAND", required=True)
    ad = scs.add_parser("add", help="give data center DC a local scope: shards of its own on logs kept there")
    ad.add_argument("dc", metavar="DC", help="the data center (its logs' home: midtown log home LOG DC)")
    ad.add_argument("--shards", type=int, required=True, help="how many of global's shards it takes")
    ad.add_argument("--logs", type=_logs_arg, required=True,
                    help="the key-value logs that carry them, comma-separated, each kept in DC")
    common(ad, timeout_s=60.0)
    ad.set_defaults(fn=cmd_scope_add)
    ls = scs.add_parser("list", help="the scopes: their shards, logs and datasets")
    common(ls)
    ls.set_defaults(fn=cmd_scope_list)
