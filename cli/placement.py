"""`midtown placement ...`: a tenant's placements, settings, and the balancer."""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from cli.connect import CliError, kv_client
from cli.output import emit


def run(a: argparse.Namespace, client: Any) -> int:
    from midtown.balancing import balance, shard_loads, variance
    from midtown.placements import Placements

    pl = Placements(client, a.placements_dataset)
    if a.cmd == "show":
        at = a.at if a.at is not None else int(time.time() * 1000)
        now = pl.get_placement(a.tenant, at)
        s = pl.settings()
        rows = [{"tenant": p.tenant, "start_ms": p.start_ms, "end_ms": p.end_ms,
                 "shards": ",".join(map(str, p.shards)), "current": p == now}
                for p in pl.placements_of(a.tenant)]
        emit({"placements": rows, "count": s.count_of(a.tenant), "salt": s.salt_of(a.tenant),
              "total_shards": s.total_shards} if a.json else rows, a.json,
             ["tenant", "start_ms", "end_ms", "shards", "current"])
    elif a.cmd == "set":
        def change(s: Any) -> Any:
            if a.tenant is not None and a.count is not None:
                s = replace(s, counts={**s.counts, a.tenant: a.count})
            if a.total is not None:
                s = replace(s, total_shards=a.total)
            if a.exclude is not None:
                s = replace(s, exclusions=tuple(sorted({int(x) for x in a.exclude.split(",") if x})))
            return s
        try:
            s = pl.update_settings(change)
        except ValueError as e:
            raise CliError(str(e)) from None
        emit({"total_shards": s.total_shards, "default_count": s.default_count,
              "exclusions": list(s.exclusions), "counts": s.counts}, a.json)
    elif a.cmd == "balance":
        try:
            load = {str(k): float(v) for k, v in json.loads(Path(a.load).read_text()).items()}
        except (OSError, ValueError) as e:
            raise CliError(f"--load: {e} (a JSON object: tenant -> load)") from None
        s = pl.settings()
        before = variance(shard_loads(s, load))
        moves, after = balance(s, load, max_moves=a.max_moves)
        rows = [{"tenant": m.tenant, "old_salt": m.old_salt, "new_salt": m.new_salt,
                 "variance_after": round(m.variance_after, 3)} for m in moves]
        if not a.dry_run and moves:
            pl.update_settings(lambda cur: replace(cur, salts={**cur.salts, **after.salts}))
        out = {"variance_before": round(before, 3),
               "variance_after": round(variance(shard_loads(after, load)), 3),
               "moves": rows, "applied": bool(moves) and not a.dry_run}
        if a.json:
            emit(out, True)
        else:
            emit(rows, False, ["tenant", "old_salt", "new_salt", "variance_after"])
            print(f"variance of load per shard: {out['variance_before']} before, {out['variance_after']} "
                  f"after{' (dry run: nothing changed)' if a.dry_run else ''}")
    return 0


def add_parser(sub: Any, common: Any) -> None:
    pp = sub.add_parser("placement", help="time-bounded shard placements of tenants (docs/placements.md)")
    pps = pp.add_subparsers(dest="cmd", metavar="COMMAND", required=True)
    sh = pps.add_parser("show", help="a tenant's placements (creates the current one if missing)")
    sh.add_argument("tenant")
    sh.add_argument("--at", type=int, help="a time in ms (default: now)")
    st = pps.add_parser("set", help="change the settings (from the next placement on)")
    st.add_argument("--tenant")
    st.add_argument("--count", type=int, help="shards for --tenant")
    st.add_argument("--total", type=int, help="total shards")
    st.add_argument("--exclude", help="shards to exclude, like 3,7 ('' for none)")
    bl = pps.add_parser("balance", help="move tenants off the most loaded shard by changing their salt")
    bl.add_argument("--load", required=True, help="JSON file: tenant -> observed load")
    bl.add_argument("--max-moves", type=int, default=3)
    bl.add_argument("--dry-run", action="store_true", help="print the moves and the variances only")
    for p in (sh, st, bl):
        p.add_argument("--placements-dataset", default="placements")
        p.add_argument("--coordinator", help="coordinator HOST:PORT (default: discover)")
        p.add_argument("--token", help="a user's token (default: $MIDTOWN_TOKEN)")
        p.add_argument("--tls-ca", help="call over TLS, trusting this CA's PEM file")
        common(p)
        p.set_defaults(fn=_cmd)


def _cmd(a: argparse.Namespace) -> int:
    with kv_client(a) as c:
        return run(a, c)
