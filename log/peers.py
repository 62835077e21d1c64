"""The other replicas of this server's logs, as its writers reach them: a stub per peer
(its address read from ZooKeeper, forgotten when unreachable), Fence and ReadRange calls
whose replies go back into the writer's inbox, and one Outlet per replica that batches the
AddEntries of every log into one message (this server's own replica included, written
locally; a peer's sent on one long-lived stream, runtime/call_stream.py, which a watchdog
cancels when an answer is overdue). A spare follower's outlet lets entries linger to travel
together (log/spares.py decides which followers are spare). A lost message is resent by the
writer's tick. log/node.py builds one."""

from __future__ import annotations

import json
import logging
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

import grpc
from kazoo.client import KazooClient

from log import codec, limits, linger, spares
from log import zk as zkpaths
from log.driver import WriterDriver
from log.messages import AddEntries, Fence
from midtown_pb import log_pb2 as pb
from midtown_pb import log_pb2_grpc
from runtime import loops, transport, world
from runtime.call_stream import CallStream, StreamFailed, watch
from runtime.refusals import BadRequest

log = logging.getLogger("midtown.log.peers")
OUTLET_CALLS_IN_FLIGHT = 1  # 4 measured slower here: smaller batches, more calls
_POOL = world.Pool("local-replica", 8)


class Peers:
    def __init__(self, server_id: int, zk: KazooClient, local: Callable[[Any], Any],
                 local_batch: Callable[[list[Any]], list[Any]], stop: threading.Event,
                 spare_linger_s: float = spares.SPARE_LINGER_S) -> None:
        """`local`, `local_batch`: this server's own replica, for messages to itself;
        `spare_linger_s`: how long a spare follower's copies may wait (0: none waits)."""
        self.server_id = server_id
        self.zk = zk
        self._local = local
        self.local_batch = local_batch
        self.stop = stop
        self._stubs: dict[int, tuple[str, Any]] = {}
        self._lock = world.lock()
        self._outlets: dict[int, Outlet] = {}
        self.spare_linger_s = spare_linger_s
        self._answer_s: dict[int, float] = {}  # smoothed round trip of each peer's replies
        self._eager_now: dict[tuple[int, ...], frozenset[int]] = {}  # by a segment's followers
        loops.forever("replica-streams", lambda: watch(self._streams, stop), stop)

    def stub(self, server_id: int) -> Any:
        """The Replica stub of a server, its address read from ZooKeeper once (None: unknown)."""
        with self._lock:
            cached = self._stubs.get(server_id)
        if cached is None:
            try:
                data, _ = self.zk.get(f"{zkpaths.SERVERS}/{server_id}")
            except Exception:
                return None
            addr = json.loads(data)["addr"]
            ch = transport.channel(addr)
            cached = (addr, log_pb2_grpc.ReplicaStub(ch))
            with self._lock:
                self._stubs[server_id] = cached
        return cached[1]

    def forget(self, server_id: int) -> None:
        """Unreachable: it may have restarted on a new address; read it again next time."""
        with self._lock:
            self._stubs.pop(server_id, None)

    def send(self, driver: WriterDriver, to: int, msg: Any) -> None:
        """Deliver a writer's message to a replica (ourselves included); the reply goes
        back into the writer's inbox. A lost message is resent by the writer's tick.
        AddEntries travel through the destination's outlet, batched with other logs'."""
        if isinstance(msg, AddEntries):
            outlet = self._outlets.get(to)
            if outlet is None:
                with self._lock:
                    outlet = self._outlets.get(to)
                    if outlet is None:
                        outlet = self._outlets[to] = Outlet(self, to)
            outlet.put(driver, msg, self._eager(driver, to))
            return
        if to == self.server_id:
            _POOL.submit(lambda: driver.reply(to, msg, self._local(msg)))
            return
        stub = self.stub(to)
        if stub is None:
            return
        conv: Callable[[Any], Any]
        if isinstance(msg, Fence):
            call, req, conv = stub.Fence, codec.fence_to_pb(msg), codec.fence_reply_from_pb
        else:
            call, req, conv = stub.ReadRange, codec.read_to_pb(msg), codec.read_reply_from_pb
        fut = call.future(req, timeout=limits.REPLICA_RPC_TIMEOUT_S)

        def done(f: Any) -> None:
            try:
                rep = conv(f.result())
            except grpc.RpcError as e:
                if e.code() == grpc.StatusCode.UNAVAILABLE:
                    self.forget(to)  # it may have restarted on a new address
                return
            except BadRequest as e:  # as if it had not answered: the writer asks again
                log.warning("log server %d sent a reply that cannot be: %s", to, e)
                return
            driver.reply(to, msg, rep)

        fut.add_done_callback(done)

    def _eager(self, driver: WriterDriver, to: int) -> bool:
        """Whether `to` must have the writer's entries at once: this server's own copy, an
        eager follower (log/spares.py), anything while spares do not linger."""
        if to == self.server_id or not self.spare_linger_s:
            return True
        replicas = driver.core.replicas
        if to not in replicas:
            return True  # a recovering segment's replica
        followers = tuple(r for r in replicas if r != self.server_id)
        need = spares.followers_needed(replicas, self.server_id, driver.core.ack_quorum)
        now = world.monotonic()
        with self._lock:
            since = {f: o.waiting_since for f in followers if (o := self._outlets.get(f)) is not None}
            eager = self._eager_now[followers] = spares.eager(
                followers, need, self._answer_s, since, now, self._eager_now.get(followers, frozenset()))
        return to in eager

    def answered(self, to: int, took_s: float | None) -> None:
        """A peer's call came back after `took_s` (None: it failed)."""
        with self._lock:
            prev = self._answer_s.get(to)
            self._answer_s[to] = (max(prev or 0.0, spares.FAILED_RANK_S) if took_s is None
                                  else spares.smoothed(prev, took_s))

    def _streams(self) -> list[CallStream]:
        with self._lock:
            outlets = list(self._outlets.values())
        return [o.stream for o in outlets if o.stream is not None]

    def replicate_stream(self, outlet: Outlet, msgs: list[AddEntries]) -> list[Any] | None:
        """Send `msgs` on the outlet's stream to its peer (opened if it has none); their
        replies, or None when the stream failed (lost: the writers resend)."""
        stream = outlet.stream
        if stream is None or stream.closed:
            stub = self.stub(outlet.to)
            if stub is None:
                return None
            stream = outlet.stream = CallStream(stub.ReplicateStream, limits.REPLICA_RPC_TIMEOUT_S)
        try:
            rep = stream.call(pb.ReplicateRequest(requests=[codec.add_to_pb(m) for m in msgs]))
        except StreamFailed as e:
            if e.code == grpc.StatusCode.UNAVAILABLE:
                self.forget(outlet.to)  # it may have restarted on a new address
            return None
        return [codec.add_reply_from_pb(r) for r in rep.responses]


