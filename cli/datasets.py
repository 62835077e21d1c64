"""The `midtown dataset` commands: create, list, describe, drop, and change a dataset's
event-id window, quota and access list."""

from __future__ import annotations

import argparse
from typing import Any

from cli.arguments import common_options, nonneg_arg, parse_duration_ms, parse_ms, size_arg
from cli.connect import CliError, zk_client
from cli.nodes import node_states
from cli.output import emit, progress


def cmd_dataset(a: argparse.Namespace) -> int:
    from catalog import datasets, usage, users

    zk = zk_client(a)
    try:
        if a.cmd == "create":
            ttl = parse_duration_ms(a.ttl, "--ttl") if a.ttl else 0
            try:
                access = users.parse_acl(a.acl) if a.acl else None
            except ValueError as e:
                raise CliError(str(e)) from None
            d = datasets.create(zk, a.name, a.consistency, a.replication, ttl, a.rate_limit, access,
                                a.quota, parse_ms(a.dedup_window, "--dedup-window"), a.dedup_max_ids or 0,
                                parse_ms(a.dedup_warn_below, "--dedup-warn-below"), a.scope, a.survive)
            emit(datasets.describe(d), a.json,
                 ["name", "consistency", "scope", "shards", "replication", "ttl_ms", "rate_limit",
                  "quota_bytes", "acl", "id"])
        elif a.cmd == "dedup":
            window = parse_ms(a.window, "--window") if a.window else None
            warn = parse_ms(a.warn_below, "--warn-below") if a.warn_below else None
            d = datasets.set_dedup(zk, a.name, window, a.max_ids, warn)
            emit(datasets.describe(d), a.json,
                 ["name", "dedup_window_ms", "dedup_max_ids", "dedup_warn_below_ms"])
        elif a.cmd == "quota":
            d = datasets.set_quota(zk, a.name, a.size)
            emit(datasets.describe(d), a.json, ["name", "quota_bytes"])
        elif a.cmd == "grant":
            d = datasets.grant(zk, a.name, a.user, a.perm)
            emit(datasets.describe(d), a.json, ["name", "acl"])
        elif a.cmd == "list":
            found = [datasets.get(zk, n) for n in datasets.names(zk)]
            rows = [datasets.describe(x) for x in found if x is not None]
            emit(rows, a.json, ["name", "consistency", "scope", "replication", "ttl_ms", "rate_limit",
                                "quota_bytes", "acl"])
        elif a.cmd == "describe":
            got = datasets.get(zk, a.name)
            if got is None:
                raise CliError(f"NAME: no dataset {a.name!r}")
            out = datasets.describe(got)
            out["used_bytes"], _ = usage.used(usage.view(zk), got.id)
            ids = [(e.ids, e.oldest_ms, e.log_time_ms) for st in node_states(zk).values()
                   for e in st.event_ids if e.dataset == got.id]
            out["event_ids"] = max((n for n, _, _ in ids), default=0)
            out["effective_dedup_window_ms"] = datasets.effective_dedup_window(got, ids)
            low = got.dedup_warn_below_ms and out["effective_dedup_window_ms"] < got.dedup_warn_below_ms
            out["warning"] = (f"effective dedup window {out['effective_dedup_window_ms'] // 1000}s is below "
                              f"{got.dedup_warn_below_ms // 1000}s: raise --dedup-max-ids" if low else "")
            emit(out, a.json, ["name", "consistency", "scope", "shards", "replication", "ttl_ms",
                               "rate_limit", "quota_bytes", "used_bytes", "effective_dedup_window_ms",
                               "warning", "acl", "id"])
        elif a.cmd == "drop":
            datasets.drop(zk, a.name)
            emit({"dropped": a.name}, a.json)
    except datasets.DatasetError as e:
        raise CliError(str(e)) from None
    finally:
        zk.stop()
        zk.close()
    return 0


