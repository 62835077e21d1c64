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
