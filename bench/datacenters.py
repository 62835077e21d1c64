"""`midtown-bench datacenters`: what a dataset's scope costs across data centers
(docs/architecture.md, "Data centers"), on machines played by network namespaces.

Three data centers of hosts (the host layout: a log server, a storage node and a
coordinator per process, as `machine up` runs them): east of three machines (hosts 0-2),
west of one (host 3), north of one (host 4); ZooKeeper in the root namespace, off the
data path. Key-value log 1 is kept in east and carries scope east's shards (`log home`,
`scope add`): the dataset `local` is in that scope, `global` in the other shards, on log 0,
whose ensemble takes one server in each data center (the placement rule's widest tier);
every host holds every shard. Each operation is timed one at a time by a
client running in east's first machine and then in west's (`Client(zk=..., dc=...)`, which
sends a key's writes and strong reads to the coordinator beside its log's writer), first
with no delay, then with `--delay-ms` held each way between data centers (bench/wan.py in
every namespace, for the packets to the other data centers' machines). Also timed: a
bounded read of `local` from west (the replica there, when it has applied recently
enough), and the asynchronous lag: from a write's acknowledgement to its value readable
from the replica in west.

The round trips a figure is worth are printed beside it (p50 over twice the delay). The
published anchors are quoted with their source, not measured here: Manhattan's p99 of
"low tens of milliseconds" for a local strongly consistent operation and "low hundreds"
for a global one (Twitter's engineering blog, "Strong consistency in Manhattan", 2016),
over real distances between data centers."""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.harness import Say, midtown_json, percentile_ms, progress_for
from cli.output import emit
from cluster import Cluster
from cluster.netns import Namespace, can_make, namespaces
from midtown.client import Client
from midtown.model import Value
from runtime import children

# machine -> data center; the first three are east's. Host i runs on machine i.
Machines = tuple[tuple[str, str], ...]  # (machine, its data center)
MACHINES: Machines = (("e0", "east"), ("e1", "east"), ("e2", "east"), ("w0", "west"), ("n0", "north"))
CLIENTS_ON = ("e0", "w0")  # where the timed clients run: in east, in west
SHARDS, LOCAL_SHARDS = 16, 8
OPS = ("put", "get", "cas", "incr")
QUEUE = 7  # the NFQUEUE number bench/wan.py reads in each namespace


def run(a: argparse.Namespace) -> int:
    say = progress_for(a.json)
    with tempfile.TemporaryDirectory(prefix="midtown-bench-datacenters-") as tmp, \
            started("datacenters", Path(tmp) / "midtown", MACHINES, "10.207.{}.{}", a.replicas,
                    say) as (c, by_machine):
        dc_of = [d for _, d in MACHINES]
        writers = {r["log"]: dc_of[r["writer"]] for r in midtown_json(c.zk_hosts, "log", "status")
                   if r["log"] in (0, 1) and r["writer"] is not None}
        rows: list[dict[str, Any]] = []
        lags: dict[int, list[float]] = {}
        links: dict[int, float] = {}
        for delay in (0, a.delay_ms):
            with held(MACHINES, by_machine, delay, a.jitter_ms, say):
                links[delay] = link_rtt_ms(c, by_machine, a.ops)
                for m in CLIENTS_ON:
                    rows += _measure(c, by_machine[m], dict(MACHINES)[m], delay, a.ops, say)
                lags[delay] = async_lag(c, a.ops, f"lag{delay}-", say)
    for r in rows:  # the round trips a figure is worth, of the link as measured
        r["link_round_trips"] = round(r["p50_ms"] / links[r["delay_ms"]], 2) if r["delay_ms"] else None
    _print(rows, lags, writers, a, links)
    return 0


