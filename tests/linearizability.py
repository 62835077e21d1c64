"""A linearizability checker for a single register per key (Wing & Gong's search with
memoization, as Porcupine does), used on histories recorded against a real cluster.

An operation is (call, return, kind, input, output). An operation whose outcome is unknown
(a timeout, a dropped connection) has return = inf: it may take effect at any point after
its call, or never; the search need not linearize it."""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import Any

INF = math.inf


@dataclass(frozen=True)
class Operation:
    client: int
    call: float
    ret: float  # INF: outcome unknown
    kind: str  # put | get | cas | delete
    arg: Any = None  # put: value; cas: (expected or None for absent, new value)
    out: Any = None  # get: value or None; cas: succeeded

    @property
    def known(self) -> bool:
        return self.ret != INF


def _step(state: bytes | None, op: Operation) -> tuple[bool, bytes | None]:
    """(is the op's output consistent with `state`, the state after it)."""
    if op.kind == "put":
        return True, op.arg
    if op.kind == "delete":
        return True, None
    if op.kind == "get":
        return (not op.known) or op.out == state, state
    if op.kind == "cas":
        expected, new = op.arg
        holds = state == expected
        if op.known and bool(op.out) != holds:
            return False, state
        return True, new if holds else state
    raise ValueError(op.kind)


def check(history: list[Operation], initial: bytes | None = None) -> bool:
    """True when some order of the operations, consistent with real time, explains every
    known output. Operations with unknown outcome may be placed anywhere after their call
    or left out."""
    ops = sorted(history, key=lambda o: o.call)
    n = len(ops)
    known_mask = sum(1 << i for i, o in enumerate(ops) if o.known)
    seen: set[tuple[int, bytes | None]] = set()
    sys.setrecursionlimit(max(10_000, 4 * n + 100))

    def search(done: int, state: bytes | None) -> bool:
        if done & known_mask == known_mask:
            return True
        key = (done, state)
        if key in seen:
            return False
        seen.add(key)
        # The earliest return among operations not yet placed bounds who may go next.
        horizon = min((ops[i].ret for i in range(n) if not done >> i & 1), default=INF)
        for i in range(n):
            if done >> i & 1:
                continue
            op = ops[i]
            if op.call > horizon:
                break  # sorted by call: nothing later may go first
            ok, nxt = _step(state, op)
            if ok and search(done | 1 << i, nxt):
                return True
        return False

    return search(0, initial)


def check_per_key(history: dict[Any, list[Operation]]) -> list[Any]:
    """Keys whose history is not linearizable."""
    return [k for k, h in history.items() if not check(h)]