def cmd_dataset_failover(a: argparse.Namespace) -> int:
    """Move a local dataset's scope to another data center, its home lost
    (catalog/failover.py): print where each log was cut and what that lost."""

    from catalog.failover import FailoverError
    from drivers import failover
    from runtime import world

    say = progress(a.json)
    zk = zk_client(a)
    try:
        try:
            plan = failover.fail_over(zk, a.name, a.to, a.force,
                                      lambda hold, logs: node_states(zk, True, hold, logs), say)
        except FailoverError as e:
            raise CliError(str(e)) from None
        say(f"scope {plan.scope}: its logs cut and kept in {plan.to!r} now; waiting for {plan.to!r}'s log "
            "servers to write them")
        deadline = world.monotonic() + a.timeout
        while (waiting := failover.writing_in(zk, plan)) and world.monotonic() < deadline:
            world.sleep(failover.WAIT_S)
        out = failover.report(plan, failover.scope_datasets(zk, plan.scope))
        out["not_written_yet"] = waiting
    finally:
        zk.stop()
        zk.close()
    if a.json:
        emit(out, True)
    else:
        emit(out["logs"], False, ["log", "cut_at", "lost", "lost_entries", "sources"])
        print(f"datasets moved to {plan.to!r} (scope {plan.scope}): {', '.join(out['datasets'])}")
        print(f"storage nodes to take a copy from a source before applying again: "
              f"{', '.join(map(str, out['rebuilt'])) or 'none'}")
        print(out["unheard"])
    if waiting:
        raise CliError(f"--timeout: the fail-over is written, but log(s) {', '.join(map(str, waiting))} have "
                       f"no writer in {plan.to!r} after {a.timeout:g}s (midtown log status)")
    return 0


def add_parser(sub: Any) -> None:
    """dataset create|dedup|quota|grant|list|describe|drop|fail-over."""
    ds = sub.add_parser("dataset", help="create, list, describe and drop datasets")
    dss = ds.add_subparsers(dest="cmd", metavar="COMMAND", required=True)
    dc = dss.add_parser("create", help="create a dataset")
    dc.add_argument("name")
    dc.add_argument("--consistency", default="strong", choices=["strong", "eventual"])
    dc.add_argument("--replication", type=nonneg_arg("--replication"), default=3)
    dc.add_argument("--scope", default="global",
                    help="a data center whose local scope holds it (its writes stay there), or global "
                         "(the default; midtown scope list, docs/operations.md 'Data centers')")
    dc.add_argument("--survive", default="dc", choices=["dc", "zone"],
                    help="a global strong dataset survives the loss of a data center (dc, the default: "
                         "log servers in three or more), or of a zone only (zone: on two data centers)")
    dc.add_argument("--ttl", help="default TTL of new values (30s, 5m, 2h, 7d)")
    dc.add_argument("--rate-limit", type=float, default=0,
                    help="requests/s over all clients (default: none)")
    dc.add_argument("--acl", help="who may use it: USER=r or USER=rw, comma-separated "
                                  "(default: open to every client)")
    dc.add_argument("--quota", type=size_arg("--quota"), default=0,
                    help="bytes it may hold (10GiB, 500MB; default: none); writes that add data "
                         "are refused beyond it")
    dc.add_argument("--dedup-window", help="how long (log time) an event id is remembered: 28d, 12h "
                                           "(default 28d; docs/exactly-once.md)")
    dc.add_argument("--dedup-max-ids", type=nonneg_arg("--dedup-max-ids"),
                    help="event ids kept per shard at most; the oldest go first (default 1000000)")
    dc.add_argument("--dedup-warn-below", help="warn when the effective window falls below this (7d)")
    common_options(dc)
    dd = dss.add_parser("dedup", help="change a dataset's event-id window, cap or warning threshold")
    dd.add_argument("name")
    dd.add_argument("--window", help="28d, 12h, 30m ...")
    dd.add_argument("--max-ids", type=nonneg_arg("--max-ids"), help="event ids per shard")
    dd.add_argument("--warn-below", help="warn when the effective window is shorter")
    common_options(dd)
    dq = dss.add_parser("quota", help="set a dataset's storage quota")
    dq.add_argument("name")
    dq.add_argument("size", type=size_arg("SIZE"), help="10GiB, 500MB, bytes, or none")
    common_options(dq)
    dg = dss.add_parser("grant", help="set a user's access to a dataset")
    dg.add_argument("name")
    dg.add_argument("user")
    dg.add_argument("perm", help="r (get, scan), rw (everything) or none (take access away)")
    common_options(dg)
    for name, helptext in (("list", "list datasets"), ("describe", "show a dataset"),
                           ("drop", "drop a dataset")):
        sp = dss.add_parser(name, help=helptext)
        if name != "list":
            sp.add_argument("name")
        common_options(sp)
    for sp in (dc, dd, dg, dq, *[dss.choices[n] for n in ("list", "describe", "drop")]):
        sp.set_defaults(fn=cmd_dataset)
    fo = dss.add_parser("fail-over", help="move a local dataset's scope to another data center, its home "
                                          "lost (docs/operations.md, 'A data center lost')")
    fo.add_argument("name")
    fo.add_argument("--to", required=True, metavar="DC", help="the data center that keeps it from now on")
    fo.add_argument("--force", action="store_true",
                    help="even while log servers of its home are registered (loses what the home "
                         "acknowledges after the new home's replicas stop reading)")
    common_options(fo, timeout_s=60.0)
    fo.set_defaults(fn=cmd_dataset_failover)
