"""The `midtown node` commands: storage nodes' status, and taking them out of and into the
membership (decommission is added by cli/shards.py)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from catalog import registry, shard_moves
from cli.arguments import common_options, nonneg_arg
from cli.connect import CliError, log_client, zk_client
from cli.output import emit, unless_empty
from fleet import failure_domains
from runtime import membership


def node_states(zk: Any, durable: bool = False, hold: str = "",
                hold_logs: Sequence[int] = ()) -> dict[int, Any]:
    """Each member storage node's Status answer (nodes that do not answer are left out);
    `durable`: their positions made durable first, and `hold`: held there for `hold_logs`
    (a fail-over's cut: drivers/failover.py)."""
    import grpc

    from midtown_pb import kv_pb2 as kvpb
    from midtown_pb import kv_pb2_grpc
    from runtime import transport

    kv = registry.read_kv(zk)
    if kv is None:
        raise CliError("no key-value topology in this cluster")
    live = membership.members(zk, registry.STORAGE_NODES)
    states: dict[int, Any] = {}
    for nid in kv.storage_nodes:
        addr = live.get(nid)  # members only
        if addr is None:
            continue
        try:
            states[nid] = kv_pb2_grpc.StorageStub(transport.channel(addr)).Status(
                kvpb.NodeStatusRequest(durable=durable, hold=hold, hold_logs=hold_logs), timeout=5)
        except grpc.RpcError:
            pass
    return states


def cmd_node_status(a: argparse.Namespace) -> int:
    """Storage nodes: up or not, the shards and bytes each holds, how far behind each
    log's end, and whether replicas that stand at the same position of a shard hold the
    same digest."""
    from catalog import usage

    with log_client(a) as logs:
        kv = registry.read_kv(logs.zk)
        if kv is None:
            raise CliError("no key-value topology in this cluster")
        live = membership.members(logs.zk, registry.STORAGE_NODES)
        sets = registry.read_replica_sets(logs.zk, kv)
        log_map = registry.read_log_map(logs.zk, kv)
        where, _ = registry.placement_rule(logs.zk)
        ends = {r["log"]: r["last"] for r in logs.status()}
        states = node_states(logs.zk)
        counted = usage.read_reports(logs.zk)  # what each node last counted it holds
        moving: dict[int, int] = {}  # moves under way to or from each node
        for m, _ in registry.read_moves(logs.zk).values():
            for n in (m.dest, m.leaving):
                if n is not None:
                    moving[n] = moving.get(n, 0) + 1
    digests: dict[tuple[int, int], set[int]] = {}
    for st in states.values():
        for s in st.shards:
            digests.setdefault((s.shard, s.position), set()).add(s.digest)
    rows: list[dict[str, Any]] = []
    for nid in kv.storage_nodes:
        st = states.get(nid)
        # Where it runs, and how many of its shards have another copy on its machine.
        place = {"machine": where(nid).label(), "dc": where(nid).dc,
                 "sharing": sum(1 for s in sets.shards_of(nid)
                                if where(nid).machine in failure_domains.shared(sets.of(s), where))}
        if st is None:
            rows.append({"node": nid, **place, "addr": live.get(nid), "state": "down",
                         "shards": len(sets.shards_of(nid)), "bytes": _held(counted, nid),
                         "moving": moving.get(nid, 0), "behind": None,
                         "max_lag": None, "diverged_shards": None, "reclaimed": None,
                         "anti_entropy_taken": None, "anti_entropy_shards": None, "purged": None,
                         "event_ids": None, "event_ids_by_dataset": None})
            continue
        lags = [max(0, ends.get(i, -1) + 1 - p) for i, p in enumerate(st.log_positions)
                if i in sets.logs_of(nid, log_map)]  # the logs it tails
        diverged = sum(1 for s in st.shards if len(digests[(s.shard, s.position)]) > 1)
        rows.append({"node": nid, **place, "addr": live.get(nid), "state": "up", "shards": len(st.shards),
                     "bytes": _held(counted, nid), "moving": moving.get(nid, 0), "behind": sum(lags),
                     "max_lag": max(lags, default=0), "diverged_shards": diverged,
                     "reclaimed": st.reclaimed, "anti_entropy_taken": st.lww_repaired,
                     "anti_entropy_shards": st.lww_shards_pulled, "purged": st.lww_purged,
                     "event_ids": sum(e.ids for e in st.event_ids),
                     "event_ids_by_dataset": _ids_by_dataset(st.event_ids)})
    columns = ["node", "dc", "machine", "addr", "state", "shards", "sharing", "bytes", "moving", "behind",
               "max_lag", "diverged_shards", "reclaimed", "anti_entropy_taken", "anti_entropy_shards",
               "purged", "event_ids"]
    emit(rows, a.json, unless_empty(rows, columns, "dc"))
    return 0 if all(r["state"] == "up" and not r["diverged_shards"] for r in rows) else 1


def _held(reports: dict[int, Any], node_id: int) -> int | None:
    """The bytes of keys and values a node counted at its last usage count (None: none yet)."""
    r = reports.get(node_id)
    return None if r is None else sum(r.bytes.values())


def _ids_by_dataset(event_ids: Any) -> dict[str, dict]:
    """Per dataset: ids held and the age of the oldest (in log time) over its shards."""
    out: dict[str, dict] = {}
    for e in event_ids:
        d = out.setdefault(e.dataset.rsplit("#", 1)[0], {"ids": 0, "oldest_age_ms": 0})
        d["ids"] += e.ids
        d["oldest_age_ms"] = max(d["oldest_age_ms"], max(0, e.log_time_ms - e.oldest_ms))
    return out


def cmd_node_remove(a: argparse.Namespace) -> int:
    from catalog import usage

    def remove(zk: Any, node_id: int) -> registry.KvTopology:
        t = registry.remove_storage_node(zk, node_id)
        usage.forget(zk, node_id)  # its counts no longer count toward the quotas
        return t
    t = _change_members(a, remove)
    emit({"removed": a.id, "storage_nodes": list(t.storage_nodes)}, a.json)
    return 0


def cmd_node_add(a: argparse.Namespace) -> int:
    from cli import shards as shards_cli

    if a.rebalance:
        shards_cli.check_rate(a.rate)
    t = _change_members(a, registry.add_storage_node)
    if a.rebalance:  # then move shards onto it, as `cluster rebalance` does, and say that
        a.dry_run, a.max_moves, a.max_handoffs = False, None, 0  # moves onto the node only
        a.copies_per_dc = None  # (the cluster's, as set)
        return shards_cli.cmd_rebalance(a, zk_client)
    emit({"added": a.id, "storage_nodes": list(t.storage_nodes)}, a.json)
    return 0


def _change_members(a: argparse.Namespace, change: Any) -> Any:
    zk = zk_client(a)
    try:
        return change(zk, a.id)
    except ValueError as e:
        raise CliError(str(e)) from None
    finally:
        zk.stop()
        zk.close()


def add_parser(sub: Any) -> Any:
    """node status|remove|add: storage node administration (and decommission, added by
    cli/shards.py); returns the group's subparsers."""
    nd = sub.add_parser("node", help="storage node administration")
    nds = nd.add_subparsers(dest="cmd", metavar="COMMAND", required=True)
    ns = nds.add_parser("status", help="storage nodes: up, entries behind, diverged shards")
    common_options(ns)
    ns.set_defaults(fn=cmd_node_status)
    nr = nds.add_parser("remove", help="take a storage node out of the membership (it stops "
                                       "holding the logs back)")
    nr.add_argument("id", type=nonneg_arg("ID"))
    common_options(nr)
    nr.set_defaults(fn=cmd_node_remove)
    na = nds.add_parser("add", help="make a storage node a member; started, it bootstraps from a "
                                    "peer if the logs no longer hold what it lacks")
    na.add_argument("id", type=nonneg_arg("ID"))
    na.add_argument("--rebalance", action="store_true",
                    help="then move shards onto it until every member holds as many (replica sets)")
    na.add_argument("--rate", type=float, default=shard_moves.RATE_MB_S_DEFAULT,
                    help=f"with --rebalance: copy at most this many MB/s (default "
                         f"{shard_moves.RATE_MB_S_DEFAULT:g}; 0: no limit)")
    common_options(na, timeout_s=600.0)
    na.set_defaults(fn=cmd_node_add)
    return nds
