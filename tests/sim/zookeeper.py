"""A simulated ZooKeeper for the seeded simulation (issue 51): the subset of kazoo's client
Midtown calls (log/zk.py, catalog/, runtime/membership.py), run on the simulator's world
backend (tests/sim/scheduler.py), with what the real one does that the servers' protocols
lean on: versioned nodes and compare-and-set, ephemeral nodes tied to a session, sequence
nodes, one-shot watches and kazoo's DataWatch/ChildrenWatch recipes, sessions that a
partition suspends and that expire after their timeout (their ephemeral nodes deleted,
their watchers told), and a new session afterwards, as kazoo makes one.

`Ensemble` is the server's state; `Client` is one process's kazoo client. Faults:
`Ensemble.expire(client)`, `Ensemble.partition(client, seconds)`, and notices made late
(`Ensemble(late=Late(seed, max_s))`). Watch callbacks run in
order on one task per client, as kazoo runs them on its event thread."""

from __future__ import annotations

import itertools
import posixpath
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
    RuntimeInconsistency,
    SessionExpiredError,
)
from kazoo.protocol.states import EventType, KazooState, WatchedEvent, ZnodeStat

from runtime import world


@dataclass
class _Node:
    data: bytes
    version: int
    czxid: int
    mzxid: int
    owner: int  # the session of an ephemeral node, 0 otherwise
    children: set[str] = field(default_factory=set)
    cversion: int = 0
    seq: int = 0  # the next sequence number of a child


class Late:
    """Slow notices: kazoo's event thread runs each event up to `max_s` late (a ZooKeeper
    client starved, its process slow to run again after a SIGSTOP), so its process goes on
    with what it last heard: that its session holds, that it is the log's writer. The
    events after a late one wait too (they stay in order). Drawn from a generator of its
    own, so that the run's other draws stay."""

    def __init__(self, seed: int, max_s: float) -> None:
        self.rng = random.Random(seed * 7919 + 2)
        self.max_s = max_s

    def wait(self) -> None:
        world.sleep(self.max_s * self.rng.random())


