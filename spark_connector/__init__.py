"""The Spark data source `midtown`: batch reads and writes, and exactly-once ingestion of
event streams (docs/spark.md).

    from spark_connector import register
    register(spark)
    spark.read.format("midtown").option("zk", ZK).option("dataset", "events").load()
"""

from spark_connector.routing import routed
from spark_connector.source import MidtownDataSource, register

__all__ = ["MidtownDataSource", "register", "routed"]
