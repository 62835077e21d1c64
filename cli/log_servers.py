"""`midtown log-server list|add|decommission`: the pool of log servers that segments are
placed on (log/ensemble.py). `add` puts an id in the pool (new segments may then open on
it; if it was out of the pool, it forgets its replica store's identity so that it may
start on an empty disk: log/store_identity.py); `decommission` marks a
server as leaving, so that the writers of the logs whose open segment it is in move them
to new segments on servers that stay and re-replicate its sealed segments to others
(log/election.py, log/rereplicator.py), waits until no segment with entries still held
names it, and then takes it out of the pool. Run again after an interruption, it waits on
where it stood; it works on a server that is down for good as well (that is how one is
replaced)."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterable
from typing import Any

from cli.connect import CliError, Unreachable
from cli.output import emit, progress
from log import limits
from log import zk as zkpaths

POLL_S = 0.5


def add_parser(sub: Any, common: Callable[..., None], zk_of: Callable[[argparse.Namespace], Any]) -> None:
    lp = sub.add_parser("log-server", help="the pool of log servers: list, add, decommission")
    lps = lp.add_subparsers(dest="cmd", metavar="COMMAND", required=True)
    ls = lps.add_parser("list", help="each log server: live, leaving, segments it holds, logs it writes")
    ad = lps.add_parser("add", help="put a log server id in the pool (then start the server)")
    dc = lps.add_parser("decommission",
                        help="move a log server's segments to the others, then take it out of the pool")
    for p in (ad, dc):
        p.add_argument("id", type=int, metavar="ID")
    common(ls)
    common(ad)
    common(dc, timeout_s=600.0)
    for p in (ls, ad, dc):
        p.set_defaults(fn=lambda a: _run(a, zk_of))


def _run(a: argparse.Namespace, zk_of: Callable[[argparse.Namespace], Any]) -> int:
    zk = zk_of(a)
    try:
        topo = zkpaths.read_topology(zk)
        if topo is None:
            raise CliError("no log topology in this cluster (midtown cluster init)")
        if a.cmd == "list":
            rows = held(zk, topo)
            emit(rows, a.json, ["server", "addr", "live", "in_pool", "leaving", "segments", "open", "writes"])
            return 0
        if a.id < 0:
            raise CliError(f"ID: {a.id}, must be 0 or more")
        if a.cmd == "add":
            if a.id not in topo.log_servers:
                # Out of the pool (decommissioned: no segment names it): it may start on an
                # empty disk (log/store_identity.py); one still running records its store
                # again once it is back in the pool (Node.keep_store_recorded).
                zkpaths.forget_store_identity(zk, a.id)
            zkpaths.set_leaving(zk, a.id, False)
            topo = zkpaths.change_pool(zk, add=a.id)
            emit({"server": a.id, "pool": list(topo.log_servers)}, a.json)
            return 0
        return _decommission(a, zk, topo)
    finally:
        zk.stop()
        zk.close()


def held(zk: Any, topo: zkpaths.Topology) -> list[dict[str, Any]]:
    """One row per log server of the pool, registered, or named by a segment that still
    holds entries (above the log's truncation point): those segments, the open ones among
    them, and the logs it writes. A server that left (out of the pool, holding and writing
    nothing) and is not running is gone: no row."""
    live = zkpaths.servers(zk)
    leaving = zkpaths.leaving(zk)
    ids = sorted(set(topo.log_servers) | set(live) | leaving)
    rows = {i: {"server": i, "addr": live.get(i, {}).get("addr", ""), "live": i in live,
                "in_pool": i in topo.log_servers, "leaving": i in leaving,
                "segments": 0, "open": 0, "writes": 0} for i in ids}
    for log_id in range(topo.logs):
        meta, _ = zkpaths.read_metadata(zk, log_id)
        before, _ = zkpaths.read_truncation(zk, log_id)
        for seg in meta.segments:
            if seg.end is not None and seg.end < before:
                continue  # truncated away: nothing of it is held
            for r in seg.replicas:
                row = rows.setdefault(r, {"server": r, "addr": "", "live": False, "in_pool": False,
                                          "leaving": r in leaving, "segments": 0, "open": 0, "writes": 0})
                row["segments"] += 1
                row["open"] += not seg.sealed
        w = zkpaths.read_writer(zk, log_id)
        if w is not None and w["server"] in rows:
            rows[w["server"]]["writes"] += 1
    return [r for _, r in sorted(rows.items())
            if r["in_pool"] or r["live"] or r["segments"] or r["writes"]]


def check_enough_stay(server: int, pool: Iterable[int], leaving: Iterable[int], live: Iterable[int]) -> None:
    """CliError unless the live servers of the pool that are not leaving, `server` aside,
    are enough for an ensemble (else, once it left, a log could get no writer)."""
    leaving, live = set(leaving), set(live)
    stay = [s for s in pool if s != server and s not in leaving and s in live]
    if len(stay) < limits.ENSEMBLE_SIZE:
        raise CliError(f"ID: without log server {server} the pool has {len(stay)} live servers that stay "
                       f"({', '.join(map(str, stay)) or 'none'}); a segment needs {limits.ENSEMBLE_SIZE}: "
                       "add and start another first (midtown log-server add)")


def _decommission(a: argparse.Namespace, zk: Any, topo: zkpaths.Topology) -> int:
    if a.id not in topo.log_servers and a.id not in zkpaths.leaving(zk):
        raise CliError(f"ID: log server {a.id} is not in the pool {list(topo.log_servers)}")
    check_enough_stay(a.id, topo.log_servers, zkpaths.leaving(zk), zkpaths.servers(zk))
    say = progress(a.json)
    zkpaths.set_leaving(zk, a.id, True)
    started = time.monotonic()
    deadline = started + a.timeout
    last = None
    while True:
        row = next((r for r in held(zk, topo) if r["server"] == a.id), {"segments": 0, "writes": 0})
        left = (row["segments"], row["writes"])
        if left == (0, 0):
            break
        if left != last:
            say(f"log server {a.id}: {left[0]} segments still name it, it writes {left[1]} logs")
            last = left
        if time.monotonic() > deadline:
            raise Unreachable(f"log server {a.id} still holds {left[0]} segments and writes {left[1]} logs "
                              f"after {a.timeout:g} s; run the command again to go on waiting")
        time.sleep(POLL_S)
    topo = zkpaths.change_pool(zk, remove=a.id)
    out = {"server": a.id, "removed": True, "pool": list(topo.log_servers),
           "seconds": round(time.monotonic() - started, 1)}
    if a.json:
        emit(out, True)
    else:
        print(f"log server {a.id} holds no segment and writes no log: out of the pool "
              f"{list(topo.log_servers)} after {out['seconds']} s. Stop its process now.")
    return 0
