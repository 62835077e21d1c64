"""Routing rows by time-bounded shard placements (midtown/placements.py) before writing:
each row gets the shard its tenant's placement (for the row's time) routes its event to, and
the DataFrame is repartitioned by that shard, so each Spark task writes the events of few
tenants. Exactly once still holds whatever the routing: it comes from the event ids.

    from spark_connector import routed
    routed(events, zk=ZK, tenant_column="tenant", time_column="ts_ms", id_column="event_id")
        .write.format("midtown")...save()

A Python data source cannot ask Spark to repartition its input, so this is a function to
call on the DataFrame before `.write` (docs/spark.md)."""

from __future__ import annotations

from typing import Any

PLACEMENT_COLUMN = "placement_shard"


def routed(df: Any, *, zk: str, tenant_column: str, time_column: str, id_column: str,
           placements_dataset: str = "placements", partitions: int | None = None) -> Any:
    """`df` with a `placement_shard` column, repartitioned by it (one Spark partition per
    placement shard in use, or `partitions`)."""
    from pyspark.sql.types import IntegerType, StructField, StructType

    for option, col in (("tenant_column", tenant_column), ("time_column", time_column),
                        ("id_column", id_column)):
        if col not in df.columns:
            raise ValueError(f"{option}: no column {col!r} in the DataFrame")
    schema = StructType([*df.schema.fields, StructField(PLACEMENT_COLUMN, IntegerType(), False)])

    def add_shard(rows: Any) -> Any:
        from midtown import Client
        from midtown.placements import Placements

        with Client(zk=zk, timeout=60) as db:
            p = Placements(db, placements_dataset)
            for r in rows:
                shard = p.route(str(r[tenant_column]), str(r[id_column]), int(r[time_column]))
                yield (*r, shard)

    with_shard = df.sparkSession.createDataFrame(df.rdd.mapPartitions(add_shard), schema)
    n = partitions or max(1, with_shard.select(PLACEMENT_COLUMN).distinct().count())
    return with_shard.repartition(n, PLACEMENT_COLUMN)
