"""`midtown-bench ingest`: exactly-once ingestion of an event stream, events per second.

* Midtown: 64 concurrent writers, each sending its events through bulk calls
  (`Client.write_many`, `--batch` events a call), every event with its event id; 0.6% of the
  events repeat an earlier one (Segment's measured rate), and are skipped by the store.
* etcd, in the same run (Debian's etcd-server, three members on loopback): the same events
  the way a user would make them exactly-once there, one transaction per event that puts it
  only if its key was never created (`compare create_revision == 0`), 64 concurrent writers,
  through etcd's gRPC API (`--etcd-api json`: its JSON gateway, as before).
* Spark end to end (`--spark`): the same events as a DataFrame written through the `midtown`
  data source, plainly (put, no event ids) and exactly once (`id_column`), rows/s each.

Every figure is a median over `--rounds` (3 by default: a spread to say how sure it is),
the systems alternating (this machine is noisy), printed with its range over the rounds;
each ratio is the median of the rounds' own ratios."""

from __future__ import annotations

import argparse
import random
import time
import uuid
from collections.abc import Callable

from bench.etcd import Etcd
from bench.harness import log
from bench.kv import cluster_and_etcd, medians, spread
from bench.loadgen import run_workload
from cli.output import emit
from cluster import Cluster
from midtown.client import Client, Write

PAYLOAD = b"e" * 100
REPEAT_RATE = 0.006
TENANTS = 50


def event_stream(writer: int) -> Callable[[int], str]:
    """The n-th event id of a writer, new in every run (a round never finds the ids of the
    one before: they would all be duplicates, which cost less); REPEAT_RATE of them repeat
    an earlier one of the same run."""
    rng = random.Random(writer)
    run = uuid.uuid4().hex[:8]

    def nth(n: int) -> str:
        if n > 10 and rng.random() < REPEAT_RATE:
            n = rng.randrange(n)
        return f"{run}-w{writer}-e{n}"
    return nth


def midtown_ingest(addrs: list[str], dataset: str, batch: int) -> Callable[[int], Callable[[int], object]]:
    def make(i: int) -> Callable[[int], object]:
        c = Client(addrs, timeout=60)
        ev = event_stream(i)

        def call(n: int) -> None:
            ids = [ev(n * batch + j) for j in range(batch)]
            c.write_many(dataset, [Write.put(f"t{hash(e) % TENANTS}", e, PAYLOAD, event_id=e) for e in ids])
        return call
    return make


def etcd_ingest(e: Etcd, api: str) -> Callable[[int], Callable[[int], object]]:
    def make(i: int) -> Callable[[int], object]:
        c = e.client(i, api)
        ev = event_stream(i)
        return lambda n: c.put_if(f"events/{ev(n)}".encode(), PAYLOAD, expected=None)
    return make


def spark_rows_per_s(c: Cluster, rows: int, exactly_once: bool, dataset: str) -> float:
    from pyspark.sql import functions as F

    from spark_connector.session import local_session

    spark = local_session("midtown-bench")
    df = (spark.range(rows).withColumn("tenant", (F.col("id") % TENANTS).cast("string"))
          .withColumn("event_id", F.concat(F.lit("s"), F.col("id").cast("string")))
          .withColumn("value", F.lit(PAYLOAD)).repartition(4).cache())
    df.count()
    w = (df.write.format("midtown").option("zk", c.zk_hosts).option("dataset", dataset)
         .option("partition_key_column", "tenant").option("local_key_column", "event_id")
         .option("value_column", "value"))
    if exactly_once:
        w = w.option("id_column", "event_id")
    t0 = time.monotonic()
    w.mode("append").save()
    took = time.monotonic() - t0
    df.unpersist()
    return rows / took


