"""An ephemeral ZooKeeper node that stays there as long as the process lives.

An ephemeral node goes with the session that made it. A process paused past its session
timeout (SIGSTOP, a long GC, a swapped-out VM) finds, when it resumes, that kazoo has
opened a new session and its node is gone: without this it would run on unseen by
discovery. `Membership` creates the node, and every time the client (re)connects checks it
and creates it again, retrying with backoff until it holds or the process stops."""

from __future__ import annotations

import json
import logging
import os
import socket
from collections.abc import Callable, Mapping
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.protocol.states import KazooState

from runtime import children, world
from runtime.loops import Backoff
from runtime.process import StartRefused

log = logging.getLogger("midtown.membership")

# The node is also checked this often, in case a reconnection went unseen.
CHECK_S = 10.0


# The machine this process says it runs on (fleet/machines.py sets it from --machine):
# with the pid and its start time, which process holds a registration.
machine = socket.gethostname() or "localhost"
# How long a starting process waits for another process's node to go (a previous run of
# it, killed, whose session has not expired yet) before it says the id is taken.
TAKEN_WAIT_S = 12.0


class IdTaken(StartRefused):
    """Another live process is registered under this id."""


def instance() -> dict[str, Any]:
    """This process: its machine, pid and start time (runtime/children.py start_ticks)."""
    return {"machine": machine, "pid": os.getpid(), "started": children.start_ticks(os.getpid()) or 0}


def is_gone(other: Mapping[str, Any]) -> bool:
    """Whether the process `other` (an instance()) is known to have ended: it ran on this
    machine and its pid is not that process any more. One on another machine is not known
    to have ended until its ZooKeeper session expires."""
    if other.get("machine") != machine:
        return False
    return not children.is_recorded(int(other.get("pid", 0)), int(other.get("started", 0)))


class Membership:
    def __init__(self, zk: KazooClient, path: str, data: Callable[[], dict[str, Any]]) -> None:
        """`data()`: the node's JSON fields; the process's instance() is added to them."""
        self.zk = zk
        self.path = path
        self.me: dict[str, Any] = instance()
        self.data = lambda: json.dumps({**data(), "instance": self.me}).encode()
        self._stop = world.event()
        self._wake = world.event()
        self._task: world.Task | None = None
        self.registrations = 0  # times the node was created (1 + one per lost session)

    def start(self) -> None:
        """Create the node now (raising if ZooKeeper refuses, or IdTaken if another live
        process holds it still after TAKEN_WAIT_S), then keep it."""
        deadline = world.monotonic() + TAKEN_WAIT_S
        while True:
            try:
                self._ensure()
                break
            except IdTaken:
                if world.monotonic() > deadline:
                    raise
                world.sleep(0.25)
        self.zk.add_listener(self._on_state)
        self._task = world.spawn(f"membership {self.path}", self._keep)

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
            other = _instance_of(data)
            if other and other != self.me and not is_gone(other):
                raise IdTaken(f"{self.path} is held by another process: pid {other.get('pid')} on machine "
                              f"{other.get('machine')!r}; two processes cannot share an id")
            self.zk.delete(self.path, version=stat.version)  # ours from before, or a dead one's
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


def _instance_of(data: bytes) -> dict[str, Any]:
    try:
        got = json.loads(data).get("instance")
    except (ValueError, AttributeError):
        got = None
    return got if isinstance(got, dict) else {}


# Reading the members: the servers' registries (log/zk.py, catalog/registry.py) list theirs so.
def members(zk: KazooClient, parent: str) -> dict[int, str]:
    """The address of each member registered under `parent` (children_json's "addr")."""
    return {i: b["addr"] for i, b in children_json(zk, parent).items()}


def children_json(zk: KazooClient, parent: str) -> dict[int, Any]:
    """The JSON of each child of `parent` named by a number (node and coordinator ids);
    children gone meanwhile, or not numbers, or not JSON, are left out."""
    return {c: d for c, (d, _) in numbered_children(zk, parent).items()}


def numbered_children(zk: KazooClient, parent: str) -> dict[int, tuple[Any, int]]:
    """children_json, with each child's version."""
    out: dict[int, tuple[Any, int]] = {}
    try:
        names = zk.get_children(parent)
    except NoNodeError:
        return out
    for c in names:
        try:
            data, stat = zk.get(f"{parent}/{c}")
            out[int(c)] = (json.loads(data), stat.version)
        except (NoNodeError, ValueError):
            continue
    return out