def link_rtt_ms(c: Cluster, by_machine: dict[str, Namespace], n: int) -> float:
    """The p50 of a TCP connection's set-up (one round trip) from east's first machine to
    west's host, through whatever holds the packets: the link's own round trip, with its
    jitter and bench/wan.py's queue."""
    west = next(p for p in c.procs.values() if p.kind == "host" and p.machine == "w0")
    xs, _ = _probe(c, by_machine["e0"], "east", west.addr_of("coordinator"), "connect", n)
    return round(percentile_ms(xs, 0.5), 2)


@contextlib.contextmanager
def started(bench: str, root: Path, machines: Machines, subnet: str, replicas: int,
            say: Say) -> Iterator[tuple[Cluster, dict[str, Namespace]]]:
    """A host per machine, each in a network namespace of its own (`subnet`: their
    addresses), started and laid out (lay_out); stopped on the way out. SystemExit naming
    `bench` where namespaces cannot be made (not root)."""
    why = can_make()
    if why is not None:
        raise SystemExit(f"bench {bench}: {why}")
    with namespaces(len(machines), subnet, bench[0]) as (ns, bridge):
        by_machine = {m: n for (m, _), n in zip(machines, ns)}
        c = cluster(root, machines, by_machine, bridge, replicas)
        try:
            dcs = len({d for _, d in machines})
            say(f"starting {len(machines)} hosts in {len(machines)} namespaces ({dcs} data centers)...")
            c.start(timeout_s=300)
            lay_out(c, machines, say)
            yield c, by_machine
        finally:
            c.stop()


def cluster(root: Path, machines: Machines, by_machine: dict[str, Namespace], bridge: str,
            replicas: int) -> Cluster:
    """A host per machine of `machines` ((name, data center), host i on machine i), each in
    its namespace (`by_machine`); ZooKeeper in the root namespace, on the bridge's address.
    Not started."""
    places = {f"host-{i}": (by_machine[m].name, by_machine[m].ip) for i, (m, _) in enumerate(machines)}
    places["zookeeper"] = ("", bridge)
    where = {f"host-{i}": (m, f"dc={dc},zone={m}") for i, (m, dc) in enumerate(machines)}
    # By default every host holds every shard (replicas = hosts): each data center holds the
    # data, and the host that writes a log holds its shards, so it answers their writes
    # itself; with fewer, a shard has a copy in each data center (the placement rule's
    # widest tier), and a write of one the writer's host does not hold is answered by a
    # replica on another host.
    return Cluster(root, logs=4, shards=SHARDS, kv_logs=2, log_server_count=len(machines), layout="host",
                   replicas=replicas, places=places, where=where)


def lay_out(c: Cluster, machines: Machines, say: Say) -> None:
    """Log 1 kept in east, scope east on it, the two datasets; until log 1's writer and open
    segment are in east."""
    say("log 1 kept in east, scope east laid out on it (its shards handed over)...")
    midtown_json(c.zk_hosts, "log", "home", "1", "east")
    midtown_json(c.zk_hosts, "scope", "add", "east", "--shards", str(LOCAL_SHARDS), "--logs", "1",
                 timeout_s=300)
    east = {i for i, (_, d) in enumerate(machines) if d == "east"}
    deadline = time.monotonic() + 120
    while True:
        row = next(r for r in midtown_json(c.zk_hosts, "log", "status") if r["log"] == 1)
        if row["writer"] in east and {int(s) for s in row["replicas"]} <= east:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"log 1 is not in east after 120 s: {row}")
        time.sleep(0.5)
    midtown_json(c.zk_hosts, "dataset", "create", "local", "--scope", "east")
    midtown_json(c.zk_hosts, "dataset", "create", "global")