class Ensemble:
    """The ZooKeeper servers' state, linearizable (one task runs at a time)."""

    def __init__(self, session_timeout_s: float = 4.0, late: Late | None = None) -> None:
        self.session_timeout_s = session_timeout_s
        self.late = late
        self.zxid = 0
        self.nodes: dict[str, _Node] = {"/": _Node(b"", 0, 0, 0, 0)}
        self.sessions: dict[int, Client] = {}
        self._session_ids = itertools.count(0x1000)
        self.data_watches: dict[str, list[tuple[Client, Callable[[WatchedEvent], None]]]] = {}
        self.child_watches: dict[str, list[tuple[Client, Callable[[WatchedEvent], None]]]] = {}
        self.expired = 0
        self.errors: list[str] = []  # watchers that raised (kazoo logs them): the simulation's findings
        self.held: list[tuple[str, str]] | None = None  # a multi's changes, told once it is applied whole

    def client(self) -> Client:
        return Client(self)

    # --- faults -------------------------------------------------------------------------

    def expire(self, c: Client) -> None:
        """The session of `c` expires now: its ephemeral nodes go, it is told (LOST), and it
        makes a new session (CONNECTED: at once, or when its partition heals), its recipes'
        watches set again."""
        if c.session is None:
            return
        self._end_session(c.session)
        c.session = None
        self.expired += 1
        c._state(KazooState.LOST)
        if c.started and world.monotonic() >= c.cut_until:
            c._connect()

    def partition(self, c: Client, seconds: float) -> None:
        """`c` cannot reach the ensemble for `seconds`: its calls fail (ConnectionLoss), it is
        told SUSPENDED; past the session timeout the session expires."""
        c.cut_until = max(c.cut_until, world.monotonic() + seconds)
        c._state(KazooState.SUSPENDED)

        def heal() -> None:
            if seconds >= self.session_timeout_s:
                world.sleep(self.session_timeout_s)
                self.expire(c)
            world.sleep(max(0.0, c.cut_until - world.monotonic()))
            if not c.started or world.monotonic() < c.cut_until:
                return  # stopped, or cut again for longer: that partition's task heals it
            if c.session is None:
                c._connect()
            else:
                c._state(KazooState.CONNECTED)
        world.spawn("zk-heal", heal)

    # --- the server's operations --------------------------------------------------------

    def _end_session(self, session: int) -> None:
        self.sessions.pop(session, None)
        for path in sorted((p for p, n in self.nodes.items() if n.owner == session), reverse=True):
            self._delete(path)
        for table in (self.data_watches, self.child_watches):
            for path in list(table):
                table[path] = [(c, f) for c, f in table[path] if c.session != session]

    def _fire(self, table: dict[str, list[tuple[Client, Callable[[WatchedEvent], None]]]],
              path: str, kind: str) -> None:
        for c, fn in table.pop(path, []):
            c._deliver(fn, WatchedEvent(kind, KazooState.CONNECTED, path))

    def _changed(self, path: str, kind: str) -> None:
        if self.held is not None:
            self.held.append((path, kind))
            return
        self._fire(self.data_watches, path, kind)
        if kind in (EventType.CREATED, EventType.DELETED):
            if kind == EventType.DELETED:
                self._fire(self.child_watches, path, EventType.DELETED)
            self._fire(self.child_watches, posixpath.dirname(path) or "/", EventType.CHILD)

    def _stat(self, n: _Node) -> ZnodeStat:
        return ZnodeStat(n.czxid, n.mzxid, 0, 0, n.version, n.cversion, 0, n.owner,
                         len(n.data), len(n.children), n.mzxid)

    def _create(self, session: int, path: str, value: bytes, ephemeral: bool, sequence: bool,
                makepath: bool) -> str:
        parent = posixpath.dirname(path) or "/"
        if parent not in self.nodes:
            if not makepath:
                raise NoNodeError(parent)
            self._create(session, parent, b"", False, False, True)
        pn = self.nodes[parent]
        if pn.owner:
            raise NoNodeError(f"{parent} is ephemeral: no children")  # NoChildrenForEphemerals
        if sequence:
            path = f"{path}{pn.seq:010d}"
            pn.seq += 1
        if path in self.nodes:
            raise NodeExistsError(path)
        self.zxid += 1
        self.nodes[path] = _Node(value, 0, self.zxid, self.zxid, session if ephemeral else 0)
        pn.children.add(posixpath.basename(path))
        pn.cversion += 1
        self._changed(path, EventType.CREATED)
        return path

    def _delete(self, path: str) -> None:
        self.zxid += 1
        del self.nodes[path]
        parent = self.nodes[posixpath.dirname(path) or "/"]
        parent.children.discard(posixpath.basename(path))
        parent.cversion += 1
        self._changed(path, EventType.DELETED)

    def _node(self, path: str) -> _Node:
        n = self.nodes.get(path)
        if n is None:
            raise NoNodeError(path)
        return n

    def _check_version(self, n: _Node, path: str, version: int) -> None:
        if version != -1 and n.version != version:
            raise BadVersionError(f"{path}: version {n.version}, not {version}")

    def _set(self, path: str, value: bytes, version: int) -> ZnodeStat:
        n = self._node(path)
        self._check_version(n, path, version)
        self.zxid += 1
        n.data, n.version, n.mzxid = value, n.version + 1, self.zxid
        self._changed(path, EventType.CHANGED)
        return self._stat(n)

    def _remove(self, path: str, version: int, recursive: bool) -> None:
        n = self._node(path)
        self._check_version(n, path, version)
        if n.children:
            if not recursive:
                raise NotEmptyError(path)
            for c in sorted(n.children):
                self._remove(posixpath.join(path, c), -1, True)
        self._delete(path)


class _Async:
    def __init__(self, f: Any) -> None:
        self.f = f

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        return self.f.result(timeout)


