"""An ephemeral ZooKeeper node that stays there as long as the process lives.

An ephemeral node goes with the session that made it. A process paused past its session
timeout (SIGSTOP, a long GC, a swapped-out VM) finds, when it resumes, that kazoo has
opened a new session and its node is gone: without this it would run on unseen by
discovery. `Membership` creates the node, and every time the client (re)connects checks it
and creates it again, retrying with backoff until it holds or the process stops."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.protocol.states import KazooState

from runtime.loops import Backoff

log = logging.getLogger("midtown.membership")

# The node is also checked this often, in case a reconnection went unseen.
CHECK_S = 10.0


class Membership:
    def __init__(self, zk: KazooClient, path: str, data: Callable[[], bytes]) -> None:
        self.zk = zk
        self.path = path
        self.data = data
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.registrations = 0  # times the node was created (1 + one per lost session)

    def start(self) -> None:
        """Create the node now (raising if ZooKeeper refuses), then keep it."""
        self._ensure()
        self.zk.add_listener(self._on_state)
        self._thread = threading.Thread(target=self._keep, name=f"membership {self.path}",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        try:
            self.zk.remove_listener(self._on_state)
        except Exception:
            pass

    def _on_state(self, state: str) -> None:
        # Called on kazoo's own thread: never block here.
        if state == KazooState.CONNECTED:
            self._wake.set()

    def _keep(self) -> None:
        backoff = Backoff()
        while not self._stop.is_set():
            self._wake.wait(CHECK_S)  # a reconnection wakes it at once
            self._wake.clear()
            while not self._stop.is_set():
                try:
                    self._ensure()
                    backoff.succeeded()
                    break
                except Exception as e:
                    wait = backoff.failed()
                    log.warning("registering %s: %s; retrying in %.1f s", self.path, e, wait)
                    self._stop.wait(wait)

    def _ensure(self) -> None:
        """Create the node if it is missing, or replace one our previous session left."""
        try:
            data, stat = self.zk.get(self.path)
            if stat.ephemeralOwner == self.zk.client_id[0]:
                return  # ours, in this session
            self.zk.delete(self.path, version=stat.version)  # a previous session's: replace it
        except NoNodeError:
            pass
        try:
            self.zk.create(self.path, self.data(), ephemeral=True, makepath=True)
        except NodeExistsError:
            # Another session created it since: it is ours from before, or a second process
            # claims this id. The next CONNECTED (or the next check) sorts it out.
            raise
        self.registrations += 1
        if self.registrations > 1:
            log.info("registered %s again (the ZooKeeper session was lost)", self.path)