@contextlib.contextmanager
def held(machines: Machines, by_machine: dict[str, Namespace], delay_ms: int, jitter_ms: int,
         say: Say) -> Iterator[None]:
    """bench/wan.py in every namespace, holding what it sends to the other data centers'
    machines `delay_ms` (nothing when 0); stopped on the way out."""
    if not delay_ms:
        yield
        return
    dc = dict(machines)
    procs = []
    try:
        for m, n in by_machine.items():
            others = [f"{x.ip}/32" for y, x in by_machine.items() if dc[y] != dc[m]]
            cmd = n.run(sys.executable, "-m", "bench.wan", "--queue", str(QUEUE), "--delay-ms", str(delay_ms),
                        "--jitter-ms", str(jitter_ms), *[a for o in others for a in ("--to", o)])
            p = children.start(cmd, stdout=subprocess.PIPE, text=True)
            procs.append(p)
            line = p.stdout.readline() if p.stdout is not None else ""
            if not line.startswith("bench.wan: holding packets"):
                raise RuntimeError(f"bench.wan in {n.name} did not start: {line!r}")
        say(f"{delay_ms} ms held each way between data centers ({jitter_ms} ms of jitter)")
        yield
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()


def _measure(c: Cluster, ns: Namespace, dc: str, delay_ms: int, n: int, say: Say) -> list[dict[str, Any]]:
    """Every operation `n` times on each dataset, then bounded gets of `local` when `dc` is
    not east, by a client in namespace `ns` (a process of its own, there: `probe`)."""
    rows = []
    for ds in ("local", "global"):
        say(f"delay {delay_ms} ms: {ds} from {dc} ({n} of each operation)...")
        for op in OPS:
            leased = _leased(c)
            xs, _ = _probe(c, ns, dc, ds, op, n)
            row = _row(ds, dc, op, delay_ms, xs)
            if op == "get":  # how many the writer's lease served (no round to its followers)
                row["by_lease"] = f"{int(_leased(c) - leased)}/{n}"
            rows.append(row)
    if dc != "east":
        xs, near = _probe(c, ns, dc, "local", "bounded", n)
        rows.append({**_row("local", dc, "bounded get (5 s)", delay_ms, xs), "served_near": f"{near}/{n}"})
    return rows


def _probe(c: Cluster, ns: Namespace, dc: str, ds: str, op: str, n: int) -> tuple[list[float], int]:
    """(seconds each, bounded gets served near) of `n` operations `op` timed by `probe` run
    in namespace `ns`."""
    p = subprocess.run(ns.run(sys.executable, "-m", "bench.datacenters", c.zk_hosts, dc, ds, op, str(n)),
                       capture_output=True, text=True, timeout=600)
    if p.returncode:
        raise RuntimeError(f"the client in {dc} failed: {p.stderr.strip()[-2000:]}")
    got = json.loads(p.stdout)
    return got["seconds"], got["near"]


def probe(zk: str, dc: str, ds: str, op: str, n: int) -> dict[str, Any]:
    """What a client in data center `dc` measures: `n` operations `op` on dataset `ds`, one
    at a time, each timed (after one untimed, which finds the coordinators)."""
    if op == "connect":  # `ds` is an address: time a TCP connection's set-up, one round trip
        host, _, port = ds.rpartition(":")
        out = []
        for k in range(n + 1):
            t = time.monotonic()
            socket.create_connection((host, int(port)), timeout=10).close()
            if k:
                out.append(time.monotonic() - t)
        return {"seconds": out, "near": 0}
    with Client(zk=zk, timeout=30, dc=dc) as db:
        _one(db, ds, op, -1)
        near = 0
        out = []
        for k in range(n):
            t = time.monotonic()
            v = _one(db, ds, op, k)
            out.append(time.monotonic() - t)
            near += int(op == "bounded" and isinstance(v, Value) and v.staleness_bound_ms > 0)
    return {"seconds": out, "near": near}


def _leased(c: Cluster) -> float:
    """Strong reads the hosts' coordinators had their writer's lease serve, so far."""
    return sum(c.metric(f"host-{i}", "midtown_strong_reads_total", 'path="lease"')
               for i in range(len(MACHINES)))


