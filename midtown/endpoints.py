"""Where an SDK call goes: the coordinators (the addresses given, or those registered in
ZooKeeper), which one a call tries first (a key's route, else one at random, passing over
those just found unreachable), and what every call carries (credentials, the bearer token,
the default deadline and retries). Shared by Client and AsyncClient; it sends nothing
itself, and reads ZooKeeper only for a client given zk=, in the background, never past a
call's deadline (midtown/discovery.py)."""

from __future__ import annotations

from typing import Any

import grpc

from midtown import errors
from midtown.checks import Key, to_bytes, to_dataset
from midtown.discovery import Discovery
from midtown.routes import AVOID_S, Routes, routed
from runtime import reach, tracing, world


class Endpoints:
    def __init__(self, coordinators: str | list[str] | None, zk: str | None, *, timeout: float,
                 retries: int, token: str | None, tls_ca: bytes | str | None, route: bool,
                 known_down_s: float | None = None, dc: str = "") -> None:
        if coordinators is None and zk is None:
            raise ValueError("give coordinator addresses or zk='HOST:PORT' for discovery")
        tracing.from_env_once()  # MIDTOWN_TRACE_*: runtime/tracing.py
        self.credentials: grpc.ChannelCredentials | None = None
        if tls_ca is not None:
            if isinstance(tls_ca, str):
                try:
                    with open(tls_ca, "rb") as f:
                        tls_ca = f.read()
                except OSError as e:
                    raise ValueError(f"tls_ca: {e}") from None
            self.credentials = grpc.ssl_channel_credentials(root_certificates=tls_ca)
        self.token_metadata = (("authorization", f"Bearer {token}"),) if token else None
        self.timeout = timeout
        self.retries = retries
        if known_down_s is not None and not (isinstance(known_down_s, int | float) and known_down_s >= 0):
            raise ValueError(f"known_down_s: {known_down_s!r}, must be a number of seconds, 0 or more")
        self.known_down_s = known_down_s
        self.zk_hosts = zk
        self._fixed = [coordinators] if isinstance(coordinators, str) else list(coordinators or [])
        self._unreached: dict[str, float] = {}  # coordinator -> until when it is passed over (pick)
        self.discovery = Discovery(zk, known_down_s, dc) if zk is not None and not self._fixed else None
        self.routes = (Routes(self.discovery.session) if self.discovery is not None and route else None)

    @property
    def metadata(self) -> Any:
        """What a call carries: the bearer token, and the trace's context while the
        operation is traced (runtime/tracing.py)."""
        return tracing.headers(self.token_metadata)

    def close(self) -> None:
        if self.routes is not None:
            self.routes.stop()
        if self.discovery is not None:
            self.discovery.close()

    @property
    def has_session(self) -> bool:
        """Whether a ZooKeeper session was opened (closing it blocks)."""
        return self.discovery is not None and self.discovery.has_session

    def deadline(self, timeout: float | None) -> float:
        """A call's timeout: the one given (checked), else the client's."""
        if timeout is not None and not (isinstance(timeout, int | float) and timeout > 0):
            raise errors.InvalidArgument(f"timeout: {timeout!r}, must be a number of seconds above 0")
        return timeout or self.timeout

    def coordinators(self, refresh: bool = False, wait_s: float | None = None) -> list[str]:
        """The coordinators to use: the addresses given, or those registered in ZooKeeper
        (midtown/discovery.py: looked up in the background at most every DISCOVERY_TTL_S,
        or soon after a failure with `refresh`). Waits at most `wait_s` (the call's time
        left; the client's timeout if None), and only when it knows no coordinator yet."""
        if self.discovery is None:
            return self._fixed
        return self.discovery.coordinators(self.timeout if wait_s is None else wait_s, refresh)

    def known(self, refresh: bool = False) -> list[str] | None:
        """The coordinators given, or unless `refresh` those found in ZooKeeper less than
        DISCOVERY_TTL_S ago (None: they must be looked up). No I/O."""
        if self.discovery is None:
            return self._fixed
        return self.discovery.known(refresh)

    def known_down(self, addr: str, e: grpc.RpcError) -> str | None:
        """Why `addr` is known to be down now (it refuses connections, say), after a call
        to it failed UNAVAILABLE; None if the client waits out its deadline for every
        failure (no `known_down_s`) or the server may be there (runtime/reach.py)."""
        if self.known_down_s is None or e.code() != grpc.StatusCode.UNAVAILABLE:
            return None
        why = reach.down_now(addr)
        return None if why is None else f"{addr}: {why}"

    def pick(self, addrs: list[str], failed: str | None = None) -> str:
        """A coordinator at random (one in the client's data center, `dc`, if one is registered
        there and reachable), passing over those a call could not reach in the last
        AVOID_S while others remain (`failed`: one just now, and then one on another host
        if there is one: what silenced a coordinator, a machine paused or cut off, likely
        silenced its neighbours). A paused coordinator is found out by keepalive in 0.5-1 s
        (runtime/transport.py), and a new call to it would wait on its connection until
        the deadline."""
        now = world.monotonic()
        if failed is not None:
            self._unreached[failed] = now + AVOID_S
        ok = [a for a in addrs if self._unreached.get(a, 0.0) <= now] or addrs
        if failed is not None:
            ok = [a for a in ok if reach.host_of(a) != reach.host_of(failed)] or ok
        near = self.discovery.near if self.discovery is not None else frozenset()
        return world.choice([a for a in ok if a in near] or ok)

    def unanswered(self, addr: str) -> None:
        """A call to `addr` got no answer within its deadline (paused, cut off, wedged):
        the next calls pass it over for AVOID_S, routed ones too, and the routes are read
        again."""
        self._unreached[addr] = world.monotonic() + AVOID_S
        if self.routes is not None:
            self.routes.failed(addr)

    def switch(self, failed: str, coordinators: list[str]) -> str:
        """Another coordinator than `failed`, which was unavailable (and is no route now)."""
        if self.routes is not None:
            self.routes.failed(failed)
        return self.pick(coordinators, failed=failed)

    def route_of(self, method: str, req: Any) -> str | None:
        """The coordinator a single-key request goes to first (None: any): routes are for
        the operations that append, and strong gets (midtown/routes.py: routed)."""
        r = self.routes
        if r is None or not routed(method, req):
            return None
        return r.coordinator_for(req.header.dataset, req.key.partition)

    def coordinator_for(self, dataset: str, partition: Key) -> str | None:
        """The coordinator the writes on `partition` of `dataset` go to first: the one
        beside its log's writer (host layout), or None (any). Routes are read in the
        background: None at first."""
        r = self.routes
        return None if r is None else r.coordinator_for(to_dataset(dataset), to_bytes(partition, "partition"))
