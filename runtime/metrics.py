"""Prometheus metrics over HTTP on every Midtown process (prometheus_client: the standard
exposition format). Each process registers its own metrics where they are counted; this
only serves them. docs/operations.md lists the names."""

from __future__ import annotations

from prometheus_client import start_http_server


def serve(port: int, host: str) -> None:
    """Serve this process's metrics at http://HOST:PORT/metrics (port 0: not at all)."""
    if port:
        start_http_server(port, addr=host)
