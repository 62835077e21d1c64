"""Sending each key's writes to the coordinator beside its log's writer (issue 12's
lever 3, for the host layout; and its strong reads, which the writer answers by its read
lease: routed()).

In the host layout (coordinator/host.py) a machine runs a log server, a storage node
and a coordinator in one process, and the coordinator registers which log server it sits
beside. A key's shard travels in one log (catalog/routing.py); the coordinator beside that
log's writer appends with a function call and hears its own storage node's answer
in-process, so an operation sent there crosses the network once each way to its client
and once to the other log replicas. TiKV's client does the same with the region leader
it learns from PD.

A route is only a preference: every coordinator serves every key, so a stale route (a
writer that moved, a dataset dropped and made again) costs a hop, never correctness.
Routes are read from ZooKeeper by a thread of their own, every ROUTES_TTL_S and at once
when a dataset is first asked for; asking costs the caller no I/O (an unknown dataset has
no route until the thread has looked it up). A coordinator a call could not reach is
avoided for AVOID_S. Where no coordinator sits beside a log server (the split layout,
the default) nothing is routed and clients pick a coordinator at random, as before."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from catalog.routing import shard_in
from runtime import world

# The operations routed: those that append a record, and strong gets (routed()).
ROUTED_METHODS = frozenset({"Put", "Delete", "CheckAndSet", "Increment", "Batch"})
_STRONG = 0  # kv.proto: Consistency.STRONG


def routed(method: str, req: Any) -> bool:
    """Whether a single-key call goes to the coordinator beside its log's writer: a write,
    or a strong get. The coordinator there answers a strong get by the writer's read lease
    (log/lease.py), with no call to another process but the client's; any other one needs a
    ReadIndex round to the log's replicas first. (Before the lease, strong gets went to any
    coordinator: routed, every client's reads landed on one process for no gain.)"""
    return method in ROUTED_METHODS or (method == "Get" and getattr(req, "consistency", None) == _STRONG)


ROUTES_TTL_S = 2.0  # how often routes are read again
AVOID_S = 5.0  # a coordinator a call could not reach gets no routed call for this long

log = logging.getLogger("midtown.routes")


class Table(NamedTuple):
    shards: int
    log_of: tuple[int, ...]  # each shard's log (catalog/log_map.py)
    # name -> (id (name#incarnation), first shard, shard count: 0 for all): a shard depends on
    # them (catalog/scopes.py: a dataset's keys hash over its scope's shards)
    dataset_ids: dict[str, tuple[str, int, int]]
    beside: dict[int, str]  # log -> the coordinator beside its writer


EMPTY = Table(1, (0,), {}, {})


def beside_writers(writers: dict[int, str], coordinators: Iterable[Any]) -> dict[int, str]:
    """log -> the address of the coordinator registered beside its writer's log server,
    from each log's writer address and the coordinators' registry entries (pure)."""
    by_log_server = {c["log"]: c["addr"] for c in coordinators if isinstance(c, dict)
                     and isinstance(c.get("log"), str) and isinstance(c.get("addr"), str)}
    return {i: by_log_server[w] for i, w in writers.items() if w in by_log_server}


def route(t: Table, dataset: str, partition_key: bytes) -> str | None:
    """The coordinator beside the writer of the log that `partition_key` of `dataset`
    travels in, or None (pure)."""
    if not t.beside:
        return None
    d = t.dataset_ids.get(dataset)
    if d is None:
        return None
    dataset_id, first, count = d
    return t.beside.get(t.log_of[shard_in(dataset_id, partition_key, first, count or t.shards)])


def read_table(zk: Any, names: Iterable[str]) -> Table:
    """The routes as ZooKeeper has them now, for the datasets `names` (the I/O shell; the
    catalog's readers, and kazoo with them, load only for a Client given zk=)."""
    from catalog import datasets, registry
    from log import zk as log_zk
    from runtime import membership
    kv, topology = registry.read_kv(zk), log_zk.read_topology(zk)
    if kv is None or topology is None:
        return EMPTY
    m = registry.read_log_map(zk, kv, topology.logs)
    coordinators = membership.children_json(zk, registry.COORDINATORS).values()
    if not any(isinstance(c, dict) and c.get("log") for c in coordinators):
        return Table(kv.shards, m.of, {}, {})  # nothing beside a log server: no reads more
    writers = {}
    for i in range(m.logs):
        w = log_zk.read_writer(zk, i)
        if w is not None and isinstance(w.get("addr"), str):
            writers[i] = w["addr"]
    ids = {}
    for name in names:
        d = datasets.get(zk, name)
        if d is not None:
            ids[name] = (d.id, d.shard_first, d.shard_count)
    return Table(kv.shards, m.of, ids, beside_writers(writers, coordinators))


class Routes:
    def __init__(self, zk: Callable[[], Any]) -> None:
        """`zk()`: the client's ZooKeeper session (connected on first use)."""
        self._zk = zk
        self._table = EMPTY
        self._names: set[str] = set()  # datasets asked for
        self._avoid: dict[str, float] = {}  # coordinator -> until (world.monotonic())
        self._wake = world.event()
        self._stop = world.event()
        self._thread: world.Task | None = None
        self._lock = world.lock()
        self.reads = 0  # tables read (for tests)

    def coordinator_for(self, dataset: str, partition_key: bytes) -> str | None:
        """Where to send an operation on this key first, or None (any coordinator)."""
        t = self._table
        if dataset not in self._names:
            with self._lock:
                self._names.add(dataset)
            self._wake.set()
        if self._thread is None:
            self._start()
        addr = route(t, dataset, partition_key)
        if addr is not None and addr in self._avoid:
            if self._avoid[addr] > world.monotonic():
                return None
            self._avoid.pop(addr, None)
        return addr

    def failed(self, addr: str) -> None:
        """A call to `addr` did not reach it: no routed calls there for a while, and the
        routes are read again at once."""
        self._avoid[addr] = world.monotonic() + AVOID_S
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def _start(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = world.spawn("midtown routes", self._keep)

    def _keep(self) -> None:
        from log import zk as log_zk  # kazoo loads for a Client given zk= only
        watched: set[int] = set()  # logs whose writer node is watched
        while not self._stop.is_set():
            self._wake.clear()
            try:
                with self._lock:
                    names = sorted(self._names)
                zk = self._zk()
                t = read_table(zk, names)
                if t.beside != self._table.beside:
                    log.debug("routes: log -> coordinator %s", t.beside)
                self._table = t
                self.reads += 1
                # A writer that changes (a takeover) is read at once, not at the next
                # ROUTES_TTL_S: until then, writes went to the coordinator beside the old
                # writer (a machine gone quiet: each waited out its deadline there).
                for i in sorted(set(t.log_of) - watched):
                    zk.DataWatch(log_zk.writer_path(i), self._writer_changed)
                    watched.add(i)
            except Exception as e:  # ZooKeeper away: keep the last routes, try again later
                log.debug("routes not read: %s", e)
            self._wake.wait(ROUTES_TTL_S)

    def _writer_changed(self, data: bytes | None, stat: Any) -> None:
        """A log's writer node changed (kazoo's thread: it must not block): read again."""
        self._wake.set()
