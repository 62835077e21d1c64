"""The mover of catalog/shard_moves.py: drives a move of a shard's replica to another
storage node through its phases (a copy taken in by the destination, its tail caught up,
the destination joining the replica set, the leaving replica going once the destination
has passed the point it joined at). It keeps nothing of its own: every step is a versioned
write in ZooKeeper, so a move left half-way (its mover killed, paused past its session, or
out of time) is taken up by any mover after it. `midtown shard move`, `cluster rebalance`
and `node decommission` run it (cli/shards.py), and the seeded simulation
(tests/sim/nodes.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from catalog import registry, replica_sets, shard_moves
from fleet import failure_domains
from midtown_pb import kv_pb2 as pb
from runtime import membership, world
from runtime.stubs import Calls

POLL_S = 0.2
STATUS_TIMEOUT_S = 5.0  # a node's Status call, within the move's --timeout


class MoveError(Exception):
    """A move that cannot go on as asked; the text names the argument at fault."""


def check_rule(zk: Any, copies: tuple[int, ...], shard: int, dest: int, leaving: int | None) -> None:
    """MoveError naming --to when a move of `shard` to `dest` would put two of its copies on
    one machine (fleet/failure_domains.py), unless the cluster runs on one machine, or take
    a copy out of its data center."""
    where, one = registry.placement_rule(zk)
    why = against_rule(copies, shard, dest, leaving, where, one)
    if why is not None:
        raise MoveError(why)


def against_rule(copies: tuple[int, ...], shard: int, dest: int, leaving: int | None,
                 where: failure_domains.Domains, one_machine: bool) -> str | None:
    """Why a move of `shard` (its `copies`) to `dest` from `leaving` breaks the placement
    rule, naming --to; None when it keeps it."""
    if failure_domains.allowed(copies, dest, leaving, where, one_machine) or dest in copies:
        return None
    if leaving is not None and not failure_domains.keeps_data_center(dest, leaving, where):
        here = where(leaving).dc
        return (f"--to: storage node {dest} is in data center {where(dest).dc!r}, and the copy leaves "
                f"{here!r} (node {leaving}): a copy stays in its data center, so each keeps the data; "
                f"choose a node in {here!r}")
    machine = where(dest).machine
    beside = [c for c in copies if c != leaving and where(c).machine == machine]
    return (f"--to: storage node {dest} runs on machine {machine!r}, which holds shard {shard}'s copy on "
            f"node {', '.join(map(str, beside))} already: two copies on one machine are lost together; "
            "choose a node on another machine")


def move(zk: Any, kv: registry.KvTopology, shard: int, dest: int, leaving: int | None, rate_mb_s: float,
         timeout_s: float, progress: Callable[[str], None], calls: Calls) -> dict[str, Any]:
    """Drive a move of `shard` to `dest` (from `leaving`) to its end, or take up the one
    under way; a dict of what it did. MoveError when it cannot, naming the argument.
    `calls`: the way to the storage nodes (runtime/stubs.py)."""
    deadline = world.monotonic() + timeout_s
    t0 = world.monotonic()
    out: dict[str, Any] = {"shard": shard, "to": dest, "from": leaving}
    started = False
    said = ""
    while True:
        if world.monotonic() >= deadline:
            raise MoveError(f"the move did not end within --timeout {timeout_s:g}s (it stands at "
                           f"{said or 'its start'}); run the same command again to go on")
        got = registry.read_moves(zk).get(shard)
        if started and (got is None or (got[0].dest, got[0].leaving) != (dest, leaving)):
            # it ended (by us, or by another mover that took it up), and perhaps the shard's
            # next move began since
            sets = registry.read_replica_sets(zk, kv)
            out.update(replicas=list(sets.of(shard)), seconds=round(world.monotonic() - t0, 3))
            return out
        if got is None:
            sets = registry.read_replica_sets(zk, kv)
            if sets.version < 0:
                raise MoveError(f"this cluster has no replica sets: its {len(kv.storage_nodes)} storage "
                               f"nodes hold every shard, as it has {kv.replicas} replicas of each "
                               "(midtown node add places the shards when it grows past that)")
            if dest not in kv.storage_nodes:
                raise MoveError(f"--to: storage node {dest} is not a member (midtown node add {dest})")
            check_rule(zk, sets.of(shard), shard, dest, leaving)
            try:
                m = shard_moves.start(sets.of(shard), shard, dest, leaving)
            except ValueError as e:
                raise MoveError(f"--{e}") from None
            if leaving is not None and len(sets.of(shard)) <= 1:
                raise MoveError(f"--from: node {leaving} is the shard's only replica")
            try:
                registry.start_move(zk, m, sets.version)
            except (NodeExistsError, BadVersionError):
                continue  # another mover started one first, or changed the sets: look again
            except registry.Conflict as e:
                raise MoveError(str(e)) from None
            started = True
            continue
        m, version = got
        if (m.dest, m.leaving) != (dest, leaving):
            raise MoveError(f"SHARD: a move of shard {shard} to node {m.dest}"
                           + (f" from node {m.leaving}" if m.leaving is not None else "")
                           + f" is under way ({m.phase}); finish it with the same arguments, or give it up "
                           f"(before it joins) with: midtown shard abort {shard}")
        started = True
        if m.phase != said:
            progress(f"shard {shard}: {m.phase}")
            said = m.phase
        try:
            if m.phase == shard_moves.COPYING:
                resp = _copy(zk, shard, dest, leaving, rate_mb_s, deadline, calls)
                if resp is None:
                    _pause(POLL_S * 5, deadline)
                    continue
                # A copy installed by an earlier call, on a node restarted since: not known.
                known = not resp.installed_before or bool(resp.source)
                out.update(copied_keys=resp.keys if known else None,
                           copied_bytes=resp.bytes if known else None, copy_source=resp.source or None,
                           copy_seconds=round(world.monotonic() - t0, 3), copied_at=resp.position)
                if resp.keys:
                    progress(f"shard {shard}: copied {resp.keys} keys, {resp.bytes} bytes from {resp.source}")
                registry.update_move(zk, shard_moves.copied(m, resp.position), version)
            elif m.phase == shard_moves.TAILING:
                sets = registry.read_replica_sets(zk, kv)
                new = replica_sets.with_set(sets, shard, shard_moves.joined_sets(sets.of(shard), m))
                registry.change_sets(zk, new, f"move of shard {shard}: node {dest} joins",
                                     (shard_moves.joined(m), version))
            elif m.phase == shard_moves.JOINED:
                if not shard_moves.may_finish(m, _positions(zk, kv, shard, (dest, leaving), calls, deadline)):
                    _pause(POLL_S, deadline)
                    continue
                sets = registry.read_replica_sets(zk, kv)
                new = replica_sets.with_set(sets, shard, shard_moves.finished_sets(sets.of(shard), m))
                registry.change_sets(zk, new, f"move of shard {shard} to node {dest}: done"
                                     + (f", node {leaving} leaves" if leaving is not None else ""),
                                     (shard_moves.finished(m), version))
        except (BadVersionError, NoNodeError):
            continue  # another mover moved it on, or finished it: look again


def _copy(zk: Any, shard: int, dest: int, leaving: int | None, rate_mb_s: float, deadline: float,
          calls: Calls) -> Any:
    """Ask the destination to take the copy in (None: not now, try again)."""
    addr = membership.members(zk, registry.STORAGE_NODES).get(dest)
    if addr is None:
        return None  # the destination is down: wait for it (or abort the move)
    req = pb.CopyShardRequest(shard=shard, rate_mb_s=rate_mb_s,
                              prefer_source=leaving if leaving is not None else -1)
    left = deadline - world.monotonic()
    if left <= 0:
        return None  # out of time: the loop says so
    try:
        return calls.call(addr, "CopyShard", req, left)
    except grpc.RpcError as e:
        if e.code() != grpc.StatusCode.FAILED_PRECONDITION:
            return None
        got = registry.read_moves(zk).get(shard)
        if got is None or got[0].phase != shard_moves.COPYING:
            return None  # another mover took the move on meanwhile (the destination joined): look again
        raise MoveError(f"storage node {dest} refused the copy: {e.details()}") from None


def _pause(seconds: float, deadline: float) -> None:
    """Sleep `seconds`, but not past `deadline` (world.monotonic)."""
    world.sleep(max(0.0, min(seconds, deadline - world.monotonic())))


def _positions(zk: Any, kv: registry.KvTopology, shard: int, nodes: tuple[int, int | None],
               calls: Calls, deadline: float) -> dict[int, int]:
    """Each of `nodes`' position in the shard's log, from those that answer by `deadline`."""
    live = membership.members(zk, registry.STORAGE_NODES)
    lg = registry.read_log_map(zk, kv).log_of(shard)
    out = {}
    for n in nodes:
        left = min(STATUS_TIMEOUT_S, deadline - world.monotonic())
        if n is None or n not in live or left <= 0:
            continue
        try:
            st = calls.call(live[n], "Status", pb.NodeStatusRequest(), left)
            out[n] = int(st.log_positions[lg])
        except (grpc.RpcError, IndexError):
            continue
    return out
