"""Placements (midtown/placements.py) and balancing (midtown/balancing.py): the worked
examples of the Husky design, properties with hypothesis, hand-worked balancing cases."""

from __future__ import annotations

import subprocess
import sys

from hypothesis import given
from hypothesis import strategies as st

from midtown.balancing import autoshard, balance, shard_loads, variance
from midtown.placements import Settings, choose_shards, first_shard, route_in


def test_the_worked_examples() -> None:
    assert choose_shards(2, 3, 8) == [2, 3, 4]
    assert choose_shards(2, 4, 8) == [2, 3, 4, 5]
    assert choose_shards(7, 2, 8) == [7, 0]
    assert choose_shards(7, 2, 10) == [7, 8]
    ex = frozenset({3, 7})
    assert choose_shards(2, 3, 10, ex) == [2, 4, 5]
    assert choose_shards(2, 4, 10, ex) == [2, 4, 5, 6]
    assert choose_shards(7, 2, 10, ex) == [8, 9]


@given(first=st.integers(0, 63), count=st.integers(1, 16), total=st.integers(16, 64))
def test_growing_the_count_keeps_the_shards_and_adds_one(first: int, count: int, total: int) -> None:
    first %= total
    count = min(count, total - 1)
    a, b = choose_shards(first, count, total), choose_shards(first, count + 1, total)
    assert b[:count] == a and len(set(b) - set(a)) == 1


@given(tenants=st.lists(st.text(min_size=1, max_size=8), min_size=5, max_size=40, unique=True),
       total=st.integers(8, 200), count=st.integers(1, 4))
def test_growing_the_total_moves_few_tenants(tenants: list[str], total: int, count: int) -> None:
    """Consistent hashing's promise, loosely: one more shard moves few placements' first shard
    (with mod-N hashing, any total change moves most of them; this bounds how the shards
    after the first move: they follow the first)."""
    for t in tenants:
        before = choose_shards(first_shard(t, 0, total), count, total)
        after = choose_shards(first_shard(t, 0, total), count, total + 1)
        # With the first shard unchanged, at most the wrap-around shard differs.
        assert len(set(after) - set(before)) <= 1


@given(first=st.integers(0, 31), count=st.integers(1, 8), victim=st.integers(0, 31))
def test_excluding_a_shard_relocates_only_that_one(first: int, count: int, victim: int) -> None:
    total = 32
    a = choose_shards(first, count, total)
    b = choose_shards(first, count, total, frozenset({victim}))
    assert victim not in b and len(b) == len(a)
    assert set(a) - set(b) <= {victim} and len(set(b) - set(a)) <= 1


def test_the_same_inputs_give_the_same_placement_everywhere() -> None:
    """No per-process hash seed: another interpreter computes the same shards and routes."""
    code = ("from midtown.placements import first_shard, route_in;"
            "print(first_shard('acme', 3, 64), route_in('evt-1', [4, 9, 17]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONHASHSEED": "123"}).stdout.split()
    assert [int(x) for x in out] == [first_shard("acme", 3, 64), route_in("evt-1", [4, 9, 17])]


@given(st.text(min_size=1), st.lists(st.integers(0, 99), min_size=1, max_size=8))
def test_an_event_always_lands_on_the_same_shard(event_id: str, shards: list[int]) -> None:
    assert route_in(event_id, shards) == route_in(event_id, list(shards)) in shards


def test_autoshard_goes_up_at_once_and_down_slowly() -> None:
    cur = {"a": 2, "b": 4, "c": 1}
    got = autoshard({"a": 900, "b": 100, "c": 0}, cur, bytes_per_shard=100, max_count=8)
    assert got == {"a": 8, "b": 3, "c": 1}  # a: 9 needed, capped at 8; b: down one step; c: floor
    assert autoshard({"a": 150}, {"a": 1}, 100) == {"a": 2}


def test_balancing_moves_a_tenant_off_the_hot_shard_and_lowers_the_variance() -> None:
    # Hand-worked: 4 shards, one shard per tenant. Salts chosen so that a and b share a shard.
    s = Settings(total_shards=4, default_count=1)
    salts = {}
    for t in ("a", "b", "c", "d"):
        salts[t] = 0
    s = Settings(4, s.placement_ms, 1, (), {}, salts)
    loads = {"a": 10.0, "b": 10.0, "c": 1.0, "d": 1.0}
    before = variance(shard_loads(s, loads))
    moves, after = balance(s, loads, max_moves=2)
    assert variance(shard_loads(after, loads)) <= before
    for m in moves:
        assert m.new_salt != m.old_salt
    # A perfectly balanced layout is left alone.
    even = Settings(4, s.placement_ms, 4, (), {}, {})
    assert balance(even, {"a": 5.0, "b": 5.0})[0] == []


def test_balancing_a_hand_worked_case() -> None:
    """Two heavy tenants on the same single shard, two empty shards: the balancer moves
    one of them to an empty shard, and the variance falls from 50 to 0 for the heavy pair."""
    s = Settings(2, 3_600_000, 1, (), {}, {})
    loads = {"x": 10.0, "y": 10.0}
    # Find salts that put x and y on the same shard, then balance.
    sx = first_shard("x", 0, 2)
    salt_y = next(k for k in range(100) if first_shard("y", k, 2) == sx)
    s = Settings(2, 3_600_000, 1, (), {}, {"x": 0, "y": salt_y})
    assert variance(shard_loads(s, loads)) == 100.0  # loads 20 and 0
    moves, after = balance(s, loads, max_moves=1)
    assert len(moves) == 1 and variance(shard_loads(after, loads)) == 0.0
