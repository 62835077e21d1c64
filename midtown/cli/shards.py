"""`midtown shard list|move|abort`: where each shard lives, and moving a shard's replica
to another storage node online. The command is the mover of catalog/shard_moves.py: it
keeps nothing of its own (every step is a versioned write in ZooKeeper), so a move it
left half-way, killed or timed out, is taken up by running the same command again."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any

from catalog import failure_domains, registry, replica_sets, shard_moves, usage
from catalog.failure_domains import PlacementError
from catalog.routing import log_of
from midtown.cli.connect import CliError
from midtown.output import emit

POLL_S = 0.2

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
    common(ls)
    common(mv, timeout_s=600.0)
    common(ab)
    for p in (ls, mv, ab):
        p.set_defaults(fn=lambda a: _run(a, zk_of))


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
                   (lambda msg: None) if a.json else (lambda msg: print(msg, file=sys.stderr, flush=True)))
        emit(out, a.json)
        return 0
    finally:
        zk.stop()
        zk.close()


def check_rule(zk: Any, copies: tuple[int, ...], shard: int, dest: int, leaving: int | None) -> None:
    """CliError naming --to when a move of `shard` to `dest` would put two of its copies on
    one machine (catalog/failure_domains.py), unless the cluster runs on one machine."""
    where, one = registry.placement_rule(zk)
    if failure_domains.allowed(copies, dest, leaving, where, one) or dest in copies:
        return
    machine = where(dest).machine
    beside = [c for c in copies if c != leaving and where(c).machine == machine]
    raise CliError(f"--to: storage node {dest} runs on machine {machine!r}, which holds shard {shard}'s "
                   f"copy on node {', '.join(map(str, beside))} already: two copies on one machine are lost "
                   f"together; choose a node on another machine")


def _list(a: argparse.Namespace, zk: Any, kv: registry.KvTopology) -> int:
    sets = registry.read_replica_sets(zk, kv)
    moves = registry.read_moves(zk)
    where, _ = registry.placement_rule(zk)
    rows: list[dict[str, Any]] = []
    for shard in range(kv.shards):
        got = moves.get(shard)
        m = None if got is None else got[0]
        copies = sets.of(shard)
        rows.append({"shard": shard, "log": log_of(shard, kv.logs), "replicas": list(copies),
                     "machines": [where(n).label() for n in copies],
                     "shared_machines": sorted(failure_domains.shared(copies, where)),
                     "move": None if m is None else {"to": m.dest, "from": m.leaving, "phase": m.phase}})
    shared = sum(1 for r in rows if r["shared_machines"])
    if a.json:
        emit({"version": sets.version, "replicas": sets.replicas, "shards": rows,
              "shards_sharing_a_machine": shared}, True)
        return 0
    table = []
    for r, shard in zip(rows, range(kv.shards)):
        got = moves.get(shard)
        said = "" if got is None else f"{got[0].phase}: to {got[0].dest}" + (
            f" from {got[0].leaving}" if got[0].leaving is not None else "")
        table.append({**r, "replicas": ",".join(str(n) for n in r["replicas"]),
                      "machines": ",".join(r["machines"]), "shared": ",".join(r["shared_machines"]),
                      "move": said})
    emit(table, False, ["shard", "log", "replicas", "machines", "shared", "move"])
    print(f"{shared} of {kv.shards} shards have copies that share a machine"
          + (" (midtown cluster rebalance moves them apart)" if shared else ""))
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
    """Drive a move of `shard` to `dest` (from `leaving`) to its end, or take up the one
    under way; a dict of what it did. CliError when it cannot, naming the argument."""
    from kazoo.exceptions import BadVersionError, NodeExistsError

    deadline = time.monotonic() + timeout_s
    t0 = time.monotonic()
    out: dict[str, Any] = {"shard": shard, "to": dest, "from": leaving}
    started = False
    said = ""
    while True:
        if time.monotonic() > deadline:
            raise CliError(f"the move did not end within --timeout {timeout_s:g}s (it stands at "
                           f"{said or 'its start'}); run the same command again to go on")
        got = registry.read_moves(zk).get(shard)
        if got is None:
            if started:  # it ended (by us, or by another mover that took it up)
                sets = registry.read_replica_sets(zk, kv)
                out.update(replicas=list(sets.of(shard)), seconds=round(time.monotonic() - t0, 3))
                return out
            sets = registry.read_replica_sets(zk, kv)
            if sets.version < 0:
                raise CliError(f"this cluster has no replica sets: its {len(kv.storage_nodes)} storage nodes "
                               f"hold every shard, as it has {kv.replicas} replicas of each (midtown node "
                               "add places the shards when it grows past that)")
            if dest not in kv.storage_nodes:
                raise CliError(f"--to: storage node {dest} is not a member (midtown node add {dest})")
            check_rule(zk, sets.of(shard), shard, dest, leaving)
            try:
                m = shard_moves.start(sets.of(shard), shard, dest, leaving)
            except ValueError as e:
                raise CliError(f"--{e}") from None
            if leaving is not None and len(sets.of(shard)) <= 1:
                raise CliError(f"--from: node {leaving} is the shard's only replica")
            try:
                registry.start_move(zk, m)
            except NodeExistsError:
                continue  # another mover started one first: look at it
            started = True
            continue
        m, version = got
        if (m.dest, m.leaving) != (dest, leaving):
            raise CliError(f"SHARD: a move of shard {shard} to node {m.dest}"
                           + (f" from node {m.leaving}" if m.leaving is not None else "")
                           + f" is under way ({m.phase}); finish it with the same arguments, or give it up "
                           f"(before it joins) with: midtown shard abort {shard}")
        started = True
        if m.phase != said:
            progress(f"shard {shard}: {m.phase}")
            said = m.phase
        try:
            if m.phase == shard_moves.COPYING:
                resp = _copy(zk, shard, dest, leaving, rate_mb_s, deadline)
                if resp is None:
                    time.sleep(POLL_S * 5)
                    continue
                # A copy installed by an earlier call, on a node restarted since: not known.
                known = not resp.installed_before or bool(resp.source)
                out.update(copied_keys=resp.keys if known else None,
                           copied_bytes=resp.bytes if known else None, copy_source=resp.source or None,
                           copy_seconds=round(time.monotonic() - t0, 3), copied_at=resp.position)
                if resp.keys:
                    progress(f"shard {shard}: copied {resp.keys} keys, {resp.bytes} bytes from {resp.source}")
                registry.update_move(zk, shard_moves.copied(m, resp.position), version)
            elif m.phase == shard_moves.TAILING:
                sets = registry.read_replica_sets(zk, kv)
                new = replica_sets.with_set(sets, shard, shard_moves.joined_sets(sets.of(shard), m))
                registry.change_sets(zk, new, f"move of shard {shard}: node {dest} joins",
                                     (shard_moves.joined(m), version))
            elif m.phase == shard_moves.JOINED:
                if not shard_moves.may_finish(m, _positions(zk, kv, shard, (dest, leaving))):
                    time.sleep(POLL_S)
                    continue
                sets = registry.read_replica_sets(zk, kv)
                new = replica_sets.with_set(sets, shard, shard_moves.finished_sets(sets.of(shard), m))
                registry.change_sets(zk, new, f"move of shard {shard} to node {dest}: done"
                                     + (f", node {leaving} leaves" if leaving is not None else ""),
                                     (shard_moves.finished(m), version))
        except BadVersionError:
            continue  # another mover moved it on: look again


def _copy(zk: Any, shard: int, dest: int, leaving: int | None, rate_mb_s: float, deadline: float) -> Any:
    """Ask the destination to take the copy in (None: not now, try again)."""
    import grpc

    from midtown_pb import kv_pb2 as pb
    from midtown_pb import kv_pb2_grpc
    from runtime import transport

    addr = registry.members(zk, registry.STORAGE_NODES).get(dest)
    if addr is None:
        return None  # the destination is down: wait for it (or abort the move)
    req = pb.CopyShardRequest(shard=shard, rate_mb_s=rate_mb_s,
                              prefer_source=leaving if leaving is not None else -1)
    try:
        with transport.channel(addr) as channel:
            return kv_pb2_grpc.StorageStub(channel).CopyShard(
                req, timeout=max(1.0, deadline - time.monotonic()))
    except grpc.RpcError as e:
        if e.code() == grpc.StatusCode.FAILED_PRECONDITION:
            raise CliError(f"storage node {dest} refused the copy: {e.details()}") from None
        return None


def _positions(zk: Any, kv: registry.KvTopology, shard: int, nodes: tuple[int, int | None]) -> dict[int, int]:
    """Each of `nodes`' position in the shard's log, from those that answer."""
    import grpc

    from midtown_pb import kv_pb2 as pb
    from midtown_pb import kv_pb2_grpc
    from runtime import transport

    live = registry.members(zk, registry.STORAGE_NODES)
    lg = log_of(shard, kv.logs)
    out = {}
    for n in nodes:
        if n is None or n not in live:
            continue
        try:
            with transport.channel(live[n]) as channel:
                st = kv_pb2_grpc.StorageStub(channel).Status(pb.NodeStatusRequest(), timeout=5)
            out[n] = int(st.log_positions[lg])
        except (grpc.RpcError, IndexError):
            continue
    return out


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
    zk = zk_of(a)
    try:
        kv, sets = topology(zk)
        if drain is not None and drain not in kv.storage_nodes:
            raise CliError(f"ID: storage node {drain} is not a member")
        # A decommission moves copies to nodes that are up: a member that is down (its
        # machine lost with the one drained, say) would hold a move at its copy until it came
        # back. A rebalance plans onto every member (one just added may still be starting).
        live = registry.members(zk, registry.STORAGE_NODES)
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
        try:
            first = (replica_sets.first_sets(kv.shards, list(kv.storage_nodes), kv.replicas, 0, where, one)
                     if sets.version < 0 else None)
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
                                               domain_of=where, one_machine=one)
        except PlacementError as e:
            raise CliError(f"ID: node {drain} cannot be decommissioned: {e}" if drain is not None
                           else str(e)) from None
        rows: list[dict[str, Any]] = [{"shard": s, "from": f, "to": t} for s, t, f in plan]
        say = (lambda msg: None) if a.json else (lambda msg: print(msg, file=sys.stderr, flush=True))
        if not a.dry_run:
            for i, row in enumerate(rows):
                say(f"move {i + 1} of {len(rows)}: shard {row['shard']} "
                    f"from node {row['from']} to {row['to']}")
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
        if a.json:
            removed = drain if drain is not None and not a.dry_run else None
            emit({"moves": rows, "dry_run": a.dry_run, "removed": removed, "dropped_copies": dropped,
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
        return 0
    finally:
        zk.stop()
        zk.close()


def add_balance_parsers(cluster: Any, node: Any, common: Callable[..., None],
                        zk_of: Callable[[argparse.Namespace], Any]) -> None:
    """`cluster rebalance` and `node decommission` (the groups are made in
    midtown/cli/cluster.py and nodes.py)."""
    rb = cluster.add_parser("rebalance",
                            help="move shards until every member holds as many (to within one) "
                            "and about as many bytes")
    rb.add_argument("--max-moves", type=int, default=None, help="at most this many moves (default: all)")
    dc = node.add_parser("decommission",
                         help="move a storage node's shards to the others, then take it out")
    dc.add_argument("id", type=int, metavar="ID")
    for p, fn in ((rb, cmd_rebalance), (dc, cmd_decommission)):
        p.add_argument("--dry-run", action="store_true", help="print the moves, make none")
        p.add_argument("--rate", type=float, default=shard_moves.RATE_MB_S_DEFAULT, help=RATE_HELP)
        common(p, timeout_s=600.0)
        p.set_defaults(fn=lambda a, fn=fn: fn(a, zk_of))
