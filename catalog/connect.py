"""Connecting to ZooKeeper, where the catalog lives: every server, the command line and
the SDK's discovery connect the same way."""

from __future__ import annotations

from kazoo.client import KazooClient

from runtime import reach

# How long a process waits for ZooKeeper when it connects (a server at start-up).
CONNECT_TIMEOUT_S = 15.0
# The session: a log writer that loses its session stops acknowledging; another server
# takes over once the session expires. ZooKeeper needs tickTime <= timeout / 2.
ZK_SESSION_TIMEOUT_S = 4.0
ZK_TICK_MS = 500


def connect(hosts: str, timeout_s: float = ZK_SESSION_TIMEOUT_S,
            connect_timeout_s: float = CONNECT_TIMEOUT_S,
            refused_retry_s: float | None = None) -> KazooClient:
    """A started client; kazoo's timeout error if ZooKeeper does not answer within
    `connect_timeout_s` (the client is stopped then: no thread keeps retrying).
    `refused_retry_s` (the command line, the SDK): raise runtime.reach.KnownDown once every
    server has refused connections (or has no address) for that long, instead of waiting
    out `connect_timeout_s`; a server that does not answer is still waited for. Servers
    leave it unset: at start-up ZooKeeper may be starting too."""
    if refused_retry_s is not None:
        why = reach.all_down(reach.zk_addrs(hosts), refused_retry_s, default_port=2181)
        if why is not None:
            raise reach.KnownDown(why)
    zk = KazooClient(hosts=hosts, timeout=timeout_s)
    try:
        zk.start(timeout=connect_timeout_s)
    except Exception:
        zk.stop()
        zk.close()
        raise
    return zk
