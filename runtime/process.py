"""What every Midtown server process does around its gRPC server: listen, say it is ready,
run until SIGTERM or SIGINT, then stop cleanly."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

import grpc
from kazoo.exceptions import ConnectionLoss, OperationTimeoutError, SessionExpiredError

from runtime import transport, world

T = TypeVar("T")


def serve_until_signal(server: grpc.Server, listen: str, ready: str,
                       on_start: Callable[[], None], on_stop: Callable[[], None],
                       grace_s: float = 1.0, name: str = "") -> None:
    serve_all([Part(server, listen, on_start, on_stop, grace_s, name)], ready)


# Exit codes a server process ends with when it must not go on; the supervisor
# (cluster/supervisor.py) reads them.
EXIT_APPLY_FAILED = 70  # a storage node could not apply a record: restart from its positions
EXIT_BEHIND_TRUNCATION = 75  # a storage node is behind a log's truncation: restart to bootstrap
EXIT_FAILED_OVER = 76  # a storage node a fail-over condemned (catalog/failover.py): restart to take a copy
EXIT_WEDGED = 69  # (EX_UNAVAILABLE) its own gRPC server stopped answering (runtime/health.py):
#                   restart it
EXIT_START_FAILED = 71  # (sysexits' EX_OSERR) a server's start failed (ZooKeeper away a minute, a
#                         defect): the supervisor starts it again
EXIT_CONFIG = 78  # (sysexits' EX_CONFIG) it cannot start as configured: another machine than its
#                   data's, an id another live process holds. Restarting would not help.


class StartRefused(Exception):
    """A server cannot start as configured (EXIT_CONFIG): the message says what to do."""

Fatal = Callable[[int, str], None]


def wait_until(fn: Callable[[], T | None], missing: str, timeout_s: float = 60.0) -> T:
    """What `fn()` gives once it is not None, asked every 0.2 s; a process starting up
    exits with `missing` (what it waited for, and what to do) if it never comes."""
    deadline = world.monotonic() + timeout_s
    while world.monotonic() < deadline:
        v = fn()
        if v is not None:
            return v
        world.sleep(0.2)
    raise SystemExit(missing)


# What ZooKeeper answers while it cannot serve a client for a while: kazoo reconnects (a
# session that expired meanwhile, as a process paused past its timeout finds on waking, is
# replaced by a new one), and the call may be made again.
ZK_UNREACHABLE = (ConnectionLoss, OperationTimeoutError, SessionExpiredError)


def through_zk_loss(fn: Callable[[], T], what: str, timeout_s: float = 60.0) -> T:
    """`fn()`, made again while ZooKeeper cannot answer it (ZK_UNREACHABLE), every 0.5 s: a
    process starting up goes on once ZooKeeper answers again, and exits saying `what` if
    it does not within `timeout_s`. `fn` must be safe to make again after it failed
    part-way."""
    deadline = world.monotonic() + timeout_s
    while True:
        try:
            return fn()
        except ZK_UNREACHABLE as e:
            if world.monotonic() >= deadline:
                raise SystemExit(f"{what}: ZooKeeper did not answer for {timeout_s:g} s "
                                 f"({type(e).__name__})") from None
            logging.getLogger("midtown.process").warning("%s: ZooKeeper: %s; trying again", what,
                                                         type(e).__name__)
            world.sleep(0.5)


def exit_now(code: int, why: str) -> None:
    """End this process at once with `code` (no graceful stop: a component that calls this
    must not write anything more), saying why."""
    logging.getLogger("midtown.process").error("%s (exit %d)", why, code)
    logging.shutdown()
    os._exit(code)


@dataclass
class Part:
    """One component of a server process: its gRPC server, where it listens (an internal
    port, runtime/transport.py; "" when the component bound its ports itself), and how it
    starts (after its server listens) and stops (after its server stopped)."""
    server: grpc.Server
    listen: str
    on_start: Callable[[], None]
    on_stop: Callable[[], None]
    grace_s: float = 1.0
    name: str = ""  # what its log lines call it


def serve_all(parts: list[Part], ready: str) -> None:
    """Start the parts in order, say `ready`, run until SIGTERM, SIGINT or SIGHUP, then stop them in
    the reverse order. Each part's gRPC server is watched through a port of its own
    (runtime/health.py): one that stops answering ends the process with EXIT_WEDGED."""
    from runtime import health, tracing  # the health and reflection services: servers only

    probes = health.probe_directory()
    done = threading.Event()
    watched: list[tuple[str, str]] = []
    try:
        for i, p in enumerate(parts):
            if p.listen:
                transport.listen(p.server, p.listen)
            probe = health.own_port(p.server, probes, str(i))
            if probe is not None:
                watched.append((p.name or f"server {i}", probe))
            p.server.start()
            try:
                p.on_start()
            except StartRefused as e:
                exit_now(EXIT_CONFIG, str(e))
            except SystemExit as e:  # said why (through_zk_loss): end, for the supervisor to start it again
                exit_now(EXIT_START_FAILED, f"{p.name or f'server {i}'}: {e}")
            except Exception:  # a defect: its traceback, then the end (the gRPC servers' threads,
                # left running by an exception in this thread, would keep a process that never started)
                logging.getLogger("midtown.process").exception("starting %s", p.name or f"server {i}")
                exit_now(EXIT_START_FAILED, f"{p.name or f'server {i}'} did not start")
        for name, addr in watched:
            health.watch_own_port(name, addr, done, lambda why: exit_now(EXIT_WEDGED, why))
        print(ready, flush=True)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, lambda *_: done.set())
        while not done.wait(1):
            pass
        for p in reversed(parts):
            p.server.stop(p.grace_s)
            p.on_stop()
    finally:
        shutil.rmtree(probes, ignore_errors=True)
        tracing.shutdown()  # the spans still pending


# The GIL hand-over interval of Midtown's server processes (Python's default is 5 ms).
# A thread that waits for I/O gets the GIL back when it wakes; the interval only forces
# hand-overs between busy threads, and each costs CPU: 0.5 ms was slower under load, 20 ms
# ran 64 clients' puts 5-9% faster than 5 ms with CAS unchanged (docs/performance.md).
SWITCH_INTERVAL_S = 0.02


def log_to_stderr(name: str, level: int | str = logging.INFO, env: Mapping[str, str] = os.environ) -> None:
    """A server process's log: one line per record on stderr, each naming the process
    (`name`, such as "host-3"), kazoo's own lines at WARNING and above, and the loggers
    MIDTOWN_DEBUG names (comma-separated, such as `midtown.log.driver,midtown.log.follow`:
    a failover's steps, docs/operations.md) at DEBUG."""
    import sys

    logging.basicConfig(level=level, stream=sys.stderr,
                        format=f"%(asctime)s {name} %(name)s %(levelname)s %(message)s")
    logging.getLogger("kazoo").setLevel(logging.WARNING)
    for n in env.get("MIDTOWN_DEBUG", "").split(","):
        if n.strip():
            logging.getLogger(n.strip()).setLevel(logging.DEBUG)


def trace_from_env(service: str, env: Mapping[str, str] = os.environ) -> None:
    """Trace this server as `service` ("host 0", "log server 3") as MIDTOWN_TRACE_* say
    (runtime/tracing.py), called where it starts: a bad setting ends it with EXIT_CONFIG,
    naming the variable, before it reaches anything. serve_all flushes the spans at its end."""
    from runtime import tracing

    try:
        tracing.from_env(service, env)
    except ValueError as e:
        exit_now(EXIT_CONFIG, str(e))


def tune_runtime(env: Mapping[str, str] = os.environ) -> None:
    """Interpreter settings for a server process: the GIL switch interval, and a garbage
    collector that runs less often (each request allocates many short-lived objects, and
    every collection of the oldest generation pauses every thread), with the objects made
    at start-up moved out of its reach. Read where a process starts, from `env`
    (MIDTOWN_SWITCH_INTERVAL_S, MIDTOWN_GC_TUNE=0 to leave the collector alone)."""
    import gc
    import sys

    sys.setswitchinterval(float(env.get("MIDTOWN_SWITCH_INTERVAL_S", SWITCH_INTERVAL_S)))
    if env.get("MIDTOWN_GC_TUNE", "1") != "0":
        gc.freeze()
        gc.set_threshold(50_000, 20, 100)
