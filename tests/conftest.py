"""Loaded first, before the test process creates any gRPC channel or server."""

import signal

from runtime.forking import without_grpc_fork_handlers

# The test run starts one Spark session in a process with live gRPC calls (runtime/forking.py).
without_grpc_fork_handlers()


# `make test` runs the suite on two pytest-xdist workers (`-n 2`): every test that starts
# real processes (tests/integration) in one worker, one after another as in a run on one
# worker (they share module-scoped clusters and one Spark session, PITFALLS.md: ~10 s and
# up to 2 GB each; and two such modules at once, with the machine loaded besides, ran
# some waits out), and meanwhile the rest on the other: the unit tests and the seeded
# simulations, which use the CPU alone and a simulated clock.
PROCESSES = "tests/integration/"


def _scope(nodeid: str) -> str:
    return "processes" if nodeid.startswith(PROCESSES) else nodeid.split("::", 1)[0]


def pytest_collection_modifyitems(config, items):  # type: ignore[no-untyped-def]
    items.sort(key=lambda i: _scope(i.nodeid) != "processes")  # stable: modules stay whole


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
