"""`midtown-bench kv`: put, strong get and check-and-set at 1 and 64 concurrent clients,
against a local Midtown cluster and, in the same run, against etcd (Debian's etcd-server,
three members on loopback, started and stopped here), with the ratios, and beside them the
floor: a Python gRPC server doing nothing (bench/echo.py).

Both systems are driven by the same Python harness: one thread per client, each working
its own keys. Midtown is called through its SDK (gRPC); etcd through its own gRPC API
(`--etcd-api grpc`, the default) or, as the benchmark did before, its v3 JSON gateway over
HTTP/1.1 (`--etcd-api json`): bench/etcd.py."""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

from bench import echo
from bench.etcd import Etcd
from bench.harness import cpu_seconds, fresh_cluster, fresh_etcd, log
from bench.loadgen import AsyncMakeOp, run_async_workload, run_workload
from catalog.registry import KV_LOGS_LOCAL_DEFAULT
from cli.output import emit
from cluster import Cluster
from cluster.ports import free_ports
from midtown.aio import AsyncClient
from midtown.client import Client
from runtime import children

VALUE = b"v" * 64
# A system's workloads: op name -> make(client index) -> op(n).
Ops = dict[str, Callable[[int], Callable[[int], object]]]


def etcd_ops(e: Etcd, api: str = "grpc") -> Ops:
    def put(i: int) -> Callable[[int], object]:
        c = e.client(i, api)
        return lambda n: c.put(f"k{i}-{n % 100}".encode(), VALUE)

    def get(i: int) -> Callable[[int], object]:
        c = e.client(i, api)
        c.put(f"g{i}".encode(), VALUE)
        return lambda n: c.get(f"g{i}".encode())

    def cas(i: int) -> Callable[[int], object]:
        c = e.client(i, api)
        key = f"c{i}".encode()
        c.put(key, b"0")

        def op(n: int) -> None:
            if not c.put_if(key, str(n + 1).encode(), expected=str(n).encode()):
                raise RuntimeError("etcd cas failed")
        return op

    return {"put": put, "get": get, "cas": cas}


def midtown_ops(addrs: list[str], coalesce: bool = True, zk: str | None = None,
                tls_ca: str | None = None) -> Ops:
    """The workloads' operations, every thread on one shared Client, as an application's
    threads would share one; with `coalesce`, their operations travel together while a
    call is in flight (midtown/coalescing.py). With `zk`, the Client finds the coordinators
    there and sends each key to the one beside its log's writer (midtown/routes.py)."""
    shared = Client(None if zk else addrs, zk=zk, timeout=30, coalesce=coalesce, tls_ca=tls_ca)

    def client() -> Client:
        return shared

    def put(i: int) -> Callable[[int], object]:
        c = client()
        return lambda n: c.put("bench", f"k{i}", str(n % 100), VALUE) and None

    def get(i: int) -> Callable[[int], object]:
        c = client()
        c.put("bench", f"g{i}", "x", VALUE)
        return lambda n: c.get("bench", f"g{i}", "x") and None

    def cas(i: int) -> Callable[[int], object]:
        c = client()
        c.put("bench", f"c{i}", "x", b"0")

        def op(n: int) -> None:
            if not c.cas("bench", f"c{i}", "x", str(n + 1).encode(), expected=str(n).encode()).succeeded:
                raise RuntimeError("midtown cas failed")
        return op

    return {"put": put, "get": get, "cas": cas}


