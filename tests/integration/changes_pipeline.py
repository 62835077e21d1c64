"""A streaming pipeline, run as its own process by test_spark_streaming.py: the changes of
dataset SRC (spark.readStream, changes=true), its puts counted per partitioning key into
dataset DST through the exactly-once sink (increments, one per change id), until killed.

    python -m tests.integration.changes_pipeline ZK SRC DST CHECKPOINT START_JSON"""

from __future__ import annotations

import sys

from runtime.forking import without_grpc_fork_handlers

without_grpc_fork_handlers()  # before grpc is imported: this process starts Spark


def main(argv: list[str]) -> None:
    zk, src, dst, checkpoint, start = argv
    from spark_connector.session import local_session

    spark = local_session("midtown-changes-pipeline")
    changes = (spark.readStream.format("midtown").option("zk", zk).option("dataset", src)
               .option("changes", "true").option("decode", "utf8").option("startingPositions", start).load())
    counts = changes.where("kind = 'put'").selectExpr("partition_key", "'count' AS local_key",
                                                      "CAST(1 AS BIGINT) AS value", "change_id")
    q = (counts.writeStream.format("midtown").option("zk", zk).option("dataset", dst)
         .option("operation", "increment").option("id_column", "change_id")
         .option("checkpointLocation", checkpoint).trigger(processingTime="1 second").start())
    print("pipeline started", flush=True)
    q.awaitTermination()


if __name__ == "__main__":
    main(sys.argv[1:])