class Client:
    """One process's kazoo client on the simulated ensemble (the methods Midtown calls)."""

    def __init__(self, ens: Ensemble) -> None:
        self.ens = ens
        self.session: int | None = None
        self.started = False
        self.state = KazooState.LOST
        self.cut_until = 0.0
        self.listeners: list[Callable[[str], Any]] = []
        self.recipes: list[Callable[[], None]] = []  # DataWatch/ChildrenWatch: set again on a new session
        self.events: Any = None

    # --- the session --------------------------------------------------------------------

    @property
    def client_id(self) -> tuple[int, bytes] | None:
        return None if self.session is None else (self.session, b"")

    @property
    def connected(self) -> bool:
        return self.state == KazooState.CONNECTED

    def start(self, timeout: float = 15) -> None:
        if self.events is None:
            self.events = world.queue()
            world.spawn("zk-events", self._event_loop)
        self.started = True
        self._connect()

    def _connect(self) -> None:
        self.session = next(self.ens._session_ids)
        self.ens.sessions[self.session] = self
        self._state(KazooState.CONNECTED)
        for again in list(self.recipes):
            again()

    def stop(self) -> None:
        self.started = False
        if self.session is not None:
            self.ens._end_session(self.session)
            self.session = None
        self._state(KazooState.LOST)
        if self.events is not None:
            self.events.put(None)
            self.events = None

    def close(self) -> None:
        pass

    def add_listener(self, fn: Callable[[str], Any]) -> None:
        self.listeners.append(fn)

    def remove_listener(self, fn: Callable[[str], Any]) -> None:
        if fn in self.listeners:
            self.listeners.remove(fn)

    def _state(self, state: str) -> None:
        if state == self.state:
            return
        self.state = state
        # kazoo calls them on its connection thread, in the client's process: one stopped
        # (SIGSTOP) hears of its session's troubles only once it runs again
        for fn in list(self.listeners):
            if self.events is not None:
                self.events.put((fn, (state,)))
            else:
                fn(state)

    def _deliver(self, fn: Callable[..., Any], *args: Any) -> None:
        if self.events is not None:
            self.events.put((fn, args))

    def _event_loop(self) -> None:
        q = self.events
        while (item := q.get()) is not None:
            fn, args = item
            if self.ens.late is not None:
                self.ens.late.wait()
            try:
                fn(*args)
            except Exception as e:  # noqa: BLE001 - kazoo logs a watcher's error and goes on
                self.ens.errors.append(f"watcher {fn}: {type(e).__name__}: {e}")

    def _session(self) -> int:
        if self.session is None or not self.started:
            raise SessionExpiredError("no session")
        if world.monotonic() < self.cut_until:
            raise ConnectionLoss("partitioned from the ensemble")
        return self.session

    # --- operations ---------------------------------------------------------------------

    def create(self, path: str, value: bytes = b"", acl: Any = None, ephemeral: bool = False,
               sequence: bool = False, makepath: bool = False) -> str:
        return self.ens._create(self._session(), path, value, ephemeral, sequence, makepath)

    def ensure_path(self, path: str, acl: Any = None) -> bool:
        self._session()
        if path not in self.ens.nodes:
            self.ens._create(0, path, b"", False, False, True)
        return True

    def get(self, path: str, watch: Callable[[WatchedEvent], None] | None = None) -> tuple[bytes, ZnodeStat]:
        self._session()
        n = self.ens._node(path)
        if watch is not None:
            self.ens.data_watches.setdefault(path, []).append((self, watch))
        return n.data, self.ens._stat(n)

    def get_async(self, path: str) -> _Async:
        f = world.future()
        try:
            f.set_result(self.get(path))
        except Exception as e:  # noqa: BLE001 - handed to whoever waits, as kazoo does
            f.set_exception(e)
        return _Async(f)

    def exists(self, path: str, watch: Callable[[WatchedEvent], None] | None = None) -> ZnodeStat | None:
        self._session()
        if watch is not None:
            self.ens.data_watches.setdefault(path, []).append((self, watch))
        n = self.ens.nodes.get(path)
        return None if n is None else self.ens._stat(n)

    def get_children(self, path: str, watch: Callable[[WatchedEvent], None] | None = None,
                     include_data: bool = False) -> Any:
        self._session()
        n = self.ens._node(path)
        if watch is not None:
            self.ens.child_watches.setdefault(path, []).append((self, watch))
        kids = sorted(n.children)
        return (kids, self.ens._stat(n)) if include_data else kids

    def set(self, path: str, value: bytes, version: int = -1) -> ZnodeStat:
        self._session()
        return self.ens._set(path, value, version)

    def delete(self, path: str, version: int = -1, recursive: bool = False) -> bool:
        self._session()
        self.ens._remove(path, version, recursive)
        return True

    def sync(self, path: str) -> str:
        self._session()  # one linearizable ensemble: every read is already in sync
        return path

    def sync_async(self, path: str) -> _Async:
        f = world.future()
        f.set_result(path)
        return _Async(f)

    def transaction(self) -> _Transaction:
        return _Transaction(self)

    # --- kazoo's recipes ----------------------------------------------------------------

    def DataWatch(self, path: str, func: Callable[..., Any]) -> None:  # noqa: N802 - kazoo's name
        """func(data, stat) now and after each change of `path` (None, None while it does not
        exist), until it returns False."""
        w = _Recipe(self, path, func, children=False)
        self.recipes.append(w.again)
        w.again()

    def ChildrenWatch(self, path: str, func: Callable[[list[str]], Any]) -> None:  # noqa: N802
        w = _Recipe(self, path, func, children=True)
        self.recipes.append(w.again)
        w.again()


