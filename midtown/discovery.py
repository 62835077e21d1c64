"""The coordinators registered in ZooKeeper, as the SDK finds them (a Client given zk=),
without ever holding a call past its deadline (issue 68).

kazoo's reads block with no timeout of their own: with ZooKeeper paused or without a
quorum, a put whose client looked its coordinators up inline waited 67 s (PITFALLS.md).
So no call reads ZooKeeper itself. A task of the client's own connects and reads, when a
call asks for the list and it is older than DISCOVERY_TTL_S (or after a call found a
coordinator unreachable); the call meanwhile goes on with the list it already has. Only a
call that has no list at all waits for the look-up, and only until its own deadline: then
it fails UNAVAILABLE, naming ZooKeeper. While ZooKeeper cannot answer, calls keep going to
the coordinators the client already knows, as far as those can serve them.

The same session serves the routes (midtown/routes.py), read by a task of their own."""

from __future__ import annotations

import logging
from typing import Any

from midtown import errors
from runtime import reach, world

DISCOVERY_TTL_S = 5.0  # a list older than this is looked up again (the call uses it meanwhile)
CLOSE_WAIT_S = 1.0  # how long closing the client waits for its ZooKeeper session to close

log = logging.getLogger("midtown.discovery")
# kazoo's own lines (a connection dropped, a reconnect) go here. Its NullHandler keeps them
# out of the output of a program that configured no logging (Python's last-resort handler
# would print each WARNING to stderr: a Spark task's, a benchmark's); a program that
# configures logging gets them as usual.
ZK_LOG = logging.getLogger("midtown.zookeeper")
ZK_LOG.addHandler(logging.NullHandler())


class Discovery:
    def __init__(self, hosts: str, known_down_s: float | None, dc: str = "") -> None:
        """`dc`: the client's data center: `near` is then the coordinators registered in it."""
        self.hosts = hosts
        self.known_down_s = known_down_s
        self.dc = dc
        self.near: frozenset[str] = frozenset()
        self._zk: Any = None
        self._connecting = world.lock()  # held while the session is made (background tasks only)
        self._cond = world.condition()
        self._found: tuple[float, list[str]] | None = None  # (when, the coordinators) of the last look-up
        self._error: str | None = None  # why the last look-up failed (None: it did not)
        self._done = 0  # look-ups ended (answered or failed)
        self._wanted = False
        self._stopped = False
        self._task: world.Task | None = None

    @property
    def has_session(self) -> bool:
        """Whether a ZooKeeper session was opened (closing it blocks)."""
        return self._zk is not None

    def close(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        zk, self._zk = self._zk, None  # a connect under way is ended by session() itself
        if zk is not None:
            _end(zk).join(CLOSE_WAIT_S)

    def known(self, refresh: bool = False) -> list[str] | None:
        """The coordinators found less than DISCOVERY_TTL_S ago, unless `refresh` (None:
        they must be looked up). No I/O."""
        f = self._found
        if refresh or f is None or not f[1] or world.monotonic() - f[0] > DISCOVERY_TTL_S:
            return None
        return f[1]

    def coordinators(self, wait_s: float, refresh: bool = False) -> list[str]:
        """The coordinators to use. A list older than DISCOVERY_TTL_S (or any, with
        `refresh`) is looked up again in the background while the last one is returned;
        with none yet, waits for the look-up at most `wait_s`, then Unavailable."""
        until = world.monotonic() + max(0.0, wait_s)
        with self._cond:
            found = self.known(refresh)
            if found is not None:
                return found
            self._want()
            if self._found is not None and self._found[1]:
                return self._found[1]  # the last list, while the look-up runs
            seen = self._done
            while self._done == seen and not self._stopped:
                left = until - world.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            if self._found is not None and self._found[1] and self._done != seen:
                return self._found[1]
            if self._done == seen:
                raise errors.Unavailable(f"ZooKeeper at {self.hosts} did not answer within {wait_s:.3g}s "
                                         "(looking up the coordinators); retry")
            if self._error is not None:
                raise errors.Unavailable(self._error)
            raise errors.Unavailable("no coordinator is registered in ZooKeeper")

    def session(self) -> Any:
        """The ZooKeeper session, connected on first use (blocks: for the client's own
        background tasks, never a call's path). Unavailable if it cannot be made."""
        from fleet import connect as zkpaths  # ZooKeeper's client loads for a Client given zk= only
        with self._connecting:
            if self._stopped:
                raise errors.Unavailable("the client is closed")
            if self._zk is None:
                try:
                    zk = zkpaths.connect(self.hosts, refused_retry_s=self.known_down_s, logger=ZK_LOG)
                except reach.KnownDown as e:
                    raise errors.Unavailable(f"cannot reach ZooKeeper at {self.hosts} ({e})") from None
                except Exception:
                    raise errors.Unavailable(f"cannot reach ZooKeeper at {self.hosts} within "
                                             f"{zkpaths.CONNECT_TIMEOUT_S:g}s") from None
                if self._stopped:  # closed while it connected: nobody will use it
                    _end(zk)
                    raise errors.Unavailable("the client is closed")
                self._zk = zk
            return self._zk

    def _want(self) -> None:
        """Ask the task for a look-up (the condition's lock held)."""
        self._wanted = True
        self._cond.notify_all()
        if self._task is None:
            self._task = world.spawn("midtown discovery", self._keep)

    def _keep(self) -> None:
        while True:
            with self._cond:
                while not self._wanted and not self._stopped:
                    self._cond.wait()
                if self._stopped:
                    return
                self._wanted = False
            found, error = self._look_up()
            with self._cond:
                if found is not None:
                    self._found = (world.monotonic(), found)
                self._error = error
                self._done += 1
                self._cond.notify_all()

    def _look_up(self) -> tuple[list[str] | None, str | None]:
        from catalog import registry  # ZooKeeper's client loads for a Client given zk= only
        from runtime import membership
        try:
            entries = membership.children_json(self.session(), registry.COORDINATORS)
            found = sorted(e["addr"] for e in entries.values() if isinstance(e, dict) and "addr" in e)
            if self.dc:
                self.near = frozenset(e["addr"] for e in entries.values()
                                      if isinstance(e, dict) and "addr" in e and e.get("dc") == self.dc)
        except errors.Unavailable as e:
            return None, str(e)
        except Exception as e:  # the session is being re-established: the next look-up may do
            log.debug("coordinators not looked up: %s", e)
            return None, f"ZooKeeper at {self.hosts} did not answer ({type(e).__name__}); retry"
        return found, None if found else "no coordinator is registered in ZooKeeper"


def _end(zk: Any) -> world.Task:
    """Close a ZooKeeper session in the background: kazoo's stop waits up to 10 s for a
    ZooKeeper that does not answer, and a client's close waits CLOSE_WAIT_S at most (the
    session expires by itself if it must)."""
    def end() -> None:
        zk.stop()
        zk.close()
    return world.spawn("midtown discovery close", end)
