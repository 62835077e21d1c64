"""Connecting to ZooKeeper, where the catalog lives: every server, the command line and
the SDK's discovery connect the same way."""

from __future__ import annotations

import logging
import random
import socket
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionDropped, OperationTimeoutError
from kazoo.handlers.threading import KazooTimeoutError, SequentialThreadingHandler
from kazoo.protocol.connection import ConnectionHandler
from kazoo.retry import KazooRetry

from runtime import reach, world

# How long a process waits for ZooKeeper when it connects (a server at start-up).
CONNECT_TIMEOUT_S = 15.0
# The session: a log writer that loses its session stops acknowledging; another server
# takes over once the session expires. ZooKeeper needs 2 ticks <= timeout <= 20 ticks.
ZK_SESSION_TIMEOUT_S = 4.0
# ZooKeeper's tick, for the servers Midtown starts (cluster/zookeeper.py): the unit
# of its members' patience with one another (SYNC_LIMIT_TICKS there).
ZK_TICK_MS = 250
# Moving a session to another member when its own went quiet (paused, cut off, or electing
# a leader: issue 68). kazoo tries the members in turn, each TCP connect waiting up to the
# whole session timeout (4 s against a member whose machine is cut off), and backs off
# between rounds from 0.1 s doubling to an hour: a ZooKeeper leader change left servers
# reconnecting for 4 s. A connect that has not succeeded in CONNECT_ATTEMPT_S fails (a
# member that answers does so in milliseconds), and rounds are at most RECONNECT_MAX_S
# apart.
CONNECT_ATTEMPT_S = 0.5
RECONNECT_FIRST_S = 0.05
RECONNECT_MAX_S = 0.5
# A request that has waited this long with nothing at all from its member since it was sent
# (no answer, no ping reply) moves the session to another member. A member that answers
# does so in milliseconds, and a slow write holds up a session's replies for tens; the read
# timeout (2/3 of the session, 2.7 s) held every server whose session was on a quiet
# machine's member for 2-3 s, and with them the coordinators' puts, the election's loop
# (which probes writers) and the replicas' epoch checks of a new writer (issue 68). A
# member dropped for nothing costs a reconnection and ConnectionLoss for what waited: at
# 0.5 s, a command's session was dropped once in a suite run on a loaded machine (most
# likely so), and the command failed. So commands and the SDK wait PATIENCE_S, servers
# SERVER_PATIENCE_S: a server retries what failed, and at 1 s, a new writer's recovery
# waited 0.75-1.1 s on its replicas' epoch checks whose sessions were on a paused member
# (issue 68). Sessions are on their own machine's member first (local_first), so only
# those of a machine without a member wait on another machine's.
PATIENCE_S = 1.0
SERVER_PATIENCE_S = 0.5
# How often the connection's loop looks at its waiting requests (PATIENCE_S).
PATIENCE_CHECK_S = 0.05
# An idle session asks its member something this often (an `exists` of the root), so that
# the patience above finds a member gone quiet while nothing else was asked of it: before a
# failover needs the session. Without it, a replica's epoch check of a new writer (issue
# 68, `make quiet-machines`) waited on a session idle on the quiet machine's member, which
# kazoo's ping found out only 1.9-2.7 s after; the recovery's fence took 0.52 s.
IDLE_ASK_S = 0.25
# A member left for its silence (PATIENCE_S), or that did not answer a connection attempt,
# is passed over this long while another member may answer.
SILENT_PASSED_OVER_S = 3.0


class _Handler(SequentialThreadingHandler):
    """kazoo's threading handler, with each TCP connect bounded by CONNECT_ATTEMPT_S, and
    the connection's loop woken every PATIENCE_CHECK_S while requests wait, to drop a
    member that is silent past PATIENCE_S (_Connection.check_patience)."""

    connection: _Connection | None = None

    def create_connection(self, *args: Any, **kwargs: Any) -> Any:
        timeout = kwargs.get("timeout")
        kwargs["timeout"] = CONNECT_ATTEMPT_S if timeout is None else min(timeout, CONNECT_ATTEMPT_S)
        return super().create_connection(*args, **kwargs)

    def select(self, rlist: Any, wlist: Any, xlist: Any, timeout: float | None = None) -> Any:
        conn = self.connection
        if conn is None or conn._read_sock not in rlist or timeout is None:
            return super().select(rlist, wlist, xlist, timeout)
        # The connection's own loop: wait as it asked, in slices, unless it must drop.
        end = world.monotonic() + timeout
        while True:
            conn.check_patience()
            left = end - world.monotonic()
            got = super().select(rlist, wlist, xlist, max(0.0, min(left, PATIENCE_CHECK_S)))
            if got[0] or got[1] or got[2] or left <= PATIENCE_CHECK_S:
                return got