class _Recipe:
    def __init__(self, c: Client, path: str, func: Callable[..., Any], children: bool) -> None:
        self.c, self.path, self.func, self.children = c, path, func, children
        self.stopped = False
        self.last: Any = object()

    def again(self, _event: WatchedEvent | None = None) -> None:
        if self.stopped or self.c.session is None:
            return
        ens, path = self.c.ens, self.path
        table = ens.child_watches if self.children else ens.data_watches
        if not any(f == self.again for _, f in table.get(path, [])):
            table.setdefault(path, []).append((self.c, self.again))
            if self.children and path not in ens.nodes:  # kazoo waits for it to exist
                ens.data_watches.setdefault(path, []).append((self.c, self.again))
        n = ens.nodes.get(path)
        if self.children:
            if n is None:
                return
            value: Any = sorted(n.children)
            args: tuple[Any, ...] = (value,)
        else:
            value = None if n is None else (n.data, n.mzxid)
            args = (None, None) if n is None else (n.data, ens._stat(n))
        if value == self.last:
            return
        self.last = value
        self.c._deliver(self._call, *args)

    def _call(self, *args: Any) -> None:
        if not self.stopped and self.func(*args) is False:
            self.stopped = True
            self.c.recipes.remove(self.again)


class _Transaction:
    """kazoo's transaction: checks and writes applied together or not at all."""

    def __init__(self, c: Client) -> None:
        self.c = c
        self.ops: list[tuple[str, tuple[Any, ...]]] = []

    def create(self, path: str, value: bytes = b"", ephemeral: bool = False, sequence: bool = False) -> None:
        self.ops.append(("create", (path, value, ephemeral, sequence)))

    def set_data(self, path: str, value: bytes, version: int = -1) -> None:
        self.ops.append(("set", (path, value, version)))

    def delete(self, path: str, version: int = -1) -> None:
        self.ops.append(("delete", (path, version)))

    def check(self, path: str, version: int) -> None:
        self.ops.append(("check", (path, version)))

    def commit(self) -> list[Any]:
        session = self.c._session()
        ens = self.c.ens
        # All checked first, in order, each on what the ops before it did (a node deleted
        # and created again in one multi, as a writer taken over is): nothing applied if one
        # would fail.
        there = {p: n.version for p, n in ens.nodes.items()}
        for i, (kind, a) in enumerate(self.ops):
            if kind == "create":
                if a[0] in there and not a[3]:
                    return self._failed(i, NodeExistsError(a[0]))
                there[a[0]] = 0
                continue
            if a[0] not in there:
                return self._failed(i, NoNodeError(a[0]))
            if a[-1] != -1 and there[a[0]] != a[-1]:
                return self._failed(i, BadVersionError(a[0]))
            if kind == "delete":
                del there[a[0]]
            elif kind == "set":
                there[a[0]] += 1
        # Applied whole before any watcher is told: telling one hands an event to its
        # client's queue, which may let another task run, and that task must not see half
        # of the multi (two movers once interleaved so, each one's history entry written)
        out: list[Any] = []
        ens.held = []
        try:
            for kind, a in self.ops:
                if kind == "create":
                    out.append(ens._create(session, a[0], a[1], a[2], a[3], False))
                elif kind == "set":
                    out.append(ens._set(*a))
                elif kind == "delete":
                    ens._remove(a[0], a[1], False)
                    out.append(True)
                else:
                    out.append(True)
        finally:
            held, ens.held = ens.held, None
        for path, change in held:
            ens._changed(path, change)
        return out

    def _failed(self, at: int, e: Exception) -> list[Any]:
        """As ZooKeeper answers a multi that failed at op `at`: the ops before it rolled back
        (RolledBackError), its own error, and RuntimeInconsistency for those after."""
        return [RolledBackError() if i < at else e if i == at else RuntimeInconsistency()
                for i in range(len(self.ops))]


def on_a_client(body: Callable[[Any], Any]) -> Any:
    """`body(zk)` with a started client of a fresh simulated ensemble, in a scheduler of
    its own (the catalog's real code on it: tests/test_log_map.py, tests/test_scopes.py);
    what it returns, once nothing failed."""
    from tests.sim.scheduler import Scheduler

    s = Scheduler(1)
    ens = Ensemble()

    def main() -> Any:
        zk = ens.client()
        zk.start()
        return body(zk)
    out = s.run(main)
    assert s.failures == [] and ens.errors == []
    return out
