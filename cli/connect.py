"""How a command finds and reaches its cluster: --dir DIR (a local cluster), --zk HOST:PORT,
the MIDTOWN_ZK environment variable, or ./run/local (the `make run` cluster); and the
`Client`, ZooKeeper client and log client the commands use. Shared by every command
group (cli/__init__.py)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

DEFAULT_DIR = Path("run/local")


class CliError(Exception):
    """A bad command line or argument: exit code 2, the message naming what to change."""


class Unreachable(CliError):
    """The cluster could not be reached, or did not answer within --timeout: exit code 5."""


def zk_hosts(a: argparse.Namespace) -> str:
    from cluster import Cluster, ClusterError

    if getattr(a, "zk", None):
        return str(a.zk)
    if getattr(a, "dir", None):
        try:
            return _use_local(a, Cluster.load(Path(a.dir)))
        except ClusterError as e:
            raise CliError(str(e)) from None
    if os.environ.get("MIDTOWN_ZK"):
        return os.environ["MIDTOWN_ZK"]
    if (DEFAULT_DIR / "cluster.json").exists():
        return _use_local(a, Cluster.load(DEFAULT_DIR))
    raise CliError("no cluster named: give --dir DIR, --zk HOST:PORT, or set MIDTOWN_ZK")


def _use_local(a: argparse.Namespace, c: Any) -> str:
    """Use a local cluster: with TLS, its admin certificate for internal calls and its CA
    for the coordinators (unless --tls-ca says otherwise). Returns its ZooKeeper."""
    if c.tls:
        from runtime import transport

        transport.use(c.credentials())
        if hasattr(a, "tls_ca") and not a.tls_ca and not os.environ.get("MIDTOWN_TLS_CA"):
            a.tls_ca = str(c.tls_ca)
    return str(c.zk_hosts)


def kv_client(a: argparse.Namespace) -> Any:
    """A `Client` for the data commands: --coordinator, or discovered through the cluster."""
    from midtown.client import Client
    from midtown.errors import InvalidArgument
    from runtime import reach

    token = a.token or os.environ.get("MIDTOWN_TOKEN") or None
    zk = None if a.coordinator else zk_hosts(a)  # a local cluster may set the CA
    ca_file = a.tls_ca or os.environ.get("MIDTOWN_TLS_CA") or None
    try:
        ca = Path(ca_file).read_bytes() if ca_file else None
    except OSError as e:
        raise CliError(f"--tls-ca: cannot read {ca_file}: {e.strerror}") from None
    # A refused address is said at once (exit 5), as etcdctl does; a server that does not
    # answer is waited for until --timeout.
    known_down_s = reach.REFUSED_RETRY_S
    dc = getattr(a, "dc", None) or os.environ.get("MIDTOWN_DC") or None
    try:
        if a.coordinator:
            return Client(a.coordinator, timeout=a.timeout, token=token, tls_ca=ca, known_down_s=known_down_s,
                          dc=dc)
        return Client(zk=zk, timeout=a.timeout, token=token, tls_ca=ca, known_down_s=known_down_s, dc=dc)
    except InvalidArgument as e:  # the one argument of the client's own it checks: the data center
        raise CliError(f"--dc: {e.message.removeprefix('dc: ')}") from None


ZK_CONNECT_MAX_S = 30.0


def zk_client(a: argparse.Namespace) -> Any:
    """A ZooKeeper client, or a one-line error naming the address within --timeout."""
    from log import zk as zkpaths
    from runtime import reach

    hosts = zk_hosts(a)
    # At most ZK_CONNECT_MAX_S: commands that run long (a shard move, a backup) take a
    # --timeout of minutes for their work, not for finding ZooKeeper.
    wait = min(float(getattr(a, "timeout", 10.0) or 10.0), ZK_CONNECT_MAX_S)
    try:
        return zkpaths.connect(hosts, connect_timeout_s=wait, refused_retry_s=reach.REFUSED_RETRY_S)
    except reach.KnownDown as e:
        raise Unreachable(f"cannot reach ZooKeeper at {hosts} ({e}; --zk, --dir or $MIDTOWN_ZK "
                          "name it)") from None
    except Exception:
        raise Unreachable(f"cannot reach ZooKeeper at {hosts} within {wait:g}s (--zk, --dir or "
                          "$MIDTOWN_ZK name it)") from None


def log_client(a: argparse.Namespace) -> Any:
    from log.client import LogClient

    return LogClient(zk=zk_client(a), own_zk=True)
