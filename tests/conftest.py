"""Loaded first, before the test process creates any gRPC channel or server."""

import signal

from runtime.forking import without_grpc_fork_handlers

# The test run starts one Spark session in a process with live gRPC calls (runtime/forking.py).
without_grpc_fork_handlers()


# `make test` runs the suite on two pytest-xdist workers (`-n 2`, TEST_WORKERS), a module
# at a time each (tests/integration's Spark modules together, as one: one Spark session per
# run, PITFALLS.md: ~10 s and up to 2 GB), the modules that start real processes first and
# the Spark ones first of those, then the whole-cluster simulation's tests (each a unit of
# its own), then the rest. The tests that start processes mostly wait (elections, session
# timeouts, restarts), and two of them at a time overlap those waits; each keeps its
# guarantee on a loaded machine (one that did not there is a defect to fix, not to retry).
PROCESSES = "tests/integration/"
SPARK = ("tests/integration/test_spark.py", "tests/integration/test_spark_edges.py",
         "tests/integration/test_spark_streaming.py")
LONGEST_SIM = "tests/sim/test_nodes.py"


def _scope(nodeid: str) -> str:
    module = nodeid.split("::", 1)[0]
    if module in SPARK:
        return "spark"
    # the whole-cluster simulation's tests one by one (each runs seeds of its own, on the
    # CPU alone): the two workers share them at the end rather than one taking them all
    return nodeid if module == LONGEST_SIM else module


def _order(nodeid: str) -> int:
    scope = _scope(nodeid)
    return (0 if scope == "spark" else 1 if scope.startswith(PROCESSES) else
            2 if scope.startswith(LONGEST_SIM) else 3)


def pytest_collection_modifyitems(config, items):  # type: ignore[no-untyped-def]
    items.sort(key=lambda i: _order(i.nodeid))  # stable: modules stay whole


def pytest_xdist_make_scheduler(config, log):  # type: ignore[no-untyped-def]
    from xdist.scheduler import LoadScopeScheduling

    class ByModule(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return _scope(nodeid)
    return ByModule(config, log)


def pytest_configure(config):  # type: ignore[no-untyped-def]
    """SIGTERM and SIGHUP end a test process as Ctrl-C does, so that the fixtures' teardowns
    stop the clusters they started (a `make test` killed with SIGTERM once left ZooKeeper,
    log servers and storage nodes running). Each pytest-xdist worker loads this too."""
    def interrupt(signum, frame):  # type: ignore[no-untyped-def]
        raise KeyboardInterrupt(f"signal {signum}")
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, interrupt)
