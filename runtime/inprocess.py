"""Components sharing one process find each other here, by the address each advertises,
and call each other directly instead of through gRPC.

`midtown.cluster.host` runs a log server, a storage node and a coordinator in one process (one
per machine). Every component still registers its gRPC address in ZooKeeper and serves
it, so the others in the cluster see no difference; only calls between two components
of the same process skip the network: a coordinator's append to a log this process
writes, a storage node tailing that log, its answers to this coordinator, and the
ReadIndex question to this log server and this storage node. In the one-component-per-
process layout the directory is empty and every call goes through gRPC."""

from __future__ import annotations

import threading
from typing import Any

from prometheus_client import Counter

CALLS = Counter("midtown_in_process_calls_total",
                "Calls between components of one process that skipped gRPC, by path",
                ["path"])
_lock = threading.Lock()
_by_addr: dict[str, Any] = {}


def register(addr: str, component: Any) -> None:
    with _lock:
        _by_addr[addr] = component


def lookup(addr: str | None, kind: type | None = None) -> Any:
    """The component of this process at `addr` (of class `kind`, if given), or None."""
    if not addr:
        return None
    c = _by_addr.get(addr)
    if c is None or (kind is not None and not isinstance(c, kind)):
        return None
    return c


def used(path: str) -> None:
    """Count a call that went straight to a component of this process."""
    CALLS.labels(path=path).inc()
