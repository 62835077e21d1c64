"""gRPC health checking and server reflection on every Midtown server, so that grpcurl-style
tools and load balancers can use them (grpcio-health-checking, grpcio-reflection: the
standard services, PITFALLS.md says not to write our own).

The serving status tells the truth: each server gives a check (a function saying whether it
can do its job now) and the status is set from it every HEALTH_INTERVAL_S: a log server not
registered or without ZooKeeper, a storage node still catching up with its logs, a
coordinator without ZooKeeper are NOT_SERVING."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from runtime import loops

log = logging.getLogger("midtown.health")
HEALTH_INTERVAL_S = 1.0


def serve_health(server: grpc.Server, services: list[str], check: Callable[[], bool],
                 stop: threading.Event) -> health.HealthServicer:
    """Add the health and reflection services to `server` (reflection lists `services`
    too); the overall status ("") and each service's follow `check`, NOT_SERVING until the
    first check passes."""
    h = health.HealthServicer(experimental_non_blocking=True)
    health_pb2_grpc.add_HealthServicer_to_server(h, server)
    reflection.enable_server_reflection([*services, health.SERVICE_NAME, reflection.SERVICE_NAME], server)
    names = ["", *services]
    for n in names:
        h.set(n, health_pb2.HealthCheckResponse.NOT_SERVING)
    last: list[bool | None] = [None]

    def update() -> None:
        try:
            ok = bool(check())
        except Exception as e:  # a check that cannot tell says not serving
            log.debug("health check: %s", e)
            ok = False
        status = health_pb2.HealthCheckResponse.SERVING if ok else health_pb2.HealthCheckResponse.NOT_SERVING
        for n in names:
            h.set(n, status)
        if ok != last[0]:
            log.info("health: %s", "SERVING" if ok else "NOT_SERVING")
            last[0] = ok

    loops.every("health", HEALTH_INTERVAL_S, update, stop, first_at_once=True)
    return h