def midtown_async_ops(addrs: list[str], zk: str | None = None) -> tuple[dict[str, AsyncMakeOp],
                                                                          Callable[[], AsyncClient]]:
    """The same workloads as coroutines sharing one AsyncClient (which coalesces them), and
    how to open that client on the run's event loop."""

    async def put(c: AsyncClient, i: int) -> Callable[[int], Awaitable[object]]:
        return lambda n: c.put("bench", f"ak{i}", str(n % 100), VALUE)

    async def get(c: AsyncClient, i: int) -> Callable[[int], Awaitable[object]]:
        await c.put("bench", f"ag{i}", "x", VALUE)
        return lambda n: c.get("bench", f"ag{i}", "x")

    async def cas(c: AsyncClient, i: int) -> Callable[[int], Awaitable[object]]:
        await c.put("bench", f"ac{i}", "x", b"0")

        async def op(n: int) -> None:
            r = await c.cas("bench", f"ac{i}", "x", str(n + 1).encode(), expected=str(n).encode())
            if not r.succeeded:
                raise RuntimeError("midtown cas failed")
        return op

    return {"put": put, "get": get, "cas": cas}, lambda: AsyncClient(None if zk else addrs, zk=zk, timeout=30)


Runner = Callable[[str, int, float], dict]  # (op, clients, seconds) -> figures


def threads(ops: Ops) -> Runner:
    return lambda op, clients, seconds: run_workload(ops[op], clients, seconds)


def coroutines(ops: dict[str, AsyncMakeOp], connect: Callable[[], AsyncClient]) -> Runner:
    return lambda op, clients, seconds: run_async_workload(ops[op], clients, seconds, connect)


# CPU per operation, by kind of process: the benchmark's own process (the client) and the
# cluster's processes, from /proc (user + system time) around each Midtown run.
CPU_KINDS = ("client", "coordinator", "log-server", "storage-node", "host", "zookeeper", "etcd")


def with_cpu(runner: Runner, pids: Callable[[], dict[str, list[int]]]) -> Runner:
    """`runner`, adding `cpu_<kind>_us` (CPU per operation of each kind of process `pids()`
    names, µs) and `cpu_total_us` to its figures."""

    def run(op: str, clients: int, seconds: float) -> dict:
        groups = pids()
        before = {k: sum(cpu_seconds(p) for p in ps) for k, ps in groups.items()}
        r = runner(op, clients, seconds)
        n = max(1.0, r["ops_per_s"] * seconds)
        used = {k: sum(cpu_seconds(p) for p in ps) - before[k] for k, ps in groups.items()}
        for k, v in used.items():
            r[f"cpu_{k}_us"] = round(1e6 * v / n)
        r["cpu_total_us"] = round(1e6 * sum(used.values()) / n)
        return r
    return run


def cluster_pids(cluster: Cluster) -> dict[str, list[int]]:
    """This process (the client) and the cluster's processes, by kind."""
    out: dict[str, list[int]] = {"client": [os.getpid()]}
    for p in cluster.procs.values():
        if p.pid:
            out.setdefault(p.kind, []).append(p.pid)
    return out


def etcd_pids(etcd: Etcd) -> dict[str, list[int]]:
    """This process (the client) and etcd's members, measured as Midtown's processes are."""
    return {"client": [os.getpid()], "etcd": [p.pid for p in etcd.procs if p.poll() is None]}


@contextlib.contextmanager
def cluster_and_etcd(prefix: str, dataset: str, layout: str = "split",
                     kv_logs: int = KV_LOGS_LOCAL_DEFAULT) -> Iterator[tuple[Cluster, Etcd]]:
    """A local Midtown cluster holding `dataset` and a three-member etcd, in a temporary
    directory: both stopped, and the directory removed, on the way out. Its coordinators
    limit no client's rate (the default limit, 5,000 requests/s per client connection,
    would measure the limit: the benchmark's threads share one Client, one connection)."""
    with fresh_cluster(prefix, f"the {layout} layout", log, layout=layout, kv_logs=kv_logs,
                       client_rate_limit=0) as cluster:
        cluster.create_dataset(dataset)
        with fresh_etcd(prefix) as etcd:
            yield cluster, etcd


def spread(xs: list[float]) -> str:
    """The range of one figure over rounds, as printed beside its median ("0.76..0.99"; the
    one value when there was one round): how sure the median is."""
    lo, hi = min(xs), max(xs)
    fmt = (lambda v: f"{v:,.0f}") if max(abs(lo), abs(hi)) >= 100 else (lambda v: f"{v:.2f}")
    return fmt(lo) if lo == hi else f"{fmt(lo)}..{fmt(hi)}"


