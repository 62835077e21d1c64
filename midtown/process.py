"""What every Midtown server process does around its gRPC server: listen, say it is ready,
run until SIGTERM or SIGINT, then stop cleanly."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable

import grpc


def serve_until_signal(server: grpc.Server, listen: str, ready: str,
                       on_start: Callable[[], None], on_stop: Callable[[], None],
                       grace_s: float = 1.0) -> None:
    if server.add_insecure_port(listen) == 0:
        raise SystemExit(f"cannot listen on {listen}")
    server.start()
    on_start()
    print(ready, flush=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    while not done.wait(1):
        pass
    server.stop(grace_s)
    on_stop()


def tune_runtime() -> None:
    """Interpreter settings for a server process: the GIL switch interval, and a garbage
    collector that runs less often (each request allocates many short-lived objects, and
    every collection of the oldest generation pauses every thread), with the objects made
    at start-up moved out of its reach."""
    import gc
    import os
    import sys

    from log import limits

    sys.setswitchinterval(limits.SWITCH_INTERVAL_S)
    if os.environ.get("MIDTOWN_GC_TUNE", "1") != "0":
        gc.freeze()
        gc.set_threshold(50_000, 20, 100)
