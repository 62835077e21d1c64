"""A client of the log: finds the writer of a log through ZooKeeper and appends to it,
following redirects and retrying across writer changes; reads a log from any replica.

An append that fails with an unknown outcome (the writer stopped mid-way) is retried when
`retry_unknown` is set: the entry may then be in the log twice. Consumers deduplicate with
the request id carried in the payload (storage nodes do)."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent import futures
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Self

import grpc
from kazoo.client import KazooClient

from log import limits
from log import read_index as ri
from log import zk as zkpaths
from log.client_link import GrpcLog, PendingAppend
from log.client_link import LogLink as LogLink
from log.client_link import Placement as Placement
from log.metadata import LogMetadata

# The ports this client's users reach the log through, named here for them (log/ports.py).
from log.ports import FollowedEntry as FollowedEntry
from log.ports import Following as Following
from log.ports import LocalLog as LocalLog
from log.seals import NONE as NONE
from log.seals import UNTAGGED as UNTAGGED
from log.seals import Tags as Tags
from midtown_pb import log_pb2_grpc
from runtime import refusals, world
from runtime.refreshed import Refreshed
from runtime.refusals import Refusal

log = logging.getLogger("midtown.log.client")

if TYPE_CHECKING:  # the client alone (`pip install .`) has no prometheus_client, which inprocess uses
    from log.follow import Follow
    from runtime import inprocess

# An append waiting on a writer looks this often whether the log's writer node names another
# server now (a takeover, log/takeover.py): then it gives that writer up and asks the new one.
WRITER_CHECK_S = 0.05


@dataclass(frozen=True)
class Appended:
    first_position: int
    count: int
    timestamp_ms: int
    epoch: int
    attempts: int


class LogClient:
    def __init__(self, zk_hosts: str | None = None, zk: KazooClient | None = None,
                 own_zk: bool = False, link: LogLink | None = None,
                 local_log: inprocess.Local[LocalLog] | None = None) -> None:
        """`link`: the way to the log servers (log/client_link.py; gRPC by default, the
        host layout's reaches the log server of its process directly: log/local.py);
        `local_log`: the log server of this process, for its read leases and follows."""
        assert zk_hosts or zk
        self.grpc = GrpcLog()  # the calls outside the port (reads, truncation, status)
        self.link: LogLink = link or self.grpc
        self.local_log = local_log  # None: no log server in this process
        self._own_zk = zk is None or own_zk  # closed with this client
        # Reads on request paths end within READ_WAIT_S (fleet/connect.py, issue 68).
        if zk is None:  # a server's or a benchmark's (commands pass their own session)
            zk = zkpaths.connect(zk_hosts, patience_s=zkpaths.SERVER_PATIENCE_S)  # type: ignore[arg-type]
        self.zk = zkpaths.bounded(zk)
        self._writers: dict[int, str] = {}
        self._watched: set[int] = set()  # logs whose writer node this client watches
        self._on_writer: dict[int, list[Callable[[str | None], None]]] = {}  # on_writer_change
        self._lock = world.lock()
        # Each log's metadata as last read: whose replicas a ReadIndex round asks; read
        # again when a replica shows a newer writer (log/read_index.py).
        self._log_meta: dict[int, LogMetadata] = {}
        quick = zkpaths.bounded(self.zk, zkpaths.STALE_READ_WAIT_S)  # read again: a short bound
        self._servers: Refreshed[dict[int, str]] = Refreshed(
            self.servers, limits.SERVERS_CACHE_S, initial={},
            reload=lambda: {i: s["addr"] for i, s in zkpaths.servers(quick).items()})
        self._topology: zkpaths.Topology | None = None
        self._follows: list[Follow] = []  # LogClient.follow

    def close(self) -> None:
        self.grpc.close()
        if self._own_zk:
            self.zk.stop()
            self.zk.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *a: object) -> None:
        self.close()

    def stub(self, addr: str) -> log_pb2_grpc.LogStub:
        return self.grpc.stub(addr)

    def read_topology(self) -> zkpaths.Topology | None:
        """The cluster's logs as ZooKeeper holds them; None while none are written (a
        cluster starting up)."""
        if self._topology is None:
            self._topology = zkpaths.read_topology(self.zk)
        return self._topology

    def topology(self) -> zkpaths.Topology:
        t = self.read_topology()
        if t is None:
            raise Refusal(grpc.StatusCode.UNAVAILABLE, "no Midtown cluster in this ZooKeeper")
        return t

    def check_log(self, log_id: int) -> None:
        n = self.topology().logs
        if not 0 <= log_id < n:
            raise Refusal(grpc.StatusCode.NOT_FOUND,
                          f"log_id: unknown log {log_id}; this cluster has logs 0..{n - 1}")

    def servers(self) -> dict[int, str]:
        return {i: s["addr"] for i, s in zkpaths.servers(self.zk).items()}

    def writer_addr(self, log_id: int, refresh: bool = False) -> str | None:
        if not refresh and log_id in self._writers:
            return self._writers[log_id]
        w = zkpaths.read_writer(self.zk, log_id)
        if w is None:
            self._writers.pop(log_id, None)
            return None
        self._writers[log_id] = w["addr"]
        return w["addr"]  # type: ignore[no-any-return]

    def _watch_writer(self, log_id: int) -> None:
        """Follow the log's writer node, so that an append waiting on a writer that was
        taken over (log/takeover.py) moves to the new one at once (issue 33)."""
        with self._lock:
            if log_id in self._watched:
                return
            self._watched.add(log_id)

        def changed(data: bytes | None, stat: Any) -> None:
            addr = None
            if data:
                try:
                    addr = json.loads(data)["addr"]
                except (ValueError, KeyError):
                    pass
            if addr is not None:
                before = self._writers.get(log_id)
                if before is not None and before != addr:
                    log.info("log %d: its writer is %s now", log_id, addr)
                self._writers[log_id] = addr
            for fn in list(self._on_writer.get(log_id, ())):
                fn(addr)
        try:
            self.zk.DataWatch(zkpaths.writer_path(log_id), changed)
        except Exception:  # ZooKeeper away: appends still find the writer by reading it
            with self._lock:
                self._watched.discard(log_id)

    # ------------------------------------------------------------------ ReadIndex
    def read_index_by(self, log_id: int) -> tuple[int | None, str]:
        """A strong read's index and how it was had: "lease", by the read lease of the log's
        writer when it is in this process and holds one (log/lease.py: one look, no call),
        else "read_index", by a ReadIndex round (read_index)."""
        node = self.local_log.component if self.local_log is not None else None
        if node is not None:
            idx = node.lease_index(log_id)
            if idx is not None:
                return idx, "lease"
        return self.read_index(log_id), "read_index"

    def read_index(self, log_id: int) -> int | None:
        """The ReadIndex rule (DESIGN.md, log/read_index.py): the highest position stored by
        any of a fence quorum of the log's last segment's replicas, asked now, with the
        metadata read again when one of them has seen a newer writer. Every entry
        acknowledged before this call is at or below it. None when not enough replicas
        answered (a reader then goes through the log)."""
        meta, fresh = self._log_meta.get(log_id), False
        for _ in range(3):
            if meta is None:
                meta, fresh = self._read_log_meta(log_id), True
            try:
                index = ri.read_index(meta, self._tails(log_id, meta), fresh)
            except ri.Stale:
                meta = None
                continue
            if index is not None or fresh:
                return index
            meta = None  # too few of a cached segment's replicas answered: has it changed?
        return None

    def _read_log_meta(self, log_id: int) -> LogMetadata:
        """The log's metadata as ZooKeeper's leader has it now (sync, then read): it names
        every segment opened before this call."""
        path = zkpaths.log_path(log_id)
        # Within the round's wait: a ZooKeeper that does not answer fails the round (the
        # read then goes through the log), never holds it.
        self.zk.sync_async(path).get(timeout=limits.TAIL_QUORUM_WAIT_S)
        data, _ = self.zk.get_async(path).get(timeout=limits.TAIL_QUORUM_WAIT_S)
        meta = LogMetadata.from_json(data)
        self._log_meta[log_id] = meta
        return meta

    def _tails(self, log_id: int, meta: LogMetadata) -> dict[int, ri.TailReply]:
        """The Tail answers of the last segment's replicas, until a fence quorum of them
        answered (or the wait is over)."""
        addrs = self._servers.get()
        calls = {self.link.tail(a, log_id): r for r in ri.replicas_to_ask(meta)
                 if (a := addrs.get(r)) is not None}
        replies: dict[int, ri.TailReply] = {}
        try:
            for f in world.as_completed(calls, timeout=limits.TAIL_QUORUM_WAIT_S):
                try:
                    replies[calls[f]] = f.result()
                except Exception:
                    continue
                if ri.enough(meta, replies):
                    break
        except futures.TimeoutError:
            pass
        return replies

    # ------------------------------------------------------------------ following
    def follow(self, log_id: int, position: Callable[[], int],
               deliver: Callable[[Sequence[FollowedEntry]], None], behind: Callable[[str], None],
               stop: threading.Event, linger_ms: int = 0) -> Following:
        """Follow a log from its writer in a thread of its own until `stop` (log/follow.py):
        `deliver(entries)` gets its committed entries in order from `position()`, through
        the link (straight from the log server of this process when that is the writer); `behind(why)`
        is called when `position()` is below what the log still holds."""
        from log.follow import WRITER_RECHECK_S, Follow
        from runtime import loops

        f = Follow(self, log_id, position, deliver, behind, stop, linger_ms)
        with self._lock:
            self._follows.append(f)
            first = len(self._follows) == 1
        loops.forever(f"follow-{log_id}", f.run, stop)
        if first:
            loops.every("writer-recheck", WRITER_RECHECK_S, self._recheck_follows, stop)
        return f

    def _recheck_follows(self) -> None:
        for f in list(self._follows):
            f.recheck()

    # ------------------------------------------------------------------ writers
    def on_writer_change(self, log_id: int, fn: Callable[[str | None], None]) -> None:
        """Call `fn(addr)` whenever the log's writer node changes (ZooKeeper's watch on it,
        in ZooKeeper's event thread: `fn` must not block): the writer's address, or None
        while it has none; once at once with the current one."""
        with self._lock:
            self._on_writer.setdefault(log_id, []).append(fn)
            watched = log_id in self._watched
        if watched:
            fn(self._writers.get(log_id))
        self._watch_writer(log_id)

    def append(self, log_id: int, payloads: list[bytes], timeout_s: float = 30.0,
               retry_unknown: bool = True, tags: Tags = UNTAGGED) -> Appended:
        """Append `payloads` to `log_id` through its writer, retried (past redirects,
        elections and, with `retry_unknown`, unknown outcomes) until `timeout_s`. Refusal
        when it fails; its reason is refusals.SEALED when the append carries a record of a
        shard handed over to another log (`tags`, log/seals.py): refused whole, nothing of
        it in the log."""
        self.check_log(log_id)
        self._watch_writer(log_id)
        deadline = world.monotonic() + timeout_s
        attempts = 0
        refresh = False
        backoff = 0.05
        while True:
            attempts += 1
            addr = self.writer_addr(log_id, refresh=refresh)
            left = deadline - world.monotonic()
            if left <= 0:
                raise Refusal(grpc.StatusCode.DEADLINE_EXCEEDED,
                              f"log {log_id}: no acknowledged append within {timeout_s}s")
            if addr is None:
                world.sleep(min(backoff, left))
                backoff = min(backoff * 2, 0.5)
                refresh = True
                continue
            got = self._append_once(addr, log_id, payloads, min(left, 10.0), tags)
            if not isinstance(got, Refusal):
                return Appended(*got, attempts)
            if got.reason == refusals.NOT_WRITER:
                if got.redirect:
                    self._writers[log_id] = got.redirect
                    refresh = False
                else:
                    refresh = True
                continue
            unknown = got.code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
            if unknown and (retry_unknown or got.reason == refusals.NO_WRITER):
                # The time left now, after the attempt (the seeded simulation found appends
                # ending up to a second late when the attempt's start was used here).
                world.sleep(min(backoff * (1 + world.random()), max(0.0, deadline - world.monotonic())))
                backoff = min(backoff * 2, 0.5)
                refresh = True
                continue
            raise got

    def _append_once(self, addr: str, log_id: int, payloads: list[bytes],
                     timeout_s: float, tags: Tags) -> Placement | Refusal:
        """One attempt at the server at `addr`, given up early if the log's writer node
        names another server meanwhile (a takeover: the new writer decides)."""
        call: PendingAppend = self.link.append(addr, log_id, payloads, timeout_s, tags)
        while True:
            try:
                return call.result(WRITER_CHECK_S)
            except Refusal as e:  # the outcome the loop in append() decides on
                return e
            except TimeoutError:
                now = self._writers.get(log_id)
                if now is not None and now != addr:
                    call.cancel()
                    return Refusal(grpc.StatusCode.UNAVAILABLE,
                                   f"log {log_id}: its writer changed to {now} meanwhile")

    def read(self, log_id: int, from_position: int = 0, follow: bool = False,
             max_entries: int = 0, server: str | None = None,
             timeout_s: float | None = None) -> Iterator[FollowedEntry]:
        """Committed entries from `from_position`, from one replica: the log's writer by
        default (it knows the commit point first), or the server named; `follow`: on as
        the log grows."""
        self.check_log(log_id)
        addr = server or self.writer_addr(log_id, refresh=True) or self._any_server()
        yield from self.link.read_range(addr, log_id, from_position, max_entries, timeout_s,
                                        server is not None, follow)

    def _any_server(self) -> str:
        servers = list(self.servers().values())
        if not servers:
            raise Refusal(grpc.StatusCode.UNAVAILABLE, "no log server is registered")
        return servers[int(world.random() * len(servers))]

    def truncate(self, log_id: int, before: int) -> int:
        """Truncate `log_id` below `before`, by its writer: its first position now."""
        addr = self.writer_addr(log_id, refresh=True) or self._any_server()
        return self.link.truncate(addr, log_id, before)

    def writer_tail(self, log_id: int) -> ri.TailReply | None:
        """The log's writer's Tail answer: its last stored position, epoch and clock (None:
        no writer)."""
        addr = self.writer_addr(log_id, refresh=True)
        if addr is None:
            return None
        try:
            return self.link.tail(addr, log_id).result(limits.TAIL_CALL_TIMEOUT_S)
        except Exception as e:  # refused, broken or timed out, whatever the link
            raise Refusal(grpc.StatusCode.UNAVAILABLE, f"{addr}: {e}") from None

    def status(self) -> list[dict]:
        """Per log: writer, epoch, first and last position, and the position of each replica
        of its last segment."""
        topo = self.topology()
        rows: dict[int, dict] = {}
        ensembles: dict[int, set[int]] = {}
        for log_id in range(topo.logs):
            meta, _ = zkpaths.read_metadata(self.zk, log_id)
            w = zkpaths.read_writer(self.zk, log_id)
            rows[log_id] = {
                "log": log_id, "writer": w["server"] if w else None, "epoch": meta.epoch,
                "first": 0, "last": -1, "replicas": {},
                "segments": len(meta.segments),
            }
            last = meta.last_segment
            ensembles[log_id] = set(last.replicas) if last is not None else set()
        servers = sorted(self.servers().items())
        for (sid, _), logs in zip(servers, self.link.statuses([addr for _, addr in servers])):
            if isinstance(logs, Refusal):
                continue  # (it did not answer)
            for ls in logs:
                row = rows.get(ls.log_id)
                if row is None:
                    continue
                row["first"] = max(row["first"], ls.first)
                row["last"] = max(row["last"], ls.last)
                if sid in ensembles[ls.log_id]:  # the servers of its last segment (not those that left)
                    row["replicas"][sid] = ls.filled
        return [rows[k] for k in sorted(rows)]
