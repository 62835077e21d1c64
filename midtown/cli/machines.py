"""`midtown cluster check`: the placement health check. The machines the cluster's servers
run on (and their localities), and how many shards and open log segments have copies that
share a machine (catalog/failure_domains.py). Exit 0 when none do (or the cluster says it
runs on one machine), 1 otherwise: `cluster rebalance` moves shards apart; a segment's
next one (an ensemble change, or the writer's next claim) is placed apart."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from catalog import failure_domains, machines, registry
from log import zk as zkpaths
from midtown.cli.connect import CliError
from midtown.output import emit


def check(zk: Any) -> dict[str, Any]:
    """What `cluster check` reports, read from ZooKeeper."""
    kv = registry.read_kv(zk)
    topo = zkpaths.read_topology(zk)
    if kv is None or topo is None:
        raise CliError("no cluster in this ZooKeeper (midtown cluster init, or cluster up)")
    log_where = machines.domains(zk, machines.LOG_SERVERS)
    node_where = machines.domains(zk, machines.STORAGE_NODES)
    live_logs = set(zkpaths.servers(zk))
    live_nodes = set(registry.members(zk, registry.STORAGE_NODES))
    by_machine: dict[str, dict[str, Any]] = {}

    def row(d: failure_domains.Domain) -> dict[str, Any]:
        return by_machine.setdefault(d.machine, {"machine": d.machine,
                                                 "locality": failure_domains.locality_text(d.locality),
                                                 "log_servers": [], "storage_nodes": [], "down": []})
    for s in topo.log_servers:
        r = row(log_where(s))
        r["log_servers"].append(s)
        if s not in live_logs:
            r["down"].append(f"log server {s}")
    for n in kv.storage_nodes:
        r = row(node_where(n))
        r["storage_nodes"].append(n)
        if n not in live_nodes:
            r["down"].append(f"storage node {n}")
    sets = registry.read_replica_sets(zk, kv)
    shards = [s for s in range(kv.shards) if failure_domains.shared(sets.of(s), node_where)]
    open_segments: list[dict[str, Any]] = []
    for log_id in range(topo.logs):
        meta, _ = zkpaths.read_metadata(zk, log_id)
        seg = meta.last_segment
        if seg is not None and not seg.sealed:
            open_segments.append({"log": log_id, "epoch": seg.epoch, "servers": list(seg.replicas),
                                  "shared": sorted(failure_domains.shared(seg.replicas, log_where))})
    sharing_segments = [s for s in open_segments if s["shared"]]
    one = machines.one_machine(zk)
    return {"machines": sorted(by_machine.values(), key=lambda r: r["machine"]),
            "shards": kv.shards, "shards_sharing_a_machine": len(shards), "sharing_shards": shards,
            "open_segments": len(open_segments), "open_segments_sharing_a_machine": len(sharing_segments),
            "segments": open_segments, "one_machine": one,
            "ok": one or not (shards or sharing_segments)}


def cmd_check(a: argparse.Namespace, zk_of: Callable[[argparse.Namespace], Any]) -> int:
    zk = zk_of(a)
    try:
        out = check(zk)
    finally:
        zk.stop()
        zk.close()
    if a.json:
        emit(out, True)
        return 0 if out["ok"] else 1
    emit([{**r, "log_servers": ",".join(map(str, r["log_servers"])),
           "storage_nodes": ",".join(map(str, r["storage_nodes"])), "down": ", ".join(r["down"])}
          for r in out["machines"]], False, ["machine", "locality", "log_servers", "storage_nodes", "down"])
    print(f"\nshards whose copies share a machine: {out['shards_sharing_a_machine']} of {out['shards']}")
    print(f"open log segments whose servers share a machine: {out['open_segments_sharing_a_machine']} of "
          f"{out['open_segments']}")
    if out["one_machine"]:
        print("placement: this cluster says it runs on one machine; its copies share it")
    elif not out["ok"]:
        print("placement: copies share a machine (a machine's loss loses them): `midtown cluster rebalance` "
              "moves shards apart; a segment's servers are placed apart at its next ensemble change")
    else:
        print("placement: every shard and open segment has its copies on distinct machines")
    return 0 if out["ok"] else 1


def add_parser(cluster: Any, common: Callable[..., None], zk_of: Callable[[argparse.Namespace], Any]) -> None:
    ck = cluster.add_parser("check", help="the machines the servers run on, and copies that share one "
                                          "(exit 1 when any do)")
    common(ck)
    ck.set_defaults(fn=lambda a: cmd_check(a, zk_of))