def medians(runs: list[dict]) -> dict:
    """Each figure's median over rounds (the middle round's, or the mean of the middle two;
    counts stay whole numbers)."""
    out: dict = {}
    for k in runs[0]:
        xs = sorted(r[k] for r in runs)
        mid = len(xs) // 2
        v = xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2
        out[k] = round(v) if all(isinstance(x, int) for x in xs) else round(v, 2)
    return out


class EchoFloor:
    """The floor (bench/echo.py) in its own process: a Python gRPC server doing nothing,
    or with `data`, making each call's bytes durable there first (and at `follower`, another
    such server): the replicated floor."""

    def __init__(self, data: Path | None = None, follower: str | None = None) -> None:
        port = free_ports(1)[0]
        self.addr = f"127.0.0.1:{port}"
        cmd = [sys.executable, "-m", "bench.echo", "--port", str(port)]
        cmd += ["--data", str(data)] if data else []
        cmd += ["--follower", follower] if follower else []
        self.proc = children.start(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:  # whatever ends the wait (a stop signal too) stops the server
            if "listening" not in (self.proc.stdout.readline() if self.proc.stdout else ""):
                raise SystemExit("the echo floor server did not start")
        except BaseException:
            self.stop()
            raise

    def ops(self) -> Ops:
        make = lambda i: echo.caller(self.addr, VALUE)  # noqa: E731  (same call whatever the op)
        return {"put": make, "get": make, "cas": make}

    def __enter__(self) -> EchoFloor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def _row(a: argparse.Namespace, systems: dict[str, Runner], op: str, clients: int) -> dict:
    """One workload on every system, `a.rounds` times alternating: the medians and ratios."""
    row: dict = {"op": op if op != "get" else "get (strong)", "clients": clients}
    for runner in systems.values():
        runner(op, clients, min(1.0, a.seconds / 4))  # warm-up
    runs: dict[str, list[dict]] = {name: [] for name in systems}
    for i in range(a.rounds):  # alternating, so a slow spell of the machine hits both
        for name, runner in systems.items():
            what = {"floor": "echo", "solo": f"{op}, not coalesced", "async": f"{op}, AsyncClient",
                    "unrouted": f"{op}, to any coordinator",
                    "floor_many": f"echo of {op}, coalesced",
                    "floor_replicated": "echo, durable on two servers"}.get(name, op)
            log(f"{name}: {what}, {clients} client(s), {a.seconds:.0f}s, round {i + 1}/{a.rounds}...")
            runs[name].append(runner(op, clients, a.seconds))
    for name in systems:
        for k, v in medians(runs[name]).items():
            row[f"{name}_{k}"] = v
    row["throughput_ratio"] = round(row["midtown_ops_per_s"] / max(1, row["etcd_ops_per_s"]), 2)
    row["p50_ratio"] = round(row["midtown_p50_ms"] / row["etcd_p50_ms"], 2)
    row["p99_ratio"] = round(row["midtown_p99_ms"] / row["etcd_p99_ms"], 2)
    return row


def run(a: argparse.Namespace) -> int:
    rows: list[dict] = []
    with cluster_and_etcd("kv", "bench", a.layout, a.kv_logs) as (cluster, etcd):
        with contextlib.ExitStack() as floors:  # every floor started is stopped
            log("starting the floors (echo servers)...")
            floor = floors.enter_context(EchoFloor())
            # The replicated floor: a second echo server, making each call durable on itself
            # and on a follower (synced RocksDB writes) before it answers.
            follower = floors.enter_context(EchoFloor(cluster.dir / "floor-follower"))
            leader = floors.enter_context(EchoFloor(cluster.dir / "floor-leader", follower.addr))
            # "solo": Midtown with the SDK's coalescing off, each operation its own call.
            # "async": the same on one AsyncClient, a coroutine per client.
            # host layout: clients find the coordinators in ZooKeeper and send each key to
            # the one beside its log's writer; "unrouted": to any coordinator, at random.
            pids = lambda: cluster_pids(cluster)  # noqa: E731
            addrs = cluster.coordinator_addrs
            zk = cluster.zk_hosts if a.layout == "host" else None
            systems = {"midtown": with_cpu(threads(midtown_ops(addrs, zk=zk)), pids),
                       "etcd": with_cpu(threads(etcd_ops(etcd, a.etcd_api)), lambda: etcd_pids(etcd)),
                       "floor": threads(floor.ops()),
                       "floor_replicated": threads(leader.ops()),
                       "solo": with_cpu(threads(midtown_ops(addrs, coalesce=False, zk=zk)), pids),
                       "async": coroutines(*midtown_async_ops(addrs, zk=zk)),
                       # the floor for coalesced calls: the SDK's Client, coalescing, against
                       # the echo server's KV service (each item answered, nothing done)
                       "floor_many": threads(midtown_ops([floor.addr]))}
            if zk:
                systems["unrouted"] = with_cpu(threads(midtown_ops(addrs)), pids)
            rows = [_row(a, systems, op, int(clients)) for op in a.ops for clients in a.clients]
    for r in rows:  # the servers' CPU per operation, without the benchmark's client
        for name in ("midtown", "etcd"):
            r[f"{name}_cpu_servers_us"] = r[f"{name}_cpu_total_us"] - r[f"{name}_cpu_client_us"]
        r["cpu_servers_ratio"] = round(r["midtown_cpu_servers_us"] / max(1, r["etcd_cpu_servers_us"]), 2)
    if a.json:
        emit(rows, True)
    else:
        emit(rows, False, ["op", "clients", "midtown_ops_per_s", "etcd_ops_per_s", "throughput_ratio",
                           "midtown_p50_ms", "etcd_p50_ms", "p50_ratio", "midtown_p99_ms",
                           "etcd_p99_ms", "p99_ratio", "floor_ops_per_s", "floor_p50_ms",
                           "floor_replicated_p50_ms", "floor_many_ops_per_s", "solo_ops_per_s",
                           "solo_p99_ms", "async_ops_per_s", "async_p99_ms",
                           *(["unrouted_ops_per_s", "unrouted_p50_ms", "unrouted_p99_ms"]
                             if a.layout == "host" else [])])
        kinds = [k for k in CPU_KINDS if f"midtown_cpu_{k}_us" in rows[0]]
        print("\nCPU per operation, µs, by kind of process (Midtown coalesced; solo's total beside it; "
              "etcd's three members measured the same way, from /proc around each of its runs)")
        emit(rows, False, ["op", "clients", *(f"midtown_cpu_{k}_us" for k in kinds), "midtown_cpu_total_us",
                           "solo_cpu_total_us", *(["unrouted_cpu_total_us"] if a.layout == "host" else []),
                           "etcd_cpu_client_us", "etcd_cpu_etcd_us", "midtown_cpu_servers_us",
                           "etcd_cpu_servers_us", "cpu_servers_ratio"])
        print("\nratios are Midtown / etcd: throughput above 1 and latency below 1 favour Midtown")
        print("floor: a Python gRPC server that answers at once (bench/echo.py), same harness and "
              "run; every Midtown operation pays at least that call; floor_many: the same server called "
              "by the SDK's coalescing Client, the floor for coalesced calls; floor_replicated: the same "
              "server making each call's bytes durable on itself and on a second one (synced RocksDB "
              "writes) before it answers, the least a write replicated before its acknowledgement costs")
        print("Midtown's threads share one Client, which coalesces their operations; solo: the same "
              "with coalescing off (each operation its own call); async: the same workload as coroutines on "
              "one event loop sharing one AsyncClient")
        if a.layout == "host":
            print(f"host layout, {a.kv_logs} key-value log(s): Midtown's clients send each key to the "
                  "coordinator beside its log's writer (midtown/routes.py); unrouted: to any coordinator")
        if a.rounds > 1:
            print(f"each figure is the median of {a.rounds} rounds, Midtown, etcd, the floors, solo and "
                  "async alternating")
    return 0
