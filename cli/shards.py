"""`midtown shard list|move|abort|hand-off`: where each shard lives, moving a shard's
replica to another storage node online, and handing a shard over to another key-value log
online. The command is the mover of catalog/shard_moves.py, or the hand-off's driver
(drivers/handoffs.py): either keeps nothing of its own (every step is a versioned write in
ZooKeeper, or a record a replica applies once), so one left half-way, killed or timed out,
is taken up by running the same command again."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from kazoo.exceptions import BadVersionError

from catalog import log_map, registry, replica_sets, scopes, shard_moves, usage
from cli.connect import CliError
from cli.output import emit, progress, unless_empty
from drivers import moves
from fleet import failure_domains
from fleet.failure_domains import PlacementError
from runtime import membership

RATE_HELP = (f"copy at most this many MB/s (default {shard_moves.RATE_MB_S_DEFAULT:g}, "
             "catalog/shard_moves.py; 0: no limit)")


def add_parser(sub: Any, common: Callable[..., None], zk_of: Callable[[argparse.Namespace], Any]) -> None:
    sp = sub.add_parser("shard", help="where each shard lives; move a shard's replica to another node")
    sps = sp.add_subparsers(dest="cmd", metavar="COMMAND", required=True)
    ls = sps.add_parser("list", help="each shard's log, replicas and move under way")
    mv = sps.add_parser("move", help="move a replica of SHARD to node --to (from node --from), online")
    mv.add_argument("shard", type=int, metavar="SHARD")
    mv.add_argument("--to", type=int, required=True, help="the storage node that takes the shard in")
    mv.add_argument("--from", dest="leaving", type=int,
                    help="the replica that leaves once the new one is in (default: none, one more copy)")
    mv.add_argument("--rate", type=float, default=shard_moves.RATE_MB_S_DEFAULT, help=RATE_HELP)
    ab = sps.add_parser("abort", help="give up a move of SHARD that has not joined yet")
    ab.add_argument("shard", type=int, metavar="SHARD")
    ho = sps.add_parser("hand-off", help="hand SHARD over to key-value log --to, online (docs/log.md)")
    ho.add_argument("shard", type=int, metavar="SHARD")
    ho.add_argument("--to", type=int, required=True, help="the key-value log that takes the shard's records")
    common(ls)
    common(mv, timeout_s=600.0)
    common(ab)
    common(ho, timeout_s=60.0)
    for p in (ls, mv, ab):
        p.set_defaults(fn=lambda a: _run(a, zk_of))
    ho.set_defaults(fn=_hand_off)


def _hand_off(a: argparse.Namespace) -> int:
    """Hand a shard over to another key-value log (drivers/handoffs.py); CliError naming the
    argument when it cannot."""
    from cli.connect import log_client
    from drivers.handoffs import HandOffError, hand_off

    with log_client(a) as logs:
        kv = registry.read_kv(logs.zk)
        if kv is None:
            raise CliError("no key-value topology in this cluster: run `midtown cluster init`")
        say = progress(a.json)
        try:
            out = hand_off(logs, kv, a.shard, a.to, a.timeout, say)
        except HandOffError as e:
            raise CliError(str(e)) from None
    emit(out, a.json)
    return 0


def _run(a: argparse.Namespace, zk_of: Callable[[argparse.Namespace], Any]) -> int:
    zk = zk_of(a)
    try:
        kv, _ = topology(zk)
        if a.cmd == "list":
            return _list(a, zk, kv)
        if not 0 <= a.shard < kv.shards:
            raise CliError(f"SHARD: {a.shard}, this cluster has shards 0..{kv.shards - 1}")
        if a.cmd == "abort":
            return _abort(a, zk)
        check_rate(a.rate)
        out = move(zk, kv, a.shard, a.to, a.leaving, a.rate, a.timeout,
                   progress(a.json))
        emit(out, a.json)
        return 0
    finally:
        zk.stop()
        zk.close()


def _list(a: argparse.Namespace, zk: Any, kv: registry.KvTopology) -> int:
    sets = registry.read_replica_sets(zk, kv)
    logs = registry.read_log_map(zk, kv)
    under_way = registry.read_moves(zk)
    where, _ = registry.placement_rule(zk)
    rows: list[dict[str, Any]] = []
    for shard in range(kv.shards):
        got = under_way.get(shard)
        m = None if got is None else got[0]
        copies = sets.of(shard)
        handing = logs.handing_of(shard)
        rows.append({"shard": shard, "scope": scopes.scope_of_shard(kv.scopes, shard),
                     "log": logs.log_of(shard), "replicas": list(copies),
                     "handing_to": None if handing is None else handing.new,
                     "machines": [where(n).label() for n in copies],
                     "data_centers": sorted(d for d in failure_domains.data_centers(copies, where) if d),
                     "shared_machines": sorted(failure_domains.shared(copies, where)),
                     "move": None if m is None else {"to": m.dest, "from": m.leaving, "phase": m.phase}})
    shared = sum(1 for r in rows if r["shared_machines"])
    if a.json:
        emit({"version": sets.version, "replicas": sets.replicas, "copies_per_dc": kv.per_dc or None,
              "log_map_version": logs.version,
              "shards": rows,
              "shards_sharing_a_machine": shared}, True)
        return 0
    table = []
    for r, shard in zip(rows, range(kv.shards)):
        got = under_way.get(shard)
        said = "" if got is None else f"{got[0].phase}: to {got[0].dest}" + (
            f" from {got[0].leaving}" if got[0].leaving is not None else "")
        to = "" if r["handing_to"] is None else f" -> {r['handing_to']}"
        table.append({**r, "log": f"{r['log']}{to}",
                      "replicas": ",".join(str(n) for n in r["replicas"]),
                      "machines": ",".join(r["machines"]), "shared": ",".join(r["shared_machines"]),
                      "dcs": ",".join(r["data_centers"]), "move": said,
                      "scope": r["scope"] if kv.scopes else ""})  # (a column once a local scope is laid out)
    emit(table, False, unless_empty(table, ["shard", "scope", "log", "replicas", "dcs", "machines", "shared",
                                            "move"], "dcs", "scope"))
    print(f"{shared} of {kv.shards} shards have copies that share a machine"
          + (" (midtown cluster rebalance moves them apart)" if shared else ""))
    if kv.per_dc:
        dcs = replica_sets.data_centers_of(kv.storage_nodes, where)
        short = sum(1 for r in rows if any(sum(1 for n in r["replicas"] if where(n).dc == d) < kv.per_dc
                                           for d in dcs))
        print(f"copies per data center: {kv.per_dc} (cluster setting); {short} of {kv.shards} shards have "
              "fewer in some data center" + (" (midtown cluster rebalance adds them)" if short else ""))
    return 0


def _abort(a: argparse.Namespace, zk: Any) -> int:
    got = registry.read_moves(zk).get(a.shard)
    if got is None:
        raise CliError(f"SHARD: no move of shard {a.shard} is under way")
    m, version = got
    if m.phase == shard_moves.JOINED:
        raise CliError(f"SHARD: the move of shard {a.shard} to node {m.dest} has joined already; "
                       f"finish it: midtown shard move {a.shard} --to {m.dest}"
                       + (f" --from {m.leaving}" if m.leaving is not None else ""))
    registry.drop_move(zk, a.shard, version)
    emit({"aborted": a.shard, "to": m.dest, "phase": m.phase}, a.json)
    return 0


def move(zk: Any, kv: registry.KvTopology, shard: int, dest: int, leaving: int | None, rate_mb_s: float,
         timeout_s: float, progress: Callable[[str], None]) -> dict[str, Any]:
    """A move driven to its end by drivers/moves.py over gRPC; CliError naming the argument
    when it cannot."""
    from midtown_pb import kv_pb2_grpc
    from runtime.stubs import Stubs

    calls = Stubs(kv_pb2_grpc.StorageStub)
    try:
        return moves.move(zk, kv, shard, dest, leaving, rate_mb_s, timeout_s, progress, calls)
    except moves.MoveError as e:
        raise CliError(str(e)) from None
    finally:
        calls.close()


# ---------------------------------------------------------------- balance
def cmd_rebalance(a: argparse.Namespace, zk_of: Callable[[argparse.Namespace], Any]) -> int:
    """`midtown cluster rebalance`: even out the shards the members hold."""
    return _balance(a, zk_of, drain=None)


def cmd_decommission(a: argparse.Namespace, zk_of: Callable[[argparse.Namespace], Any]) -> int:
    """`midtown node decommission ID`: move its shards off, then take it out."""
    return _balance(a, zk_of, drain=a.id)


def check_rate(rate: float) -> None:
    if not rate >= 0:
        raise CliError(f"--rate: {rate:g}, must be 0 (no limit) or more")


def topology(zk: Any) -> tuple[registry.KvTopology, replica_sets.ReplicaSets]:
    """The key-value topology and the replica sets (CliError if the cluster has none)."""
    kv = registry.read_kv(zk)
    if kv is None:
        raise CliError("no key-value topology in this cluster (midtown cluster init)")
    return kv, registry.read_replica_sets(zk, kv)


def _balance(a: argparse.Namespace, zk_of: Callable[[argparse.Namespace], Any], drain: int | None) -> int:
    check_rate(a.rate)
    if drain is None and a.max_handoffs is not None and a.max_handoffs < 0:
        raise CliError(f"--max-handoffs: {a.max_handoffs}, must be 0 or more")
    zk = zk_of(a)
    try:
        kv, sets = topology(zk)
        if drain is not None and drain not in kv.storage_nodes:
            raise CliError(f"ID: storage node {drain} is not a member")
        # A decommission moves copies to nodes that are up: a member that is down (its
        # machine lost with the one drained, say) would hold a move at its copy until it came
        # back. A rebalance plans onto every member (one just added may still be starting).
        live = membership.members(zk, registry.STORAGE_NODES)
        members = [n for n in kv.storage_nodes if drain is None or n in live or n == drain]
        if drain is not None and len(members) - 1 < kv.replicas:
            raise CliError(f"ID: the other {len(members) - 1} members that are up cannot hold {kv.replicas} "
                           "replicas of each shard")
        under_way = registry.read_moves(zk)
        if under_way:
            raise CliError(f"moves are under way (shards {', '.join(map(str, sorted(under_way)))}): finish "
                           "or abort them first (midtown shard list)")
        # A cluster with more members than R and no replica sets (made before them) is
        # placed first: each shard stays on R of the nodes that hold it, the others drop it.
        where, one = registry.placement_rule(zk)  # the placement rule: never two copies on one machine
        per_dc = kv.per_dc
        if drain is None and a.copies_per_dc is not None and a.copies_per_dc != kv.per_dc:
            per_dc = set_copies_per_dc(zk, kv, sets, members, a.copies_per_dc, a.dry_run)
            kv = replace(kv, per_dc=per_dc)
        try:
            first = (replica_sets.first_sets(kv.shards, list(kv.storage_nodes), kv.replicas, 0, where, one,
                                             per_dc) if sets.version < 0 else None)
        except PlacementError as e:
            raise CliError(str(e)) from None
        dropped = 0
        if first is not None:
            dropped = sum(len(a) - len(b) for a, b in zip(sets.sets, first.sets))
            sets = first if a.dry_run else registry.place(zk, kv, "placed by cluster rebalance")
        sizes = usage.shard_sizes(usage.read_reports(zk), sets)  # as the nodes last counted them
        try:
            if drain is not None:
                plan = [m for m in replica_sets.plan_moves(sets, members, [drain], sizes=sizes,
                                                           domain_of=where, one_machine=one) if m[2] == drain]
            else:
                plan = replica_sets.plan_moves(sets, members, max_moves=a.max_moves, sizes=sizes,
                                               domain_of=where, one_machine=one, per_dc=per_dc)
        except PlacementError as e:
            raise CliError(f"ID: node {drain} cannot be decommissioned: {e}" if drain is not None
                           else str(e)) from None
        rows: list[dict[str, Any]] = [{"shard": s, "from": f, "to": t} for s, t, f in plan]
        say = progress(a.json)
        # A rebalance also spreads the shards over the key-value logs, before the moves (a
        # move of a shard is refused while it is being handed over: one left under way by a
        # hand-off that was killed is finished first)
        lmap = registry.read_log_map(zk, kv)
        handoffs = [] if drain is not None else [
            {"shard": sh, "from_log": f, "to_log": t}
            for sh, f, t in log_map.spread(lmap, a.max_handoffs,
                                           scopes.groups(kv.scopes, kv.shards, lmap.logs))]
        if not a.dry_run:
            hand_offs(a, kv, handoffs, say)
            for i, row in enumerate(rows):
                say(f"move {i + 1} of {len(rows)}: shard {row['shard']} "
                    + (f"from node {row['from']} to {row['to']}" if row["from"] is not None
                       else f"copied to node {row['to']} (a copy its data center lacks)"))
                done = move(zk, kv, row["shard"], row["to"], row["from"], a.rate, a.timeout, lambda msg: None)
                row.update(seconds=done["seconds"], copied_bytes=done.get("copied_bytes"))
            if drain is not None:
                try:
                    registry.remove_storage_node(zk, drain)
                except ValueError as e:
                    raise CliError(str(e)) from None
                usage.forget(zk, drain)
        kv = registry.read_kv(zk) or kv  # without the node decommissioned
        after = sets if a.dry_run else registry.read_replica_sets(zk, kv)
        if a.dry_run:  # the sets as the plan would leave them
            for shard, to, frm in plan:
                after = replica_sets.with_set(after, shard, (set(after.of(shard)) - {frm}) | {to})
        counts = replica_sets.counts(after)
        held_bytes = {n: sum(sizes.get(s, 0) for s in after.shards_of(n)) for n in kv.storage_nodes}
        for row in rows:
            row["shard_bytes"] = sizes.get(row["shard"])
        per_log = {} if drain is not None else _shards_per_log(
            lmap if a.dry_run else registry.read_log_map(zk, kv), handoffs if a.dry_run else [])
        if a.json:
            removed = drain if drain is not None and not a.dry_run else None
            emit({"moves": rows, "dry_run": a.dry_run, "removed": removed, "dropped_copies": dropped,
                  "copies_per_dc": per_dc or None,
                  **({} if drain is not None else {"handoffs": handoffs, "shards_per_log": per_log}),
                  "shards_per_node": {str(n): counts.get(n, 0) for n in kv.storage_nodes},
                  "bytes_per_node": {str(n): held_bytes[n] for n in kv.storage_nodes}}, True)
        else:
            if dropped:
                print(f"{'would place' if a.dry_run else 'placed'} the shards on {kv.replicas} of the "
                      f"{len(members)} nodes each: {dropped} copies {'to be ' if a.dry_run else ''}dropped")
            emit(rows, False, ["shard", "from", "to", "shard_bytes", "seconds", "copied_bytes"])
            def per_node(c: dict[int, int], b: dict[int, int]) -> str:
                return ", ".join(f"{n}: {c.get(n, 0)} ({b[n]:,} B)" for n in kv.storage_nodes)
            held = per_node(counts, held_bytes)
            if a.dry_run:  # nothing moved: now is as before; the plan's outcome is "after"
                now = replica_sets.counts(sets)
                now_bytes = {n: sum(sizes.get(s, 0) for s in sets.shards_of(n)) for n in kv.storage_nodes}
                print(f"{len(rows)} moves planned (dry run: nothing moved); shards per node now "
                      f"{per_node(now, now_bytes)}; after these moves {held}")
            else:
                gone = f"; node {drain} removed" if drain is not None else ""
                print(f"{len(rows)} moves; shards per node now {held}{gone}")
            if drain is None and len(per_log) > 1:  # (one key-value log: nothing to spread)
                if handoffs:
                    emit(handoffs, False, ["shard", "from_log", "to_log", "took_s"])
                logs_now = ", ".join(f"{lg}: {c}" for lg, c in per_log.items())
                print(f"{len(handoffs)} hand-offs{' planned (dry run: none made)' if a.dry_run else ''}; "
                      f"shards per key-value log {'after them' if a.dry_run else 'now'} {logs_now}")
        return 0
    finally:
        zk.stop()
        zk.close()


def set_copies_per_dc(zk: Any, kv: registry.KvTopology, sets: replica_sets.ReplicaSets, members: list[int],
                      per_dc: int, dry_run: bool) -> int:
    """Check and (unless `dry_run`) record the cluster's copies-per-dc; CliError naming
    --copies-per-dc when the data centers cannot hold it."""
    where, one = registry.placement_rule(zk)
    try:
        replica_sets.check_per_dc(per_dc, sets, members, where, one)
    except ValueError as e:
        raise CliError(f"--{e}") from None
    if not dry_run:
        got = registry.read_kv_versioned(zk)
        try:
            if got is None or got[0] != kv:
                raise BadVersionError()
            registry.set_per_dc(zk, per_dc, got[1])
        except BadVersionError:
            raise CliError("--copies-per-dc: the key-value topology changed meanwhile: run the command "
                           "again") from None
    return per_dc


def hand_offs(a: argparse.Namespace, kv: registry.KvTopology, rows: list[dict[str, Any]],
               say: Callable[[str], None]) -> None:
    """Make the planned hand-offs one after the other (drivers/handoffs.py), each within
    --timeout; a row gets the seconds its hand-off took."""
    if not rows:
        return
    from cli.connect import log_client
    from drivers.handoffs import HandOffError, hand_off

    with log_client(a) as logs:
        for i, row in enumerate(rows):
            say(f"hand-off {i + 1} of {len(rows)}: shard {row['shard']} from log {row['from_log']} "
                f"to log {row['to_log']}")
            try:
                row["took_s"] = hand_off(logs, kv, row["shard"], row["to_log"], a.timeout)["took_s"]
            except HandOffError as e:
                raise CliError(f"hand-off of shard {row['shard']}: {e}") from None


def _shards_per_log(m: log_map.LogMap, planned: list[dict[str, Any]]) -> dict[int, int]:
    """How many shards each key-value log carries, after the `planned` hand-offs."""
    of = list(m.of)
    for row in planned:
        of[row["shard"]] = row["to_log"]
    return {lg: of.count(lg) for lg in range(m.logs)}


def add_balance_parsers(cluster: Any, node: Any, common: Callable[..., None],
                        zk_of: Callable[[argparse.Namespace], Any]) -> None:
    """`cluster rebalance` and `node decommission` (the groups are made in
    cli/cluster.py and nodes.py)."""
    rb = cluster.add_parser("rebalance",
                            help="move shards until every member holds as many (to within one) "
                            "and about as many bytes")
    rb.add_argument("--max-moves", type=int, default=None, help="at most this many moves (default: all)")
    rb.add_argument("--copies-per-dc", type=int, default=None, metavar="N",
                    help="set the cluster's copies of each shard in every data center to N (raised only), "
                         "then add the copies each data center lacks")
    rb.add_argument("--max-handoffs", type=int, default=None,
                    help="at most this many hand-offs of shards between key-value logs (default: all)")
    dc = node.add_parser("decommission",
                         help="move a storage node's shards to the others, then take it out")
    dc.add_argument("id", type=int, metavar="ID")
    for p, fn in ((rb, cmd_rebalance), (dc, cmd_decommission)):
        p.add_argument("--dry-run", action="store_true", help="print the moves, make none")
        p.add_argument("--rate", type=float, default=shard_moves.RATE_MB_S_DEFAULT, help=RATE_HELP)
        common(p, timeout_s=600.0)
        p.set_defaults(fn=lambda a, fn=fn: fn(a, zk_of))
