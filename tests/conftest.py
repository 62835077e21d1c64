"""Loaded first, before the test process creates any gRPC channel or server."""

import os

import pytest

from runtime.forking import without_grpc_fork_handlers

# The test run starts one Spark session in a process with live gRPC calls (runtime/forking.py).
without_grpc_fork_handlers()

# `make test` runs the suite in two worker processes (pytest-xdist): each picks its ports
# from its own range, so two clusters started at once never pick the same free port.
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
if _WORKER.startswith("gw") and "MIDTOWN_PORTS" not in os.environ:
    _n = int(_WORKER[2:])
    os.environ["MIDTOWN_PORTS"] = f"{20000 + 3000 * (_n % 4)}-{23000 + 3000 * (_n % 4)}"

# Test files whose tests use Spark: all go to one worker, so the run starts one session.
_SPARK_FILES = {"test_spark.py", "test_spark_edges.py"}


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own, which reads the marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """With `--dist loadgroup` (`make test`), a file's tests run in one worker (its module
    fixtures, such as a shared cluster, start once) and the Spark files share one."""
    for item in items:
        spark = item.path.name in _SPARK_FILES
        item.add_marker(pytest.mark.xdist_group("spark" if spark else item.nodeid.split("::")[0]))
