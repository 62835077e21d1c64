"""The checker accepts linearizable histories and rejects ones that are not."""

from __future__ import annotations

import random

from tests.linearizability import INF, Operation, check


def op(c: int, call: float, ret: float, kind: str, arg: object = None, out: object = None) -> Operation:
    return Operation(c, call, ret, kind, arg, out)


def test_sequential_history_is_linearizable() -> None:
    h = [op(0, 0, 1, "put", b"a"), op(0, 2, 3, "get", out=b"a"),
         op(0, 4, 5, "cas", (b"a", b"b"), True), op(0, 6, 7, "get", out=b"b")]
    assert check(h)


def test_stale_read_after_write_completed_is_rejected() -> None:
    h = [op(0, 0, 1, "put", b"a"), op(0, 2, 3, "put", b"b"), op(1, 4, 5, "get", out=b"a")]
    assert not check(h)


def test_concurrent_operations_may_go_either_way() -> None:
    h = [op(0, 0, 10, "put", b"a"), op(1, 1, 2, "get", out=None), op(2, 3, 4, "get", out=b"a")]
    assert check(h)
    # But once a read saw the new value, a later read may not see the old one.
    h.append(op(3, 5, 6, "get", out=None))
    assert not check(h)


def test_two_cas_from_absent_cannot_both_succeed() -> None:
    h = [op(0, 0, 5, "cas", (None, b"x"), True), op(1, 0, 5, "cas", (None, b"y"), True)]
    assert not check(h)
    h[1] = op(1, 0, 5, "cas", (None, b"y"), False)
    assert check(h)


def test_unknown_outcomes_may_apply_or_not() -> None:
    lost = op(0, 0, INF, "put", b"a")
    assert check([lost, op(1, 5, 6, "get", out=b"a")])
    assert check([lost, op(1, 5, 6, "get", out=None)])
    # ... but not take effect before they were called.
    assert not check([op(1, 0, 1, "get", out=b"a"), op(0, 2, INF, "put", b"a")])


def test_random_sequential_histories_pass_and_corrupted_ones_fail() -> None:
    rng = random.Random(7)
    for _ in range(50):
        state: bytes | None = None
        h = []
        t = 0.0
        for _ in range(30):
            kind = rng.choice(["put", "get", "cas", "delete"])
            v = bytes([rng.randrange(3)])
            if kind == "put":
                h.append(op(0, t, t + 1, "put", v))
                state = v
            elif kind == "delete":
                h.append(op(0, t, t + 1, "delete"))
                state = None
            elif kind == "get":
                h.append(op(0, t, t + 1, "get", out=state))
            else:
                ok = state == v
                h.append(op(0, t, t + 1, "cas", (v, b"n"), ok))
                state = b"n" if ok else state
            t += 2
        assert check(h)
        gets = [i for i, o in enumerate(h) if o.kind == "get"]
        if gets:
            i = rng.choice(gets)
            wrong = b"\xff"
            h[i] = op(0, h[i].call, h[i].ret, "get", out=wrong)
            assert not check(h)
