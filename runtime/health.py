"""gRPC health checking (grpc.health.v1, what load balancers and grpc-health-probe speak)
and server reflection on every Midtown server, and the server's watch over its own port.

The serving status tells the truth: each server gives a check (a function saying whether it
can do its job now) and the status is set from it every HEALTH_INTERVAL_S: a log server not
registered or without ZooKeeper, a storage node still catching up with its logs, a
coordinator without ZooKeeper are NOT_SERVING.

The servicer is ours, not grpcio-health-checking's `HealthServicer` (PITFALLS.md): that one
sends a watch's first response while it holds its lock, and takes the same lock in the
close callback that the gRPC server runs on its own serving thread, so concurrent watches
with short deadlines deadlocked a coordinator for good (issue 68). Here no lock is ever
held while a response is sent or while gRPC's threads wait: a status is a value read under
a lock and sent after it is released, a watch is a generator that waits on a condition
(with a timeout, so it notices a call that ended) and the close callback only wakes it.
A watch holds one of the server's worker threads while it lasts: at most `watches_max` run
at once, and the next one is refused (RESOURCE_EXHAUSTED) rather than starve the server.

`watch_own_port` is the check a load balancer would make, made by the process itself: a
`Health/Check` on its own port every PROBE_INTERVAL_S. A server that does not answer its
own port PROBE_FAILURES_MAX times in a row is wedged (a deadlock in a library, a worker
pool that no call leaves): the process says so and exits with EXIT_WEDGED, so its port
refuses connections, its ZooKeeper session goes (it leaves the registry) and its
supervisor starts it again."""

from __future__ import annotations

import logging
import os
import tempfile
import threading
from collections.abc import Callable, Iterator

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from runtime import loops
from runtime.refusals import Refusal

log = logging.getLogger("midtown.health")
HEALTH_INTERVAL_S = 1.0
SERVICE_NAME = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
SERVICE_UNKNOWN = health_pb2.HealthCheckResponse.SERVICE_UNKNOWN
# A watch wakes at least this often to see whether its call is still active (a call that
# ended wakes it at once through its callback; this is the bound if that is missed).
WATCH_POLL_S = 1.0
# Watches served at once, per gRPC server, as a share of its worker threads: a load
# balancer keeps one per server; the rest of the threads are the server's own calls.
WATCH_SHARE = 8  # at most threads // WATCH_SHARE watches, and at least WATCHES_MIN
WATCHES_MIN = 2


class Health(health_pb2_grpc.HealthServicer):
    """grpc.health.v1.Health: Check and Watch over a table of statuses that `set` changes."""

    def __init__(self, watches_max: int) -> None:
        assert watches_max >= 1
        self.watches_max = watches_max
        self._cond = threading.Condition()
        self._status: dict[str, int] = {}
        self._version = 0  # bumped by every change: a watch sends what changed since its last
        self._watches = 0

    def set(self, service: str, status: int) -> None:
        with self._cond:
            if self._status.get(service) != status:
                self._status[service] = status
                self._version += 1
                self._cond.notify_all()

    def status(self, service: str) -> int | None:
        with self._cond:
            return self._status.get(service)

    def Check(self, request: health_pb2.HealthCheckRequest,
              context: grpc.ServicerContext) -> health_pb2.HealthCheckResponse:
        status = self.status(request.service)
        if status is None:
            Refusal(grpc.StatusCode.NOT_FOUND, f"{request.service!r} is not served here",
                    field="service").abort(context)
        return health_pb2.HealthCheckResponse(status=status)

    def Watch(self, request: health_pb2.HealthCheckRequest,
              context: grpc.ServicerContext) -> Iterator[health_pb2.HealthCheckResponse]:
        with self._cond:
            if self._watches >= self.watches_max:
                full = True
            else:
                full = False
                self._watches += 1
        if full:
            Refusal(grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"Health/Watch: {self.watches_max} watches are open here already; "
                    "retry later, or use Health/Check").abort(context)
        return self._watch(request.service, context)

    def _watch(self, service: str, context: grpc.ServicerContext) -> Iterator[health_pb2.HealthCheckResponse]:
        ended = threading.Event()

        def on_end() -> None:  # on gRPC's serving thread: takes the condition's lock only to wake
            ended.set()
            with self._cond:
                self._cond.notify_all()

        try:
            context.add_callback(on_end)
            sent: int | None = None
            while not ended.is_set() and context.is_active():
                with self._cond:
                    status = self._status.get(service, SERVICE_UNKNOWN)
                    if status == sent:
                        self._cond.wait(WATCH_POLL_S)
                        continue
                yield health_pb2.HealthCheckResponse(status=status)  # the lock is not held
                sent = status
        finally:
            with self._cond:
                self._watches -= 1


