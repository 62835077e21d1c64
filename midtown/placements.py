"""Time-bounded shard placements (Datadog Husky's design), allocated on Midtown itself.

Multi-tenant pipelines route each tenant's events to a few ingestion shards, so that every
writer handles few tenants and deduplicates within its own shards. A *placement* says, for
a tenant and a time range, which shards: immutable once created, created on first request
with insert-if-absent in a Midtown dataset, so every caller on every machine gets the same
answer, forever; cached in memory once read (it never changes).

Choosing shards is consistent hashing (placements change little from one range to the next):
the first shard is H(tenant + salt) mod total; the next count - 1 follow it in order,
skipping excluded shards, wrapping at the end. The settings (per-tenant count and salt, the
total shard count, the placement length, the exclusions) are kept in Midtown too; a change
applies from the next placement on.

    from midtown import Client
    from midtown.placements import Placements
    p = Placements(Client(zk=ZK))            # dataset "placements" (created if missing)
    shard = p.route("acme", event_id, ts_ms)  # the same event always lands on the same shard

Pure parts (choose_shards, first_shard, route_in) are plain functions; docs/placements.md."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any

from runtime import world

DATASET_DEFAULT = "placements"
SETTINGS_PARTITION = b"settings"
PLACEMENT_MS_DEFAULT = 3_600_000  # an hour per placement
TOTAL_SHARDS_DEFAULT = 64
COUNT_DEFAULT = 2


def _h(b: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(b, digest_size=8).digest(), "big")


def first_shard(tenant: str, salt: int, total: int) -> int:
    """H(tenant + salt) mod total: the same on every machine and every run (no per-process
    hash seed)."""
    assert total >= 1
    return _h(f"{tenant}\x00{salt}".encode()) % total


def choose_shards(first: int, count: int, total: int,
                  excluded: frozenset[int] | set[int] = frozenset()) -> list[int]:
    """`count` shards from `first` on, in order, skipping excluded ones, wrapping at the end
    (fewer if fewer are not excluded). If `first` itself is excluded, the walk starts at the
    next allowed one."""
    assert total >= 1 and 0 <= first < total and count >= 0
    out: list[int] = []
    for i in range(total):
        s = (first + i) % total
        if s in excluded:
            continue
        out.append(s)
        if len(out) == count:
            break
    return out


def route_in(event_id: bytes | str, shards: list[int]) -> int:
    """The shard of an event among a placement's: the same event, the same shard."""
    assert shards
    b = event_id.encode() if isinstance(event_id, str) else bytes(event_id)
    return shards[_h(b) % len(shards)]


@dataclass(frozen=True)
class Settings:
    total_shards: int = TOTAL_SHARDS_DEFAULT
    placement_ms: int = PLACEMENT_MS_DEFAULT
    default_count: int = COUNT_DEFAULT
    exclusions: tuple[int, ...] = ()
    counts: dict[str, int] = field(default_factory=dict)  # per tenant
    salts: dict[str, int] = field(default_factory=dict)  # per tenant

    def validate(self) -> None:
        if not 1 <= self.total_shards <= 1_000_000:
            raise ValueError("total_shards: must be between 1 and 1000000")
        if not 1_000 <= self.placement_ms <= 366 * 86_400_000:
            raise ValueError("placement_ms: must be between 1 s and a year")
        if not 1 <= self.default_count <= self.total_shards:
            raise ValueError("default_count: must be between 1 and total_shards")
        for s in self.exclusions:
            if not 0 <= s < self.total_shards:
                raise ValueError(f"exclusions: shard {s} is not in 0..{self.total_shards - 1}")
        if len(set(self.exclusions)) >= self.total_shards:
            raise ValueError("exclusions: every shard would be excluded")
        for t, c in self.counts.items():
            if not 1 <= c <= self.total_shards:
                raise ValueError(f"counts[{t}]: must be between 1 and total_shards")

    def count_of(self, tenant: str) -> int:
        return self.counts.get(tenant, self.default_count)

    def salt_of(self, tenant: str) -> int:
        return self.salts.get(tenant, 0)

    def shards_for(self, tenant: str) -> list[int]:
        return choose_shards(first_shard(tenant, self.salt_of(tenant), self.total_shards),
                             self.count_of(tenant), self.total_shards, frozenset(self.exclusions))

    def to_json(self) -> bytes:
        d = asdict(self)
        d["exclusions"] = list(self.exclusions)
        return json.dumps(d, sort_keys=True).encode()

    @staticmethod
    def from_json(b: bytes) -> Settings:
        d = json.loads(b)
        d["exclusions"] = tuple(d.get("exclusions", ()))
        return Settings(**d)


