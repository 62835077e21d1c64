"""A local Spark session for the demo, the benchmark and the tests: local mode with task
retries, on loopback only, the workers on this interpreter, the data source registered."""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any


def local_session(app: str, log_level: str = "ERROR") -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"  # loopback only, whatever the host name resolves to
    from pyspark.sql import SparkSession

    from spark_connector.source import register

    # SparkContext puts its own SIGINT handler in place (it cancels the jobs, then raises
    # KeyboardInterrupt); the command's own handler is put back, which holds a signal while
    # a process is being started and recorded (runtime/children.py) and stops the session's
    # JVM with the rest. Python sets handlers from the main thread only.
    main_thread = threading.current_thread() is threading.main_thread()
    before = signal.getsignal(signal.SIGINT) if main_thread else None
    s = (SparkSession.builder.master("local[2, 4]").appName(app)  # 2 cores, 4 attempts per task
         .config("spark.ui.enabled", "false")
         .config("spark.driver.host", "127.0.0.1")
         .config("spark.driver.bindAddress", "127.0.0.1")
         .config("spark.sql.shuffle.partitions", "4")
         .config("spark.driver.memory", "1g")
         .getOrCreate())
    if main_thread and before is not None:
        signal.signal(signal.SIGINT, before)
    s.sparkContext.setLogLevel(log_level)
    register(s)
    return s
