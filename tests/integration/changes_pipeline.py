"""A streaming pipeline for test_spark_streaming.py: the changes of dataset SRC
(spark.readStream, changes=true), its puts counted per partitioning key into dataset DST
through the exactly-once sink. Run as its own process (a driver to SIGKILL) until killed:

    python -m tests.integration.changes_pipeline ZK SRC DST CHECKPOINT START_JSON"""

from __future__ import annotations

import sys
from typing import Any

from runtime.forking import without_grpc_fork_handlers


def start(spark: Any, zk: str, src: str, dst: str, checkpoint: str, positions: str,
          trigger: str = "1 second") -> Any:
    """The query, started (a restarted one goes on from its checkpoint)."""
    changes = (spark.readStream.format("midtown").option("zk", zk).option("dataset", src)
               .option("changes", "true").option("decode", "utf8").option("startingPositions", positions)
               .load())
    counts = changes.where("kind = 'put'").selectExpr("partition_key", "'count' AS local_key",
                                                      "CAST(1 AS BIGINT) AS value", "change_id")
    return (counts.writeStream.format("midtown").option("zk", zk).option("dataset", dst)
            .option("operation", "increment").option("id_column", "change_id")
            .option("checkpointLocation", checkpoint).trigger(processingTime=trigger).start())


def main(argv: list[str]) -> None:
    without_grpc_fork_handlers()  # before grpc is imported: this process starts Spark
    from spark_connector.session import local_session

    q = start(local_session("midtown-changes-pipeline", log_level="WARN"), *argv)
    print("pipeline started", flush=True)
    q.awaitTermination()


if __name__ == "__main__":
    main(sys.argv[1:])
