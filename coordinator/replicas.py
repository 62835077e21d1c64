"""The storage nodes as a coordinator reaches them: the live members (looked up in
ZooKeeper at most once a second, the last list kept while ZooKeeper is away), one call to
one of them (through its link, coordinator/storage_link.py: directly when the node runs
in this process, the host layout; by gRPC otherwise), the first answer of any, the same
call to all of them at once, and a shard scan from the first node that can start one."""

from __future__ import annotations

import functools
import queue
from collections.abc import Callable, Collection, Iterator
from concurrent import futures
from typing import Any

import grpc
from kazoo.client import KazooClient

from catalog import failover, registry
from catalog.replica_sets import ReplicaSets
from coordinator import limits
from coordinator.checks import Code
from coordinator.storage_link import GrpcStorage, StorageLink
from fleet import machines
from fleet.connect import STALE_READ_WAIT_S, bounded
from midtown_pb import kv_pb2 as pb
from record.model import Behind
from runtime import membership, world
from runtime.refreshed import Refreshed
from runtime.refusals import BEHIND_TRAILER, BadRequest, Refusal, reason

_POOL = world.Pool("lww", limits.REPAIR_THREADS)


class Replicas:
    def __init__(self, zk: KazooClient, link: StorageLink | None = None) -> None:
        """`link`: the way to the storage nodes (coordinator/storage_link.py; gRPC by
        default, the storage node of this process directly in the host layout)."""
        self.zk = zk
        self.link: StorageLink = link or GrpcStorage()
        # Each registered node's entry: its address, and in the host layout the log server
        # beside it ("log").
        # Read again (a request's thread waits) with a short bound on ZooKeeper's answers.
        quick = bounded(zk, STALE_READ_WAIT_S)
        self._entries: Refreshed[dict[int, Any]] = Refreshed(
            lambda: membership.children_json(self.zk, registry.STORAGE_NODES), limits.MEMBERS_CACHE_S,
            initial={}, reload=lambda: membership.children_json(quick, registry.STORAGE_NODES))
        self._sets: Refreshed[ReplicaSets | None] = Refreshed(
            lambda: self._read_sets(self.zk), limits.MEMBERS_CACHE_S, initial=None,
            reload=lambda: self._read_sets(quick))
        # Storage nodes a fail-over condemned (catalog/failover.py), read with the sets: they
        # are left out of the members, so neither a read nor an answer is taken from one
        # whose state is not the log's (it may hold entries past a cut) until it took a copy.
        self.condemned: frozenset[int] = frozenset()

        # Each storage node's data center, as its machine recorded it ("" for none).
        # First read on a caller's path (a bounded read) too: bounded, as the reloads.
        self._dcs: Refreshed[dict[int, str]] = Refreshed(
            lambda: self._read_dcs(quick), limits.MEMBERS_CACHE_S, initial={})

    def data_centers(self, dc: str = "") -> dict[int, str]:
        """Each storage node's data center as last read ("" for none); with `dc` (a
        caller's), BadRequest when no node names it while some name one."""
        try:
            dcs = self._dcs.get()
        except Exception:  # ZooKeeper unavailable: the last ones read
            dcs = self._dcs.last()
        if dc:
            check_dc(dcs, dc)
        return dcs

    @staticmethod
    def _read_dcs(zk: KazooClient) -> dict[int, str]:
        return {n: d.dc for n, d in machines.recorded(zk, machines.STORAGE_NODES).items()}

    def _read_sets(self, zk: KazooClient) -> ReplicaSets | None:
        kv = registry.read_kv(zk)
        if kv is None:
            return None
        self.condemned = frozenset(failover.condemned(kv.failovers))
        return registry.read_replica_sets(zk, kv)

    def sets(self) -> ReplicaSets | None:
        """Each shard's replica set as last read (None: not read yet, or every member holds
        every shard)."""
        try:
            got = self._sets.get()
        except Exception:  # ZooKeeper unavailable: the last ones read
            got = self._sets.last()
        return got if got is not None and got.version >= 0 else None

    def holders(self, shard: int) -> dict[int, str]:
        """The live storage nodes that hold `shard`, id -> address (every live member when
        every member holds every shard)."""
        live = self.members_or_last()
        sets = self.sets()
        if sets is None or shard >= len(sets.sets):
            return live
        return {n: a for n, a in live.items() if n in sets.of(shard)}

    def copies(self, shard: int) -> int:
        """How many storage nodes hold `shard`, up or not (eventual datasets' quorums); 0
        when every member holds every shard."""
        sets = self.sets()
        return 0 if sets is None or shard >= len(sets.sets) else len(sets.of(shard))

    def members(self) -> dict[int, str]:
        """Registered storage nodes by id, looked up in ZooKeeper at most once a second (by
        one request; the others meanwhile take the last list); not those condemned."""
        return self._not_condemned(_addrs(self._entries.get()))

    def members_or_last(self) -> dict[int, str]:
        return self._not_condemned(_addrs(self._entries_or_last()))

    def _not_condemned(self, members: dict[int, str]) -> dict[int, str]:
        out = self.condemned
        return {n: a for n, a in members.items() if n not in out} if out else members

    def _entries_or_last(self) -> dict[int, Any]:
        try:
            return self._entries.get()
        except Exception:  # ZooKeeper unavailable: the last ones seen
            return self._entries.last()

    def beside(self, log_addr: str | None) -> str | None:
        """The address of the storage node in the process of the log server at `log_addr`
        (the host layout), if one is registered."""
        if log_addr is None:
            return None
        return next((e["addr"] for e in self._entries_or_last().values()
                     if isinstance(e, dict) and e.get("log") == log_addr and isinstance(e.get("addr"), str)),
                    None)

    def call(self, addr: str, method: str, req: Any, timeout_s: float) -> Any:
        """A Storage call, through the link (directly when the node runs in this process)."""
        return self.link.call(addr, method, req, timeout_s)

    def stream(self, addr: str, method: str, req: Any, timeout_s: float) -> tuple[Iterator[Any], Any]:
        """A Storage stream (its messages, and its gRPC call to cancel, None in process)."""
        return self.link.stream(addr, method, req, timeout_s)

    def first_answer(self, method: str, req: Any, timeout_s: float, shard: int, dc: str = "",
                     prefer: str = "") -> Any:
        """The answer of the first storage node holding `shard` that gives one (None: none
        did), those in data center `dc` asked first (the caller's: one no node names is
        refused), or else in `prefer` (the coordinator's own, where the reads of a strong
        read's round go first: the replica beside it answers soonest; none is refused). A
        refusal that another node would give too reaches the client as it came
        (refused_by_all)."""
        order = self._order(shard)
        if dc or prefer:
            try:
                near = self.near(shard, dc or prefer)
            except BadRequest:
                if dc:
                    raise
                near = []  # no storage node in the coordinator's data center
            order = near + [a for a in order if a not in near]
        for addr in order:
            try:
                return self.call(addr, method, req, timeout_s)
            except (grpc.RpcError, Refusal) as e:
                refused_by_all(e)
                continue
        return None

    def fan_out(self, method: str, req: Any, deadline_s: float, need: int,
                shard: int, counted: Collection[str] | None = None) -> list[tuple[str, Any]]:
        """Send to every live replica of `shard` at once; the answers until `need` of them
        came from `counted` (None: from any), or all there are."""
        calls = {_POOL.submit(self.call, a, method, req, deadline_s): a
                 for a in self.holders(shard).values()}
        ok: list[tuple[str, Any]] = []
        got = 0
        try:
            for f in world.as_completed(calls, timeout=deadline_s):
                try:
                    ok.append((calls[f], f.result()))
                except Exception:
                    continue
                got += counted is None or calls[f] in counted
                if got >= need:
                    break
        except futures.TimeoutError:
            pass
        return ok

    def send(self, addr: str, method: str, req: Any, timeout_s: float) -> None:
        """A call whose answer nobody waits for (a read repair), in the background."""
        _POOL.submit(self.call, addr, method, req, timeout_s)

    def scan_shard(self, req: pb.StorageScanShardRequest, deadline_s: float,
                   node: int | None = None) -> Iterator[pb.ScanShardResponse]:
        """A shard scan from the first storage node that starts one (it has applied the
        shard's log up to req.min_position); its first message is taken here, so a node that
        cannot serve is passed over and the stream never starts half-way on another. `node`:
        the one holding the view a cursor names, which alone can go on with it."""
        if node is None:
            addrs = self._order(req.shard)
        else:
            addr = self.members_or_last().get(node)
            if addr is None:
                raise Refusal(Code.FAILED_PRECONDITION, f"token: storage node {node}, which holds the "
                            "scan's view, is not serving; start the scan again")
            addrs = [addr]
        for addr in addrs:
            try:
                it, _ = self.stream(addr, "ScanShard", req, deadline_s)
                first = next(it, None)
            except (grpc.RpcError, Refusal) as e:
                refused_by_all(e)
                continue
            return _stream_from(first, it)
        raise Refusal(Code.UNAVAILABLE, "no storage node could scan the shard; retry")

    def watch(self, req: pb.StorageWatchRequest, deadline_s: float, active: Callable[[], bool],
              prefer: Callable[[int], str | None] = lambda _: None) -> Iterator[pb.WatchResponse]:
        """The changes of req's shards from one replica of each (`prefer(shard)` first, if
        it holds the shard, then the one in this process), one stream per storage node,
        relayed as they come. Each stream's first
        message is taken here, so a refusal (a position no longer held) reaches the client
        as its status, and a replica that cannot start is passed over. If one stream fails
        later, the watch ends UNAVAILABLE: the client goes on from the positions it got.
        Ends once a stream has ended (their duration, or a node stopping: the client then
        starts again for every shard), or `active()` turns false."""
        streams: list[tuple[Iterator[pb.WatchResponse], Any]] = []
        try:
            for _, it, call in self._watch_streams(req, deadline_s, prefer):
                streams.append((it, call))
        except BaseException:
            _cancel_all(streams)
            raise
        # First, every shard's start: a client that resumes after this message alone
        # knows where each shard stands ("now" is fixed here).
        return _chain(pb.WatchResponse(positions=dict(getattr(req, "from"))), _merged(streams, active))

    def _watch_streams(self, req: pb.StorageWatchRequest, deadline_s: float,
                       prefer: Callable[[int], str | None]) -> Iterator[tuple[dict[int, int], Iterator[Any],
                                                                             Any]]:
        """(shards and positions, the stream with its first message first, its call) per
        storage node, the shards spread over their replicas."""
        left = dict(getattr(req, "from"))
        tried: dict[int, set[str]] = {s: set() for s in left}
        while left:
            groups: dict[str, dict[int, int]] = {}
            for shard, at in left.items():
                first = prefer(shard)
                addrs = [a for a in self._order(shard) if a not in tried[shard]]
                addrs.sort(key=lambda a: a != first)
                if not addrs:
                    raise Refusal(Code.UNAVAILABLE, f"no storage node could stream shard {shard}'s changes; "
                                "retry")
                groups.setdefault(addrs[0], {})[shard] = at
            for addr, starts in groups.items():
                sub = pb.StorageWatchRequest()
                sub.CopyFrom(req)
                sub.ClearField("from")
                getattr(sub, "from").update(starts)
                sub.ClearField("logs")
                sub.logs.update({x: lg for x, lg in req.logs.items() if x in starts})
                try:
                    it, call = self.stream(addr, "Watch", sub, deadline_s)
                    first = next(it, None)
                except (grpc.RpcError, Refusal) as e:
                    refused_by_all(e)
                    for shard in starts:
                        tried[shard].add(addr)
                    continue
                for shard in starts:
                    del left[shard]
                yield starts, _chain(first, it), call

    def near(self, shard: int, dc: str) -> list[str]:
        """Live storage nodes holding `shard` in data center `dc`, to read from in this order
        (the one in this process first); with no `dc`, or in a cluster whose nodes name no
        data center, every holder. A `dc` no node names is refused (BadRequest)."""
        if not dc:
            return self._order(shard)
        dcs = self.data_centers()  # (first: what the simulation's seeds were found with)
        return in_dc(self._order(shard), self.holders(shard), dcs, dc)

    def _order(self, shard: int) -> list[str]:
        """Live storage nodes holding `shard` to read from: the one in this process first,
        then the others in random order."""
        nodes = list(self.holders(shard).values())
        world.shuffle(nodes)
        nodes.sort(key=lambda a: not self.link.near(a))
        return nodes