def _one(db: Client, ds: str, op: str, k: int) -> object:
    """Operation `op` on key number `k` of dataset `ds` (a key's put comes before its get
    and CAS: the CAS expects what the put wrote)."""
    if op == "put":
        return db.put(ds, f"p{k}", "k", b"v")
    if op == "get":
        return db.get(ds, f"p{k}", "k")
    if op == "cas":
        return db.cas(ds, f"p{k}", "k", b"w", expected=b"v")
    if op == "bounded":
        return db.get(ds, f"p{k}", "k", consistency="bounded", max_staleness_ms=5000)
    return db.incr(ds, f"n{k}", "k")


def _row(ds: str, dc: str, op: str, delay_ms: int, xs: list[float]) -> dict[str, Any]:
    p50 = percentile_ms(xs, 0.5)
    return {"dataset": ds, "from": dc, "op": op, "delay_ms": delay_ms, "p50_ms": round(p50, 2),
            "p99_ms": round(percentile_ms(xs, 0.99), 2),
            "round_trips": round(p50 / (2 * delay_ms), 2) if delay_ms else None}


def async_lag(c: Cluster, n: int, prefix: str, say: Say) -> list[float]:
    """From a write acknowledged (by the coordinator beside log 1's writer, in east) to its
    value read from the replica in west (an eventual read from west goes to a coordinator
    there, which asks the replicas there first), in seconds, `n` writes. From the root
    namespace, whose packets are not held: the lag measured is the replica's own."""
    say("the asynchronous lag: written in east, read in west...")
    out = []
    with Client(zk=c.zk_hosts, timeout=30, dc="east") as east, \
            Client(zk=c.zk_hosts, timeout=30, dc="west") as west:
        for k in range(n):
            key = f"{prefix}{k}"  # a key of its own: not one a run before wrote
            value = key.encode()
            east.put("local", key, "k", value)
            t = time.monotonic()
            while True:
                got = west.get("local", key, "k", consistency="eventual")
                if got is not None and got.value == value:
                    break
                if time.monotonic() - t > 30:
                    raise RuntimeError(f"write {key} not readable in west after 30 s")
                time.sleep(0.002)
            out.append(time.monotonic() - t)
    return out


def _print(rows: list[dict[str, Any]], lags: dict[int, list[float]], writers: dict[int, str],
           a: argparse.Namespace, links: dict[int, float]) -> None:
    lag_rows = [{"delay_ms": d, "lag_p50_ms": round(percentile_ms(xs, 0.5), 2),
                 "lag_p99_ms": round(percentile_ms(xs, 0.99), 2)} for d, xs in lags.items()]
    if a.json:
        emit({"operations": rows, "async_lag": lag_rows, "link_rtt_ms": links,
              "writer_dc": {"global": writers.get(0), "local": writers.get(1)}}, True)
        return
    emit(rows, False, ["dataset", "from", "op", "delay_ms", "p50_ms", "p99_ms", "round_trips",
                       "link_round_trips", "by_lease", "served_near"])
    print()
    emit(lag_rows, False, ["delay_ms", "lag_p50_ms", "lag_p99_ms"])
    print(f"\nthe writers, as the runs began: global's log 0 in {writers.get(0)}, local's log 1 in "
          f"{writers.get(1)}")
    print("the link's round trip between data centers, measured (a TCP connection's set-up from east to "
          "west, p50): " + ", ".join(f"{v} ms at {d} ms held each way" for d, v in links.items()))
    print(f"{a.ops} operations of each kind, one at a time; round_trips: p50 over twice the delay held "
          "each way; link_round_trips: p50 over the link's round trip as measured; by_lease: strong gets "
          "the writer's read lease served; served_near: bounded gets the replica in the caller's data "
          "center served. Published, not measured here (Twitter's "
          "engineering blog, 2016): Manhattan's p99 is 'low tens of milliseconds' for local strongly "
          "consistent operations, 'low hundreds' for global ones.")


if __name__ == "__main__":  # the timed client, in a data center's namespace (`_probe`)
    print(json.dumps(probe(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))))
