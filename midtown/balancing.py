"""Keeping placement shards balanced: pure functions, their inputs observed elsewhere.

* `autoshard`: from each tenant's bytes over a recent interval, its shard count for the next
  placements: up at once on a burst, down one step at a time, within limits.
* `balance`: from each tenant's load and where its shards are, move tenants off the most
  loaded shard by changing their salt, each move chosen by the lowest resulting population
  variance of load per shard, at most N moves."""

from __future__ import annotations

from dataclasses import dataclass

from midtown.placements import Settings


def autoshard(bytes_by_tenant: dict[str, int], current: dict[str, int], bytes_per_shard: int,
              min_count: int = 1, max_count: int = 16) -> dict[str, int]:
    """Each tenant's shard count for the next placements: enough shards that none takes
    more than `bytes_per_shard`; up at once, down by one step per run (a burst that ends
    does not shrink a tenant at once), never outside [min_count, max_count]."""
    assert bytes_per_shard > 0 and 1 <= min_count <= max_count
    out = {}
    for tenant in sorted(set(bytes_by_tenant) | set(current)):
        need = -(-bytes_by_tenant.get(tenant, 0) // bytes_per_shard)  # ceiling
        need = max(min_count, min(max_count, need))
        cur = current.get(tenant, min_count)
        out[tenant] = need if need >= cur else max(need, cur - 1)
    return out


def shard_loads(settings: Settings, load_by_tenant: dict[str, float]) -> dict[int, float]:
    """Load per shard: each tenant's load spread evenly over its shards."""
    loads = {s: 0.0 for s in range(settings.total_shards) if s not in settings.exclusions}
    for tenant, load in load_by_tenant.items():
        shards = settings.shards_for(tenant)
        for s in shards:
            loads[s] = loads.get(s, 0.0) + load / len(shards)
    return loads


def variance(loads: dict[int, float]) -> float:
    """Population variance of load per shard."""
    xs = list(loads.values())
    if not xs:
        return 0.0
    mean = sum(xs) / len(xs)
    return sum((x - mean) ** 2 for x in xs) / len(xs)


@dataclass(frozen=True)
class Move:
    tenant: str
    old_salt: int
    new_salt: int
    variance_after: float


def balance(settings: Settings, load_by_tenant: dict[str, float], max_moves: int = 3,
            salts_tried: int = 32) -> tuple[list[Move], Settings]:
    """Up to `max_moves` moves, each of a tenant on the most loaded shard to a new salt,
    the one (tenant, salt) that leaves the lowest variance; stops when no move lowers it.
    Deterministic: ties go to the first tenant in name order, the lowest salt."""
    moves: list[Move] = []
    s = settings
    for _ in range(max_moves):
        loads = shard_loads(s, load_by_tenant)
        if not loads:
            break
        before = variance(loads)
        hottest = max(sorted(loads), key=lambda k: loads[k])
        best: tuple[float, str, int] | None = None
        for tenant in sorted(load_by_tenant):
            if hottest not in s.shards_for(tenant):
                continue
            old = s.salt_of(tenant)
            for salt in range(old + 1, old + 1 + salts_tried):
                trial = Settings(s.total_shards, s.placement_ms, s.default_count, s.exclusions, s.counts,
                                 {**s.salts, tenant: salt})
                v = variance(shard_loads(trial, load_by_tenant))
                if best is None or v < best[0]:
                    best = (v, tenant, salt)
        if best is None or best[0] >= before:
            break
        v, tenant, salt = best
        moves.append(Move(tenant, s.salt_of(tenant), salt, v))
        s = Settings(s.total_shards, s.placement_ms, s.default_count, s.exclusions, s.counts,
                     {**s.salts, tenant: salt})
    return moves, s