class Outlet:
    """Messages to one replica: whatever queues while a call is in flight goes in the next
    call, so one RPC and one synced write carry many appends of many logs. While only spare
    copies wait (log/spares.py), they wait up to the peers' spare linger for more."""

    def __init__(self, peers: Peers, to: int) -> None:
        self.peers = peers
        self.to = to
        # (writer, message, eager, when queued)
        self._q: deque[tuple[WriterDriver, AddEntries, bool, float]] = deque()
        self._eager = 0  # eager messages queued
        self._entries = 0  # entries queued
        self._cv = world.condition()
        self.waiting_since: float | None = None  # when the call in flight was sent
        self.stream: CallStream | None = None  # to a peer (runtime/call_stream.py)
        # Calls in flight per replica (the writer copes with replies in any order).
        for i in range(OUTLET_CALLS_IN_FLIGHT):
            world.spawn(f"outlet-{to}-{i}", self._run)

    def put(self, driver: WriterDriver, msg: AddEntries, eager: bool = True) -> None:
        with self._cv:
            first = not self._q
            self._q.append((driver, msg, eager, world.monotonic()))
            self._eager += eager
            self._entries += len(msg.entries)
            # Wake the thread for its first message, or to end a linger (not per spare copy).
            if first or eager or self._entries >= linger.LINGER_ENTRIES_MAX:
                self._cv.notify()

    def _take(self) -> list[tuple[WriterDriver, AddEntries]]:
        with self._cv:
            while not self._q:
                self._cv.wait(1.0)
                if self.peers.stop.is_set():
                    return []
            while not self.peers.stop.is_set():
                left = linger.linger_left(world.monotonic(), self._q[0][3], self.peers.spare_linger_s,
                                          self._entries, self._eager > 0)
                if left <= 0:
                    break
                self._cv.wait(left)
            items: list[tuple[WriterDriver, AddEntries]] = []
            n = 0
            while self._q and (not items or n + len(self._q[0][1].entries) <= limits.MESSAGE_ENTRIES_MAX * 4):
                driver, msg, eager, _ = self._q.popleft()
                n += len(msg.entries)
                self._eager -= eager
                self._entries -= len(msg.entries)
                items.append((driver, msg))
            return items

    def _run(self) -> None:
        while not self.peers.stop.is_set():
            items = self._take()
            if not items:
                continue
            msgs = [m for _, m in items]
            sent = self.waiting_since = world.monotonic()
            try:
                if self.to == self.peers.server_id:
                    replies: list[Any] | None = self.peers.local_batch(msgs)
                else:
                    replies = self.peers.replicate_stream(self, msgs)
            except Exception:
                log.exception("replicating to %d", self.to)
                replies = None
            self.waiting_since = None
            if self.to != self.peers.server_id:
                self.peers.answered(self.to, None if replies is None else world.monotonic() - sent)
            if replies is None:
                continue  # lost: the writers resend on their tick
            for (driver, msg), rep in zip(items, replies):
                driver.reply(self.to, msg, rep)