@dataclass(frozen=True)
class Placement:
    tenant: str
    start_ms: int  # inclusive
    end_ms: int  # exclusive
    shards: tuple[int, ...]

    def route(self, event_id: bytes | str) -> int:
        return route_in(event_id, list(self.shards))

    def to_json(self) -> bytes:
        return json.dumps({"tenant": self.tenant, "start_ms": self.start_ms, "end_ms": self.end_ms,
                           "shards": list(self.shards)}).encode()

    @staticmethod
    def from_json(b: bytes) -> Placement:
        d = json.loads(b)
        return Placement(d["tenant"], d["start_ms"], d["end_ms"], tuple(d["shards"]))


def _tenant_key(tenant: str) -> bytes:
    return b"tenant/" + tenant.encode()


class Placements:
    """Placements kept in a Midtown dataset, allocated with insert-if-absent, cached."""

    def __init__(self, client: Any, dataset: str = DATASET_DEFAULT) -> None:
        self.db = client
        self.dataset = dataset
        self._cache: dict[tuple[str, int], Placement] = {}
        self._lock = world.lock()
        self._placement_ms = 0  # read once: fixed for the dataset (update_settings)

    # ---------------------------------------------------------------- settings
    def settings(self) -> Settings:
        v = self.db.get(self.dataset, SETTINGS_PARTITION, "config")
        return Settings.from_json(v.value) if v is not None else Settings()

    def update_settings(self, change: Any) -> Settings:
        """Change the settings with check-and-set (retried if someone else changed them):
        `change(settings) -> settings`. New placements use them; existing ones never change."""
        for _ in range(20):
            cur = self.db.get(self.dataset, SETTINGS_PARTITION, "config")
            old = Settings.from_json(cur.value) if cur is not None else Settings()
            new = change(old)
            new.validate()
            if cur is not None and new.placement_ms != old.placement_ms:
                raise ValueError("placement_ms: fixed once the settings exist (every machine must cut "
                                 "time the same way); use another placements dataset to change it")
            r = (self.db.cas(self.dataset, SETTINGS_PARTITION, "config", new.to_json(), expect_absent=True)
                 if cur is None else
                 self.db.cas(self.dataset, SETTINGS_PARTITION, "config", new.to_json(),
                             expected=cur.value, expected_version=cur.version))
            if r.succeeded:
                return new
        raise RuntimeError("placement settings kept changing; try again")

    # ---------------------------------------------------------------- placements
    def get_placement(self, tenant: str, ts_ms: int) -> Placement:
        """The placement covering `ts_ms` for `tenant`, created if none exists (insert if
        absent: concurrent callers anywhere get the one that won)."""
        if not tenant:
            raise ValueError("tenant: must not be empty")
        s: Settings | None = None
        length = self._length()
        start = ts_ms - ts_ms % length
        with self._lock:
            hit = self._cache.get((tenant, start))
        if hit is not None:
            return hit
        key = str(start).rjust(16, "0")
        cur = self.db.get(self.dataset, _tenant_key(tenant), key)
        if cur is None:
            s = s or self.settings()
            p = Placement(tenant, start, start + length, tuple(s.shards_for(tenant)))
            r = self.db.cas(self.dataset, _tenant_key(tenant), key, p.to_json(), expect_absent=True)
            placed = p if r.succeeded else Placement.from_json(r.current.value)
        else:
            placed = Placement.from_json(cur.value)
        with self._lock:
            self._cache[(tenant, start)] = placed
        return placed

    def _length(self) -> int:
        with self._lock:
            if self._placement_ms:
                return self._placement_ms
        n = self.settings().placement_ms
        with self._lock:
            self._placement_ms = n
        return n

    def route(self, tenant: str, event_id: bytes | str, ts_ms: int) -> int:
        """The shard of an event: `placement.shards[H(event id) mod len(shards)]` for the
        placement of its timestamp."""
        return self.get_placement(tenant, ts_ms).route(event_id)

    def placements_of(self, tenant: str, limit: int = 100) -> list[Placement]:
        return [Placement.from_json(i.value.value)
                for i in self.db.scan(self.dataset, _tenant_key(tenant), limit=limit).items]
