"""`midtown-bench`: the benchmarks' program (`python -m bench` without the installed
script), one command per benchmark of this package, each starting what it measures on this
machine and printing a table (JSON with --json). Its outcomes end the process as the
`midtown` command's do (cli/main.py `run`)."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable

from catalog import registry, shard_moves
from cli.arguments import ascending_arg, at_least_one_arg, nonneg_arg, positive_arg, ratio_arg, subset_arg
from cli.main import end_process, run
from cluster import LAYOUT_DEFAULT, LAYOUTS

ETCD_APIS = ("grpc", "json")  # bench/etcd.py APIS (not imported: it loads gRPC)


def _runs(module: str) -> Callable[[argparse.Namespace], int]:
    """The benchmark of bench/`module`.py, imported only when it is the one asked for (each
    loads what it measures: gRPC, Spark)."""
    def run(a: argparse.Namespace) -> int:
        return int(importlib.import_module(f"bench.{module}").run(a))
    return run


def parser() -> argparse.ArgumentParser:
    """midtown-bench log|kv|failover|machines|...: one command per benchmark."""
    p = argparse.ArgumentParser(prog="midtown-bench", description="Midtown's benchmarks, on this machine")
    p.add_argument("--verbose", action="store_true", help="log what the benchmark's clients do to stderr")
    bns = p.add_subparsers(dest="cmd", metavar="COMMAND", required=True)
    bl = bns.add_parser("log", help="append throughput, latency and failover time")
    bl.add_argument("--seconds", type=float, default=5.0, help="per workload")
    bl.add_argument("--dir", help="benchmark this running cluster instead of a fresh one")
    bl.add_argument("--no-failover", action="store_true")
    bl.add_argument("--json", action="store_true")
    bl.set_defaults(fn=_runs("appends"))
    bf = bns.add_parser("failover", help="time from SIGKILL or SIGSTOP of a key's writer to its next "
                                         "acknowledged put, Midtown beside etcd (its leader)")
    bf.add_argument("--rounds", type=at_least_one_arg("--rounds"), default=10,
                    help="kills, and then pauses, of each system")
    bf.add_argument("--pause-seconds", type=positive_arg("--pause-seconds"), default=10.0)
    bf.add_argument("--deadline", type=positive_arg("--deadline"), default=10.0,
                    help="each put's deadline, in seconds, within which it retries")
    bf.add_argument("--layout", choices=LAYOUTS, default=LAYOUT_DEFAULT,
                    help="the Midtown cluster's process layout (see `cluster up --layout`)")
    bf.add_argument("--no-etcd", action="store_true", help="measure Midtown only")
    bf.add_argument("--json", action="store_true")
    bf.set_defaults(fn=_runs("failover"))
    bmc = bns.add_parser("machines", help="three machines played on this one, with one and two workers each "
                                          "and with mutual TLS: puts, CPU per put, a machine killed, "
                                          "placement counts")
    bmc.add_argument("--seconds", type=positive_arg("--seconds"), default=5.0,
                     help="each workload's length")
    bmc.add_argument("--clients", type=at_least_one_arg("--clients"), default=64)
    bmc.add_argument("--rounds", type=at_least_one_arg("--rounds"), default=3,
                     help="machines killed, per layout")
    bmc.add_argument("--json", action="store_true")
    bmc.set_defaults(fn=_runs("machines"))
    br = bns.add_parser("spark-read", help="a whole dataset read through the Spark data source: rows/s and "
                                           "the Python workers' peak memory, beside Parquet on local disk")
    br.add_argument("--keys", type=ascending_arg("--keys"), default=(1_000_000, 5_000_000),
                    help="dataset sizes, comma-separated, ascending (default 1000000,5000000)")
    br.add_argument("--value-bytes", type=at_least_one_arg("--value-bytes"), default=100)
    br.add_argument("--rounds", type=at_least_one_arg("--rounds"), default=3,
                    help="reads of each source per size, alternating (default 3)")
    br.add_argument("--json", action="store_true")
    br.set_defaults(fn=_runs("spark_read"), starts_spark=True)
    bd = bns.add_parser("datacenters", help="a dataset local to a data center beside a global one, across "
                                           "three data centers played by network namespaces (needs root)")
    bd.add_argument("--delay-ms", type=at_least_one_arg("--delay-ms"), default=20,
                    help="held each way between data centers, in the second run (default 20)")
    bd.add_argument("--jitter-ms", type=int, default=2, help="up to this much more (default 2)")
    bd.add_argument("--ops", type=at_least_one_arg("--ops"), default=50, help="of each kind, per run")
    bd.add_argument("--replicas", type=int, choices=(3, 4, 5), default=5,
                    help="copies of each shard: 5, every host (the default), or 3, one per data center")
    bd.add_argument("--json", action="store_true")
    bd.set_defaults(fn=_runs("datacenters"))
    bh = bns.add_parser("home-lost", help="what a local dataset's fail-over loses when its home data center "
                                          "is lost, against what the lag predicted (needs root)")
    bh.add_argument("--delay-ms", type=at_least_one_arg("--delay-ms"), default=20,
                    help="held each way between data centers (default 20)")
    bh.add_argument("--jitter-ms", type=int, default=2, help="up to this much more (default 2)")
    bh.add_argument("--rate", type=positive_arg("--rate"), default=50.0,
                    help="the application's writes of the local dataset per second (default 50)")
    bh.add_argument("--seconds", type=positive_arg("--seconds"), default=10.0,
                    help="how long it writes before the loss (default 10)")
    bh.add_argument("--away-s", type=positive_arg("--away-s"), default=5.0,
                    help="how long east stays lost after the fail-over (default 5)")
    bh.add_argument("--lag-ops", type=at_least_one_arg("--lag-ops"), default=50,
                    help="writes timed for the asynchronous lag (default 50)")
    bh.add_argument("--json", action="store_true")
    bh.set_defaults(fn=_runs("home_lost"))
    bw = bns.add_parser("watch", help="changes/s delivered to 1 and to 16 watchers, and the delay from a "
                                      "put's acknowledgement to its delivery (p50, p99)")
    bw.add_argument("--watchers", type=ascending_arg("--watchers"), default=(1, 16),
                    help="watcher counts, comma-separated, ascending (default 1,16)")
    bw.add_argument("--seconds", type=positive_arg("--seconds"), default=10.0,
                    help="of puts per watcher count")
    bw.add_argument("--count", type=at_least_one_arg("--count"), default=1000,
                    help="puts timed for the delay")
    bw.add_argument("--rate", type=positive_arg("--rate"), default=100.0, help="of those puts, per second")
    bw.add_argument("--json", action="store_true")
    bw.set_defaults(fn=_runs("watch"))
    bk = bns.add_parser("kv", help="put, strong get and CAS at 1 and 64 clients, against etcd "
                                   "and a Python gRPC server doing nothing (the floor)")
    bk.add_argument("--seconds", type=float, default=5.0, help="per workload and system")
    bk.add_argument("--rounds", type=at_least_one_arg("--rounds"), default=1,
                    help="measure each workload this many times, Midtown, etcd and the floor alternating, "
                         "and print medians (this machine is noisy)")
    bk.add_argument("--layout", choices=LAYOUTS, default=LAYOUT_DEFAULT,
                    help="the Midtown cluster's process layout (see `cluster up --layout`); with host, "
                         "clients send each key to the coordinator beside its log's writer, and an "
                         "'unrouted' column sends to any")
    bk.add_argument("--kv-logs", type=at_least_one_arg("--kv-logs"), default=registry.KV_LOGS_LOCAL_DEFAULT,
                    help="logs the key-value store spreads its shards over (see `cluster up --kv-logs`)")
    bk.add_argument("--ops", type=subset_arg("--ops", ("put", "get", "cas")), default=("put", "get", "cas"),
                    help="the workloads, comma-separated (default put,get,cas)")
    bk.add_argument("--clients", type=subset_arg("--clients", ("1", "64")), default=("1", "64"),
                    help="the client counts, comma-separated (default 1,64); --ops cas --clients 1 "
                         "measures single-client CAS alone")
    bk.add_argument("--etcd-api", choices=ETCD_APIS, default="grpc",
                    help="how etcd is called: its gRPC API (default) or its v3 JSON gateway over HTTP/1.1, "
                         "as this benchmark did before")
    bk.add_argument("--json", action="store_true")
    bk.set_defaults(fn=_runs("kv"))
    bt = bns.add_parser("trace", help="where a single client's put, strong get and CAS spend their time, "
                                      "step by step from traces, and what tracing costs at a sampling ratio")
    bt.add_argument("--layout", choices=LAYOUTS, default=LAYOUT_DEFAULT,
                    help="the clusters' process layout (see `cluster up --layout`)")
    bt.add_argument("--ops-traced", type=at_least_one_arg("--ops-traced"), default=200,
                    help="operations of each kind traced for the breakdown (default %(default)s)")
    bt.add_argument("--sample", type=ratio_arg("--sample"), default=0.01,
                    help="the client's sampling ratio while the cost is measured (default %(default)s)")
    bt.add_argument("--clients", type=ascending_arg("--clients"), default=(1, 16),
                    help="client counts for the cost, comma-separated, ascending (default 1,16)")
    bt.add_argument("--seconds", type=positive_arg("--seconds"), default=4.0, help="per round and cluster")
    bt.add_argument("--rounds", type=nonneg_arg("--rounds"), default=3,
                    help="rounds of the cost, the two clusters alternating (0: the breakdown alone)")
    bt.add_argument("--json", action="store_true")
    bt.set_defaults(fn=_runs("traced"))
    bp = bns.add_parser("placements", help="placements looked up (cached, uncached) and allocated "
                                           "under contention (16 threads) per second")
    bp.add_argument("--seconds", type=float, default=5.0)
    bp.add_argument("--json", action="store_true")
    bp.set_defaults(fn=_runs("placements"))
    bm = bns.add_parser("moves", help="a shard move's copy rate, puts' latency during a move against "
                                      "without, and the time to drain a node")
    bm.add_argument("--mb", type=at_least_one_arg("--mb"), default=64, help="MB loaded into the moved shard")
    bm.add_argument("--seconds", type=positive_arg("--seconds"), default=10.0,
                    help="the steady workload alone, before the move")
    bm.add_argument("--clients", type=at_least_one_arg("--clients"), default=4)
    bm.add_argument("--rate", type=float, default=shard_moves.RATE_MB_S_DEFAULT,
                    help="the rate of the move under the workload, MB/s (default: the moves' default)")
    bm.add_argument("--json", action="store_true")
    bm.set_defaults(fn=_runs("moves"))
    bh = bns.add_parser("handoffs", help="puts/s with every shard on one log and once log add and hand-offs "
                                         "spread them over three; the time a hand-off holds writes; put p99 "
                                         "during hand-offs against without")
    bh.add_argument("--seconds", type=positive_arg("--seconds"), default=10.0,
                    help="the workload before, and after, the hand-offs")
    bh.add_argument("--clients", type=at_least_one_arg("--clients"), default=16)
    bh.add_argument("--json", action="store_true")
    bh.set_defaults(fn=_runs("handoffs"))
    bs = bns.add_parser("spread", help="per storage node, records applied/s and bytes held with 3 nodes and "
                                      "with 6 at the same offered load; per log server, segments and bytes")
    bs.add_argument("--rate", type=positive_arg("--rate"), default=150.0, help="puts per second offered")
    bs.add_argument("--seconds", type=positive_arg("--seconds"), default=20.0)
    bs.add_argument("--value-bytes", type=at_least_one_arg("--value-bytes"), default=1000)
    bs.add_argument("--json", action="store_true")
    bs.set_defaults(fn=_runs("spread"))
    bi = bns.add_parser("ingest", help="exactly-once ingestion (bulk writes with event ids, 0.6%% repeats) "
                                       "against etcd, and through Spark plain vs exactly once")
    bi.add_argument("--seconds", type=float, default=10.0, help="per system and round")
    bi.add_argument("--rounds", type=at_least_one_arg("--rounds"), default=3,
                    help="rounds, the systems alternating; medians and their ranges are printed (default 3)")
    bi.add_argument("--clients", type=at_least_one_arg("--clients"), default=64, help="concurrent writers")
    bi.add_argument("--batch", type=at_least_one_arg("--batch"), default=500, help="events per bulk call")
    bi.add_argument("--spark", action=argparse.BooleanOptionalAction, default=True,
                    help="also measure Spark end to end (default: yes)")
    bi.add_argument("--spark-rows", type=at_least_one_arg("--spark-rows"), default=200_000)
    bi.add_argument("--layout", choices=LAYOUTS, default=LAYOUT_DEFAULT,
                    help="the Midtown cluster's process layout (see `cluster up --layout`)")
    bi.add_argument("--kv-logs", type=at_least_one_arg("--kv-logs"), default=registry.KV_LOGS_LOCAL_DEFAULT,
                    help="logs the key-value store spreads its shards over (see `cluster up --kv-logs`)")
    bi.add_argument("--etcd-api", choices=ETCD_APIS, default="grpc",
                    help="how etcd is called: its gRPC API (default) or its v3 JSON gateway over HTTP/1.1, "
                         "as this benchmark did before")
    bi.add_argument("--json", action="store_true")
    bi.set_defaults(fn=_runs("ingest"), starts_spark=True)
    return p


def main(argv: list[str] | None = None) -> int:
    code = run(parser(), "bench", argv)
    if argv is None:  # the program itself: end it without the interpreter's finalization
        # A benchmark's clients may outlive the clusters it stopped (the Client of each
        # system in `midtown-bench kv`); finalizing under a ZooKeeper client whose watch
        # waits on the stopped ensemble hung the program after it printed its figures.
        end_process(code)
    return code