class _Connection(ConnectionHandler):
    """kazoo's connection (2.11, pinned), which waits at most CONNECT_ATTEMPT_S for a
    member's answer to a connection's handshake, and drops a connection on which a request
    has waited PATIENCE_S with nothing from the member since it was sent (check_patience).

    kazoo drops a connection only when its own ping goes unanswered, and counts a request
    sent as a ping (its ping is sent only after a quiet half of the read timeout): a client
    that sends a request more often than that never notices a member that stopped
    answering. On a machine cut off, servers whose sessions were on its member went on
    sending reads, every one timing out, for 8-10 s, until their sessions had expired
    (issue 68). ZooKeeper's Java client drops the connection when it "has not heard from
    server" for the read timeout (2/3 of the session), whatever it sent; this drops it
    sooner, and only while something waits for an answer."""

    patience_s = PATIENCE_S  # (connect's)
    heard = 0.0  # when the server last sent something on this connection (world.monotonic)
    waiting_since = 0.0  # when a request was sent with none waiting before it
    member: tuple[str, int] | None = None  # the member this connection is to (or being made to)
    silent: dict[tuple[str, int], float] | None = None  # member -> passed over until then

    def _invoke(self, timeout: float, *args: Any, **kwargs: Any) -> Any:
        # The handshake of a connection (and its auth): kazoo waits session / members for
        # its answer (1.3 s with three), which a paused member never sends; one that
        # answers does so in milliseconds (a leaderless one closes the connection at once).
        return super()._invoke(min(timeout, CONNECT_ATTEMPT_S), *args, **kwargs)

    def _connect_attempt(self, host: str, hostip: str, port: int, retry: Any) -> Any:
        # A member that was silent lately is passed over while another may answer: kazoo
        # tries the members in turn, and one that is paused or cut off cost a connection
        # attempt (CONNECT_ATTEMPT_S) in every round, while ZooKeeper elected a leader.
        silent, now = self.silent or {}, world.monotonic()
        quiet = {m for m, until in silent.items() if until > now}
        if (host, port) in quiet and len(quiet) < len(self.client.hosts):
            return None
        return super()._connect_attempt(host, hostip, port, retry)

    def _connect(self, host: str, hostip: str, port: int) -> Any:
        self.member, t0 = (host, port), world.monotonic()
        try:
            got = super()._connect(host, hostip, port)
        except Exception:
            if world.monotonic() - t0 >= 0.9 * CONNECT_ATTEMPT_S:  # not refused: no answer
                self._went_silent()
            raise
        self.heard = world.monotonic()
        return got

    def _went_silent(self) -> None:
        if self.member is not None:
            self.silent = self.silent or {}  # (its own: kazoo made the object, not __init__)
            self.silent[self.member] = world.monotonic() + SILENT_PASSED_OVER_S

    def _read_socket(self, read_timeout: float) -> Any:
        self.heard = world.monotonic()  # the socket is readable: the server sent something
        return super()._read_socket(read_timeout)

    def _send_request(self, read_timeout: float, connect_timeout: float) -> Any:
        idle = not self.client._pending
        got = super()._send_request(read_timeout, connect_timeout)
        if idle and self.client._pending:
            self.waiting_since = world.monotonic()
        return got

    def check_patience(self) -> None:
        """Drop the connection (kazoo moves the session to another member) if a request
        has waited `patience_s` and the member has sent nothing since it was sent; ask
        something of a member not heard from for IDLE_ASK_S (the connection's thread)."""
        now = world.monotonic()
        client = self.client
        if not client._pending:
            if now - self.heard >= IDLE_ASK_S and not client._queue and client.connected:
                client.exists_async("/")
            return
        if now - max(self.heard, self.waiting_since) > self.patience_s:
            self._went_silent()
            raise ConnectionDropped(f"no answer from the server in {now - self.heard:.1f}s while a request "
                                    f"waited {now - self.waiting_since:.1f}s")


def local_first(hosts: str) -> str:
    """`hosts` (a connection string) with the members on this machine first, each group in
    a random order: a session stays on its own machine's member, so a machine that goes
    quiet holds up only the sessions of its own processes and of machines with no member
    of their own, not every session that happened to pick its member (issue 68). A member
    is on this machine if its address can be bound here."""
    _, sep, chroot = hosts.partition("/")
    addrs = reach.zk_addrs(hosts)
    local = [a for a in addrs if _is_here(a)]
    rest = [a for a in addrs if a not in local]
    random.shuffle(local)
    random.shuffle(rest)
    return ",".join(local + rest) + sep + chroot


