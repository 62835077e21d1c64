"""How Midtown processes reach each other: plaintext on a trusted network, or mutual TLS.

With a cluster certificate configured (`--tls-ca`, `--tls-cert`, `--tls-key`, made for a
local cluster by `midtown cluster up --tls`), every internal port (log servers, storage
nodes, coordinators' callback ports) takes only calls that present a certificate signed by
the cluster's CA, and every internal call presents this process's own. A process without a
cluster certificate is refused at the TLS handshake (gRPC's UNAVAILABLE), before any
Midtown code sees its request. Clients of the KV service need no certificate: they are
authenticated by their tokens, over server-authenticated TLS.

One configuration per process, set once at start-up (`use`), read by whoever opens a
channel or a port."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import grpc

# gRPC messages between all Midtown processes (default would be 4 MiB, see PITFALLS.md).
GRPC_MESSAGE_BYTES_MAX = 32 * 1024 * 1024
# Channel and server options every Midtown process and client uses.
# Keepalive: while calls are in flight on a connection, an HTTP/2 ping every second, and the
# connection closed if one goes unanswered for a second (its calls fail UNAVAILABLE, which
# callers retry elsewhere). A paused process (SIGSTOP, a VM frozen) keeps its sockets open
# and would hold a call until its deadline; its pings go unanswered, while a merely busy
# one answers them from gRPC's own threads. Servers accept pings that often (no strikes).
KEEPALIVE_MS = 1000
# The SDK's channels to coordinators ping twice as often: a call to a quiet coordinator is
# found out 0.5-1.25 s after it went quiet (1.0-2.05 s at 1000 ms; measured with a paused
# server, six phases of the ping's timer each), within the 2 s a client typically gives a
# write, and retried on another. (gRPC's flow-control probes, `grpc.http2.bdp_probe`, delay
# the keepalive ping: without them it was 0.55-0.75 s; they are left on, since they size the
# windows of large messages, scans and bulk loads, and that cost was not measured.)
CLIENT_KEEPALIVE_MS = 500


def _options(keepalive_ms: int) -> list[tuple[str, int]]:
    return [
        ("grpc.max_send_message_length", GRPC_MESSAGE_BYTES_MAX),
        ("grpc.max_receive_message_length", GRPC_MESSAGE_BYTES_MAX),
        ("grpc.keepalive_time_ms", keepalive_ms),
        ("grpc.keepalive_timeout_ms", keepalive_ms),
        ("grpc.keepalive_permit_without_calls", 0),
        ("grpc.http2.max_pings_without_data", 0),
        ("grpc.http2.ping_timeout_ms", keepalive_ms),
        ("grpc.http2.min_recv_ping_interval_without_data_ms", CLIENT_KEEPALIVE_MS // 2),
        ("grpc.http2.max_ping_strikes", 0),
    ]


GRPC_OPTIONS = _options(KEEPALIVE_MS)  # servers, and channels between Midtown's processes
CLIENT_GRPC_OPTIONS = _options(CLIENT_KEEPALIVE_MS)  # the SDK's channels to coordinators


@dataclass(frozen=True)
class Credentials:
    """PEM bytes: the cluster's CA, and this process's certificate chain and key."""
    ca: bytes | None  # None: serve TLS to clients, but no mutual TLS inside the cluster
    cert: bytes
    key: bytes

    @staticmethod
    def load(ca: str | None, cert: str, key: str) -> Credentials:
        """Read the PEM files; ValueError naming the flag of one that cannot be read."""
        def read(path: str, flag: str) -> bytes:
            try:
                with open(path, "rb") as f:
                    data = f.read()
            except OSError as e:
                raise ValueError(f"{flag}: {e}") from None
            if b"-----BEGIN" not in data:
                raise ValueError(f"{flag}: {path} is not a PEM file")
            return data
        return Credentials(read(ca, "--tls-ca") if ca else None, read(cert, "--tls-cert"),
                           read(key, "--tls-key"))

    @property
    def mutual(self) -> bool:
        return self.ca is not None


_creds: Credentials | None = None


def use(creds: Credentials | None) -> None:
    """This process's credentials (None: plaintext). Set before any channel or port."""
    global _creds
    _creds = creds


def current() -> Credentials | None:
    return _creds


def channel(addr: str) -> grpc.Channel:
    """A channel to another cluster process, presenting this process's certificate when
    the cluster uses mutual TLS."""
    c = _creds
    if c is None or not c.mutual:
        return grpc.insecure_channel(addr, options=GRPC_OPTIONS)
    creds = grpc.ssl_channel_credentials(root_certificates=c.ca, private_key=c.key,
                                         certificate_chain=c.cert)
    return grpc.secure_channel(addr, creds, options=GRPC_OPTIONS)


def listen(server: grpc.Server, address: str, internal: bool = True) -> int:
    """Bind `server` to `address` (port 0: any free port); returns the port. An internal
    port takes only cluster members under mutual TLS; a client port (internal=False) serves
    TLS to anyone when a certificate is configured."""
    c = _creds
    if c is None or (internal and not c.mutual):
        port = server.add_insecure_port(address)
    else:
        creds = grpc.ssl_server_credentials([(c.key, c.cert)], root_certificates=c.ca if internal else None,
                                            require_client_auth=internal)
        port = server.add_secure_port(address, creds)
    if port == 0:
        raise SystemExit(f"cannot listen on {address}")
    return port


def add_flags(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--tls-ca", help="PEM: the cluster's CA; with --tls-cert/--tls-key, mutual TLS "
                                     "between cluster processes (only holders of a certificate it signed "
                                     "are served)")
    ap.add_argument("--tls-cert", help="PEM certificate chain of this process")
    ap.add_argument("--tls-key", help="PEM private key of --tls-cert")


def use_flags(ap: argparse.ArgumentParser, a: argparse.Namespace) -> Credentials | None:
    """Configure this process from the flags of `add_flags` (errors name the flag)."""
    if not a.tls_cert and not a.tls_key and not a.tls_ca:
        use(None)
        return None
    if not (a.tls_cert and a.tls_key):
        ap.error("--tls-cert and --tls-key go together (and --tls-ca needs both)")
    try:
        creds = Credentials.load(a.tls_ca, a.tls_cert, a.tls_key)
    except ValueError as e:
        ap.error(str(e))
    use(creds)
    return creds