def serve_health(server: grpc.Server, services: list[str], check: Callable[[], bool],
                 stop: threading.Event, threads: int) -> Health:
    """Add the health and reflection services to `server` (of `threads` workers; reflection
    lists `services` too); the overall status ("") and each service's follow `check`,
    NOT_SERVING until the first check passes."""
    h = Health(max(WATCHES_MIN, threads // WATCH_SHARE))
    health_pb2_grpc.add_HealthServicer_to_server(h, server)
    reflection.enable_server_reflection([*services, SERVICE_NAME, reflection.SERVICE_NAME], server)
    names = ["", *services]
    for n in names:
        h.set(n, NOT_SERVING)
    last: list[bool | None] = [None]

    def update() -> None:
        try:
            ok = bool(check())
        except Exception as e:  # a check that cannot tell says not serving
            log.debug("health check: %s", e)
            ok = False
        for n in names:
            h.set(n, SERVING if ok else NOT_SERVING)
        if ok != last[0]:
            log.info("health: %s", "SERVING" if ok else "NOT_SERVING")
            last[0] = ok

    loops.every("health", HEALTH_INTERVAL_S, update, stop, first_at_once=True)
    return h


# The self-probe: a Health/Check on the server's own port this often, each given
# PROBE_TIMEOUT_S; PROBE_FAILURES_MAX unanswered in a row (about 9 s) mean the server is
# wedged. A busy server answers a Check from its worker pool within a second; the bound
# is loose enough for a machine under load, and short against a deadlock that lasts forever.
PROBE_INTERVAL_S = 1.0
PROBE_TIMEOUT_S = 2.0
PROBE_FAILURES_MAX = 3


class Unanswered:
    """Counts a port's unanswered checks in a row (pure): `checked(answered)` says whether
    the server is now judged wedged."""

    def __init__(self, failures_max: int = PROBE_FAILURES_MAX) -> None:
        assert failures_max >= 1
        self.failures_max = failures_max
        self.in_a_row = 0

    def checked(self, answered: bool) -> bool:
        self.in_a_row = 0 if answered else self.in_a_row + 1
        return self.in_a_row >= self.failures_max


def answers(channel: grpc.Channel, timeout_s: float) -> bool:
    """Whether a server answers a Health/Check on `channel` within `timeout_s`: any status
    it sends counts (NOT_SERVING and refusals are answers); only silence does not."""
    stub = health_pb2_grpc.HealthStub(channel)
    try:
        stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=timeout_s)
    except grpc.RpcError as e:
        return e.code() not in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE)
    return True


def probe_directory() -> str:
    """A new directory (mode 0700: this process's user's alone) for the probes' sockets, on
    a short path: a Unix socket's path has at most 107 bytes, and TMPDIR can be long."""
    base = tempfile.gettempdir()
    return tempfile.mkdtemp(prefix="mt-probe-", dir=base if len(base) <= SHORT_PATH else "/tmp")


SHORT_PATH = 60


def own_port(server: grpc.Server, directory: str, name: str) -> str | None:
    """Bind `server` (not started yet) to a Unix socket of its own in `directory` (which
    only this process's user may enter) and return the address: the self-probe's way in.
    It reaches the same serving thread and worker pool as the server's TCP ports, without
    their TLS (a probe needs no certificate), and no other machine can reach it. None (and
    a line logged) if it cannot be bound: the server runs unprobed."""
    addr = f"unix:{os.path.join(directory, name)}.s"
    try:
        bound = server.add_insecure_port(addr)
    except RuntimeError:
        bound = 0
    if bound == 0:
        log.warning("cannot listen on %s: this server's own port is not checked", addr)
        return None
    return addr


def watch_own_port(name: str, addr: str, stop: threading.Event, wedged: Callable[[str], None]) -> None:
    """Check `addr` (this process's own port, own_port) every PROBE_INTERVAL_S until `stop`;
    once it is judged wedged, call `wedged` with why (the process exits there)."""
    judge = Unanswered()
    channel = grpc.insecure_channel(addr)

    def probe() -> None:
        ok = answers(channel, PROBE_TIMEOUT_S)
        if not ok and not stop.is_set():
            log.warning("%s: its own port did not answer a health check within %gs (%d in a row)",
                        name, PROBE_TIMEOUT_S, judge.in_a_row + 1)
        if judge.checked(ok or stop.is_set()):
            wedged(f"{name}: its gRPC server answered no health check for {judge.in_a_row} checks "
                   f"of {PROBE_TIMEOUT_S:g}s in a row (wedged); exiting so that the supervisor "
                   "starts it again")

    loops.every(f"probe {name}", PROBE_INTERVAL_S, probe, stop)
