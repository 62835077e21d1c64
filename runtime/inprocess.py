"""Ports to the components that share this process, injected where the process is wired.

`coordinator.host` runs a log server, a storage node and a coordinator in one process (one
per machine). Every component still registers its gRPC address in ZooKeeper and serves
it, so the others in the cluster see no difference; only calls between two components
of the same process skip the network: a coordinator's append to a log this process
writes (log/local.py), a storage node tailing that log, its answers to this coordinator,
and the ReadIndex question and reads to this log server and this storage node.

A `Local` holds the component of this process and the addresses it answers on, bound once
the component is built: the in-process backends of the network ports look their
component up through it (log/local.py, coordinator/storage_link.py,
storage_node/callbacks.py), and a call to any other address goes through gRPC. In the
one-component-per-process layout nothing is bound."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Generic, TypeVar

from prometheus_client import Counter

CALLS = Counter("midtown_in_process_calls_total",
                "Calls between components of one process that skipped gRPC, by path",
                ["path"])

T = TypeVar("T")


class Local(Generic[T]):
    """One component of this process, reached by its addresses without gRPC. Bound once
    the component is built (a component built earlier may hold the port already)."""

    def __init__(self) -> None:
        self._addrs: frozenset[str] = frozenset()
        self._component: T | None = None
        self._lock = threading.Lock()

    def bind(self, addrs: Iterable[str], component: T) -> Local[T]:
        with self._lock:
            self._addrs, self._component = frozenset(addrs), component
        return self

    @property
    def addrs(self) -> frozenset[str]:
        """The addresses it answers on (none while unbound)."""
        return self._addrs

    @property
    def component(self) -> T | None:
        """The component, whatever address (None while unbound)."""
        return self._component

    def at(self, addr: str | None) -> T | None:
        """The component if `addr` is one of its addresses, else None (call it by gRPC)."""
        c = self._component
        return c if c is not None and addr in self._addrs else None


def used(path: str) -> None:
    """Count a call that went straight to a component of this process."""
    CALLS.labels(path=path).inc()