def _is_here(addr: str) -> bool:
    try:
        host, _ = reach.split_addr(addr, default_port=2181)
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_DGRAM)
    except (ValueError, OSError):
        return False  # (kazoo says what is wrong with it)
    for family, _, _, _, sockaddr in infos:
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            try:
                s.bind((sockaddr[0], 0))
                return True
            except OSError:
                continue
    return False


def connect(hosts: str, timeout_s: float = ZK_SESSION_TIMEOUT_S,
            connect_timeout_s: float = CONNECT_TIMEOUT_S,
            refused_retry_s: float | None = None, logger: logging.Logger | None = None,
            patience_s: float = PATIENCE_S) -> KazooClient:
    """A started client; kazoo's timeout error if ZooKeeper does not answer within
    `connect_timeout_s` (the client is stopped then: no thread keeps retrying).
    `refused_retry_s` (the command line, the SDK): raise runtime.reach.KnownDown once every
    server has refused connections (or has no address) for that long, instead of waiting
    out `connect_timeout_s`; a server that does not answer is still waited for. Servers
    leave it unset: at start-up ZooKeeper may be starting too. `logger`: where kazoo's own
    lines go (default: "kazoo"). `patience_s`: how long a request waits on a silent member
    before the session moves (servers: SERVER_PATIENCE_S)."""
    if refused_retry_s is not None:
        why = reach.all_down(reach.zk_addrs(hosts), refused_retry_s, default_port=2181)
        if why is not None:
            raise reach.KnownDown(why)
    handler = _Handler()
    zk = KazooClient(hosts=local_first(hosts), randomize_hosts=False, timeout=timeout_s, handler=handler,
                     connection_retry=KazooRetry(max_tries=-1, delay=RECONNECT_FIRST_S, backoff=2,
                                                 max_jitter=0.1,
                                                 max_delay=RECONNECT_MAX_S, sleep_func=handler.sleep_func),
                     **({"logger": logger} if logger is not None else {}))
    zk._connection.__class__ = _Connection  # made by KazooClient's constructor, not started yet
    zk._connection.patience_s = patience_s
    handler.connection = zk._connection
    try:
        zk.start(timeout=connect_timeout_s)
    except Exception:
        zk.stop()
        zk.close()
        raise
    return zk


# How long a read through BoundedReads waits for ZooKeeper (then OperationTimeoutError).
READ_WAIT_S = 1.0
# ... where the reader has a value read earlier to go on with (a cache read again): a read
# takes a millisecond or two when ZooKeeper answers.
STALE_READ_WAIT_S = 0.1


class BoundedReads:
    """A ZooKeeper session whose reads (get, get_children, exists) end within `wait_s`:
    kazoo's own wait with no bound, and with ZooKeeper paused or without a quorum a
    request that read it waited 67 s (PITFALLS.md) while its thread was held. A read that
    is not answered in time raises OperationTimeoutError (an expected fault: retried,
    or met with the last value read). Everything else is the session's own."""

    def __init__(self, zk: KazooClient, wait_s: float = READ_WAIT_S) -> None:
        self._zk = zk
        self.wait_s = wait_s

    def __getattr__(self, name: str) -> Any:
        return getattr(self._zk, name)

    def _wait(self, result: Any, what: str, path: str) -> Any:
        try:
            return result.get(timeout=self.wait_s)
        except KazooTimeoutError:  # a member that went quiet is left meanwhile (PATIENCE_S)
            raise OperationTimeoutError(f"ZooKeeper did not answer {what} {path} "
                                        f"within {self.wait_s:g}s") from None

    def get(self, path: str, watch: Any = None) -> Any:
        return self._wait(self._zk.get_async(path, watch), "a read of", path)

    def get_children(self, path: str, watch: Any = None, include_data: bool = False) -> Any:
        return self._wait(self._zk.get_children_async(path, watch, include_data), "a list of", path)

    def exists(self, path: str, watch: Any = None) -> Any:
        return self._wait(self._zk.exists_async(path, watch), "a look at", path)

    def sync(self, path: str) -> Any:
        return self._wait(self._zk.sync_async(path), "a sync of", path)


def bounded(zk: Any, wait_s: float = READ_WAIT_S) -> Any:
    """`zk` with its reads bounded by `wait_s` (BoundedReads) if it is a kazoo session (or
    one bounded already); anything else (the simulation's ensemble, whose answers never
    wait) as it is."""
    if isinstance(zk, BoundedReads):
        zk = zk._zk
    return BoundedReads(zk, wait_s) if isinstance(zk, KazooClient) else zk
