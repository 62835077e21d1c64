"""Watching a dataset's changes (Client.watch, AsyncClient.watch): the change type, and
where a watch stands, shared by both clients.

A watch is a series of KV.Watch streams. Each stream lasts a minute at most (the cluster
ends it), or less if a storage node or a coordinator goes away; the next one starts from
the positions the last one reached, so changes come once each, in log order per shard,
with no gap. `positions` is the resume point: every change below it, per shard, has been
handed to the caller; `Client.watch(dataset, start=positions)` goes on from there, in this
process or another."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import grpc

from midtown import errors
from midtown_pb import kv_pb2 as pb
from runtime import tracing, world

_KINDS = {pb.Change.PUT: "put", pb.Change.DELETE: "delete", pb.Change.EXPIRE: "expire"}


@dataclass(frozen=True)
class Change:
    """One key's change. `kind`: "put" (a put, check-and-set or increment wrote `value`),
    "delete" (a live value was deleted) or "expire" (its TTL ran out at this position's log
    time). `version`: the new value's (put), the deleting record's (delete) or the expired
    value's (expire). `expires_at_ms`: the new value's expiry in log time (0: none), or when
    it expired."""
    kind: str
    shard: int
    partition_key: bytes
    local_key: bytes
    value: bytes | None
    version: int
    expires_at_ms: int
    position: int
    log_time_ms: int

    @staticmethod
    def of(c: pb.Change) -> Change:
        kind = _KINDS.get(c.kind, "unknown")
        return Change(kind, c.shard, c.partition_key, c.local_key, c.value if kind == "put" else None,
                      c.version, c.expires_at_ms, c.position, c.log_time_ms)


class WatchState:
    """Where a watch stands: the positions handed over so far (None until the first
    stream said where "now" is), the next request, and whether a failure may be retried:
    for up to `wait_s` since the last message."""

    def __init__(self, header: pb.RequestHeader, start: str | dict[int, int],
                 partition_key: bytes | None, wait_s: float, until: dict[int, int] | None = None) -> None:
        self.header = header
        self.until = until
        self.partition_key = partition_key
        self.wait_s = wait_s
        self.positions: dict[int, int] | None = None
        if isinstance(start, str):
            if start != "now":
                raise errors.InvalidArgument(f"start: {start!r}; give \"now\" or positions per shard")
        elif isinstance(start, dict) and start:
            bad = [k for k, v in start.items() if not (isinstance(k, int) and isinstance(v, int)
                                                       and k >= 0 and v >= 0)]
            if bad:
                raise errors.InvalidArgument(f"start: shard {bad[0]!r}; positions are whole numbers "
                                             "from 0 per shard number")
            self.positions = dict(start)
        else:
            raise errors.InvalidArgument(f"start: {start!r}; give \"now\" or positions per shard")
        if until is not None and (self.positions is None or set(until) != set(self.positions)):
            raise errors.InvalidArgument("until: give an end for each shard of `start`, and start at "
                                         "positions (not \"now\")")
        self._since = world.monotonic()
        self._backoff = 0.05
        self.closed = False
        self.avoid: str | None = None  # a coordinator the last stream could not reach
        # The watch's span while it runs (runtime/tracing.py), and its context for the calls
        self.span, self.trace = tracing.begun("Watch", dataset=header.dataset)

    def metadata(self, token: Any) -> Any:
        """What each of the watch's calls carries: the token, and the watch's trace."""
        return tracing.headers(token, self.trace)

    def end(self) -> None:
        """The watch ended (closed, done, or failed for good): its span ends."""
        self.closed = True
        tracing.ended(self.span)

    def done(self) -> bool:
        """Whether every shard has reached its `until` (a bounded watch ends there)."""
        u, p = self.until, self.positions
        return u is not None and p is not None and all(p.get(s, 0) >= e for s, e in u.items())

    def request(self) -> pb.WatchRequest:
        req = pb.WatchRequest(header=self.header)
        if self.positions is None:
            req.from_now = True
        else:
            getattr(req, "from").update(self.positions)
        if self.partition_key is not None:
            req.partition_key = self.partition_key
        return req

    def take(self, m: pb.WatchResponse) -> Iterator[Change]:
        """A message's changes, each handed over with `positions` moved past the changes of
        the positions before it (so `positions` is a resume point between any two)."""
        self._since, self._backoff = world.monotonic(), 0.05
        pos = self.positions if self.positions is not None else {}
        for c in m.changes:
            if self.until is not None and c.position >= self.until.get(c.shard, 0):
                continue  # past the end asked for
            if c.position > pos.get(c.shard, 0):
                pos[c.shard] = c.position  # every change below it was handed over
            self.positions = pos
            yield Change.of(c)
        for shard, p in m.positions.items():
            if self.until is not None:
                p = min(p, self.until.get(shard, p))
            if p > pos.get(shard, -1):
                pos[shard] = p
        self.positions = pos

    def failed(self, e: grpc.RpcError, addr: str) -> float | None:
        """After the stream from coordinator `addr` failed: None if the watch was closed
        (its call cancelled); its error, raised, unless a retry may cure it and there is
        time; else the seconds to wait first (an unreachable `addr` is avoided next)."""
        if self.closed:
            return None
        if e.code() not in errors.RETRYABLE or world.monotonic() > self._since + self.wait_s:
            raise errors.from_rpc(e) from None
        self.avoid = addr if e.code() == grpc.StatusCode.UNAVAILABLE else None
        wait, self._backoff = self._backoff, min(self._backoff * 2, 1.0)
        return wait


def parse_start(text: str) -> Any:
    """A start as the command line gives it: "now", or SHARD=POSITION,... (ValueError)."""
    if text == "now":
        return text
    out: dict[int, int] = {}
    for part in text.split(","):
        shard, sep, pos = part.partition("=")
        if not sep or not shard.strip().isdigit() or not pos.strip().isdigit():
            raise ValueError(f"{part!r} is not SHARD=POSITION")
        out[int(shard)] = int(pos)
    return out