def run(a: argparse.Namespace) -> int:
    rows: list[dict] = []
    with cluster_and_etcd("ingest", "ingest", a.layout, a.kv_logs) as (cluster, etcd):
        systems = {"midtown": midtown_ingest(cluster.coordinator_addrs, "ingest", a.batch),
                   "etcd": etcd_ingest(etcd, a.etcd_api)}
        per_call = {"midtown": a.batch, "etcd": 1}
        runs: dict[str, list[dict]] = {n: [] for n in systems}
        for make in systems.values():
            run_workload(make, a.clients, min(1.0, a.seconds / 4))  # warm-up
        for r in range(a.rounds):
            for n, make in systems.items():
                log(f"{n}: {a.clients} writers, {a.seconds:.0f}s, round {r + 1}/{a.rounds}...")
                w = run_workload(make, a.clients, a.seconds)
                w["events_per_s"] = w.pop("ops_per_s") * per_call[n]
                runs[n].append(w)
        row: dict = {"clients": a.clients, "events_per_call": a.batch}
        for n in systems:
            for k, v in medians(runs[n]).items():
                row[f"{n}_{k}"] = v
            row[f"{n}_events_per_s_spread"] = spread([w["events_per_s"] for w in runs[n]])
        # Each round's own ratio (its two systems ran back to back): their median, and range
        ratios = [m["events_per_s"] / max(1, e["events_per_s"])
                  for m, e in zip(runs["midtown"], runs["etcd"])]
        row["ratio"] = round(medians([{"r": x} for x in ratios])["r"], 2)
        row["ratio_spread"] = spread(ratios)
        rows.append(row)
        if a.spark:
            # Untimed: the session's first writes start its Python workers and warm the JVM
            # (measured: a first plain write at 19,000-24,000 rows/s, the next ones at
            # 43,000-50,000), which would otherwise count against round 1's plain write.
            log("spark: warming up (untimed)...")
            cluster.create_dataset("warm")
            for exactly_once in (False, True):
                spark_rows_per_s(cluster, min(a.spark_rows, 50_000), exactly_once, "warm")
            for r in range(a.rounds):
                log(f"spark: {a.spark_rows} rows, plain and exactly once, round {r + 1}/{a.rounds}...")
                cluster.create_dataset(f"plain{r}")
                cluster.create_dataset(f"once{r}")
                # Which goes first alternates: the second runs on a store holding more.
                if r % 2:
                    once = spark_rows_per_s(cluster, a.spark_rows, True, f"once{r}")
                    plain = spark_rows_per_s(cluster, a.spark_rows, False, f"plain{r}")
                else:
                    plain = spark_rows_per_s(cluster, a.spark_rows, False, f"plain{r}")
                    once = spark_rows_per_s(cluster, a.spark_rows, True, f"once{r}")
                # The ratio is taken within each round (its two writes ran back to back) and
                # its median reported: a RocksDB compaction or a node's usage count landing
                # in one write moves one round's ratio, not the figure.
                ratio = round(once / max(1.0, plain), 2)
                log(f"spark round {r + 1}: plain {plain:,.0f} rows/s, exactly once {once:,.0f}, "
                    f"ratio {ratio}")
                runs.setdefault("spark", []).append({"plain_rows_per_s": round(plain),
                                                     "exactly_once_rows_per_s": round(once),
                                                     "exactly_once_vs_plain": ratio})
            s = medians(runs["spark"])
            rows.append({"spark_rows": a.spark_rows, **{f"spark_{k}": v for k, v in s.items()},
                         "spark_ratio_spread": spread([r["exactly_once_vs_plain"] for r in runs["spark"]])})
    if a.json:
        emit(rows, True)
        return 0
    emit(rows[:1], False, ["clients", "events_per_call", "midtown_events_per_s",
                           "midtown_events_per_s_spread", "etcd_events_per_s", "etcd_events_per_s_spread",
                           "ratio", "ratio_spread",
                           "midtown_p50_ms", "etcd_p50_ms", "midtown_errors", "etcd_errors"])
    if len(rows) > 1:
        print()
        emit(rows[1:], False, ["spark_rows", "spark_plain_rows_per_s", "spark_exactly_once_rows_per_s",
                               "spark_exactly_once_vs_plain", "spark_ratio_spread"])
    print(f"\nexactly-once ingestion, {REPEAT_RATE:.1%} of the events repeated; ratio = Midtown / etcd "
          "(etcd: a transaction per event, put if the key was never created); p50 is per call")
    print(how_sure(a.rounds))
    return 0


def how_sure(rounds: int) -> str:
    """What the printed spreads mean, for `rounds` rounds."""
    if rounds == 1:
        return ("one round: no spread to say how sure a figure is (--rounds 3 or more: each ratio's median "
                "and its range over the rounds)")
    return (f"each figure is the median of {rounds} rounds, the systems alternating, and *_spread its range "
            "over them (lowest..highest); each ratio is the median of the rounds' own ratios (the two "
            "measured back to back)")
