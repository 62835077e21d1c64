"""Whether an address is known to be down *now*: a refused connection is known in
milliseconds, where a server that does not answer (paused, or behind a dropped route)
is known only by waiting. The command line and the SDK (when asked) give up on a refused
address after a short bounded retry, as etcdctl does, and keep the whole timeout for a
server that does not answer.

The answer comes from the connect's errno, never from an error's text."""

from __future__ import annotations

import errno
import socket
import time
from collections.abc import Callable

# A connect that neither succeeds nor fails within this long is a server that may answer
# later: not "known down".
PROBE_TIMEOUT_S = 0.5
# How long a caller keeps trying an address that refuses before it says so: a process
# restarting on the same port is back within it, a wrong port never is.
REFUSED_RETRY_S = 1.0

# errno -> what to tell a person. Each is known at once: the host answered "nothing
# listens here", or the network has no way to it, or the name means no address.
_KNOWN_DOWN = {
    errno.ECONNREFUSED: "connection refused",
    errno.EHOSTUNREACH: "host unreachable",
    errno.ENETUNREACH: "network unreachable",
    errno.EADDRNOTAVAIL: "address not available",
}


class KnownDown(ConnectionError):
    """Every address tried is known to be down; the message says why, per address."""


def host_of(addr: str) -> str:
    """The host of HOST:PORT ([v6]:PORT too), or the whole of `addr` when it names no port;
    never an error (split_addr checks an address)."""
    host, sep, _ = addr.strip().rpartition(":")
    host = host if sep else addr.strip()
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


def split_addr(addr: str, default_port: int | None = None) -> tuple[str, int]:
    """HOST:PORT ([v6]:PORT too) as (host, port); ValueError if it is not one."""
    host, sep, port = addr.strip().rpartition(":")
    if not sep:
        if default_port is None:
            raise ValueError(f"{addr!r} is not HOST:PORT")
        host, port = addr.strip(), str(default_port)
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{addr!r} is not HOST:PORT")
    return host, int(port)


def down_now(addr: str, timeout_s: float = PROBE_TIMEOUT_S, default_port: int | None = None) -> str | None:
    """Why `addr` cannot be reached right now ("connection refused", "no such host", ...),
    or None if a TCP connection was made or is still pending after `timeout_s` (a server
    that may answer: only waiting tells)."""
    try:
        host, port = split_addr(addr, default_port)
    except ValueError as e:
        return str(e)
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror:
        return "no such host"
    why = None
    for family, kind, proto, _, sockaddr in infos:
        s = socket.socket(family, kind, proto)
        try:
            s.settimeout(timeout_s)
            s.connect(sockaddr)
            return None
        except TimeoutError:
            return None
        except OSError as e:
            if e.errno not in _KNOWN_DOWN:
                return None
            why = _KNOWN_DOWN[e.errno]
        finally:
            s.close()
    return why


def zk_addrs(hosts: str) -> list[str]:
    """The HOST:PORT of each server in a ZooKeeper connection string ("h1:p1,h2:p2/chroot")."""
    return [h.strip() for h in hosts.split("/", 1)[0].split(",") if h.strip()]


def all_down(addrs: list[str], retry_s: float = REFUSED_RETRY_S, default_port: int | None = None,
             sleep: Callable[[float], None] = time.sleep) -> str | None:
    """Why none of `addrs` can be reached, if every one of them stayed known-down for
    `retry_s` (tried again with backoff meanwhile); None as soon as one may answer."""
    t0 = time.monotonic()
    pause = 0.05
    while True:
        whys = [down_now(a, default_port=default_port) for a in addrs]
        if not addrs or any(w is None for w in whys):
            return None
        if time.monotonic() - t0 >= retry_s:
            return "; ".join(f"{a}: {w}" for a, w in zip(addrs, whys))
        sleep(pause)
        pause = min(pause * 2, 0.4)