def check_dc(dcs: dict[int, str], dc: str) -> bool:
    """Whether the storage nodes name data centers (`dcs`: node id -> its own, "" for none);
    BadRequest naming header.dc when they do and none is `dc`."""
    known = sorted({x for x in dcs.values() if x})
    if known and dc not in known:
        raise BadRequest(f"header.dc: no storage node in data center {dc!r}; the cluster's: "
                         f"{', '.join(known)}")
    return bool(known)


def in_dc(order: list[str], holders: dict[int, str], dcs: dict[int, str], dc: str) -> list[str]:
    """Of `order` (addresses of `holders`, node id -> address), those whose node is in data
    center `dc` by `dcs` (node id -> its data center, "" for none), in order; all of them
    when no node names a data center. A `dc` that no node names is refused, naming them."""
    if not check_dc(dcs, dc):
        return order
    node_of = {a: n for n, a in holders.items()}
    return [a for a in order if dcs.get(node_of.get(a, -1), "") == dc]


# What a storage node's failure means for the other replicas: it is down, slow, shedding
# load or not caught up (Behind) -- another may answer. Any other refusal is about the
# request or the shard's state, which every replica shares: no replica, and no retry, can
# do better, so the client gets it with its code and reason.
_ANOTHER_MAY = {Code.UNAVAILABLE, Code.DEADLINE_EXCEEDED, Code.CANCELLED, Code.RESOURCE_EXHAUSTED,
                Code.UNKNOWN, Code.INTERNAL}


def refused_by_all(e: grpc.RpcError | Refusal) -> None:
    """Raise `e` as the client's refusal unless another storage node may answer instead
    (a remote node's status, or the Refusal a node in this process raised)."""
    if isinstance(e, Behind):
        return
    if isinstance(e, grpc.RpcError):
        trailers = getattr(e, "trailing_metadata", lambda: None)()
        if e.code() in _ANOTHER_MAY or reason(trailers) == BEHIND_TRAILER[1]:
            return
        raise Refusal(e.code(), e.details() or e.code().name) from None
    raise e


def _chain(first: Any, rest: Iterator[Any]) -> Iterator[Any]:
    if first is not None:
        yield first
    yield from rest


def _cancel_all(streams: list[tuple[Iterator[Any], Any]]) -> None:
    for _, call in streams:
        if call is not None:
            call.cancel()


def _merged(streams: list[tuple[Iterator[pb.WatchResponse], Any]],
            active: Callable[[], bool]) -> Iterator[pb.WatchResponse]:
    """Each stream's messages as they come (a thread per stream, a bounded queue between),
    until one ends (then the whole ends) or fails (then the whole fails, UNAVAILABLE)."""
    q: queue.Queue[tuple[str, Any]] = world.queue(limits.WATCH_QUEUE_MAX)
    stop = world.event()

    def pump(it: Iterator[pb.WatchResponse]) -> None:
        def put(item: tuple[str, Any]) -> None:
            while not stop.is_set():
                try:
                    q.put(item, timeout=0.2)
                    return
                except queue.Full:
                    continue
        try:
            for m in it:
                if stop.is_set():
                    return
                put(("message", m))
            put(("end", None))
        except Exception as e:
            put(("failed", e))

    for it, _ in streams:
        world.spawn("watch-relay", functools.partial(pump, it))
    try:
        while True:
            try:
                kind, got = q.get(timeout=1.0)
            except queue.Empty:
                if not active():
                    return
                continue
            if kind == "message":
                yield got
            elif kind == "end":
                # One stream ended (its duration, or its node stopping): the watch ends, and
                # the client starts the next from its positions, for every shard at once.
                return
            else:
                if isinstance(got, Refusal) and got.code == Code.OUT_OF_RANGE:
                    raise got
                why = got.code().name if isinstance(got, grpc.RpcError) else str(got)
                if isinstance(got, grpc.RpcError) and got.code() == Code.OUT_OF_RANGE:
                    raise Refusal(Code.OUT_OF_RANGE, got.details() or why)
                raise Refusal(Code.UNAVAILABLE, f"a storage node stopped streaming changes ({why}); "
                            "watch again from the positions received")
    finally:
        stop.set()
        _cancel_all(streams)


def _stream_from(first: Any, rest: Iterator[Any]) -> Iterator[Any]:
    if first is not None:
        yield first
    try:
        yield from rest
    except grpc.RpcError as e:  # the replica went away mid-stream: the caller starts again
        raise Refusal(Code.UNAVAILABLE, f"the storage node stopped answering ({e.code().name}); "
                    "scan the shard again") from None


def _addrs(entries: dict[int, Any]) -> dict[int, str]:
    """Registered storage nodes' addresses by id, from their registry entries."""
    return {i: e["addr"] for i, e in entries.items()
            if isinstance(e, dict) and isinstance(e.get("addr"), str)}
