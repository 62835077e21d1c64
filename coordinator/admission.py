"""What a request must pass before it runs, in this order: its dataset looked up (once,
from the catalog's cache, then handed to every check and to the call), the rate limits
(per client and per dataset), the dataset's access list (coordinator/acl.py) and its
storage quota (coordinator/quotas.py). Each refusal is an Refusal naming what refused it."""

from __future__ import annotations

from typing import Any

import grpc
from kazoo.client import KazooClient

from catalog import usage
from catalog.datasets import Dataset, DatasetCache
from catalog.users import UserCache
from coordinator import acl, limits, quotas
from coordinator.checks import Code
from coordinator.ratelimit import RateLimiter
from midtown_pb import kv_pb2 as pb
from runtime import world
from runtime.process import through_zk_loss
from runtime.refusals import BadRequest, Refusal


class Admission:
    def __init__(self, zk: KazooClient, client_rate_limit: float = limits.CLIENT_RATE_LIMIT_DEFAULT) -> None:
        self.datasets = DatasetCache(zk)
        self.usage = usage.UsageCache(zk)
        self.users = UserCache(zk)
        self._recent = quotas.Recent()  # bytes let into datasets with a quota since the last count
        self._quota_lock = world.lock()
        self.limiter = RateLimiter()
        self.client_rate_limit = client_rate_limit

    def start(self) -> None:
        """Watch the datasets and users, so that changes are seen at once (through a
        ZooKeeper connection lost meanwhile: a loaded machine's first seconds dropped one,
        and the coordinator never started)."""
        through_zk_loss(self.datasets.watch, "watching the datasets")
        through_zk_loss(self.users.watch, "watching the users")

    def lookup(self, header: pb.RequestHeader, write: bool = True) -> Dataset | None:
        """The request's dataset (from the cache of the catalog), or None: looked up once
        per request by the service, which hands it to every check and call. `write`: the
        request may write (catalog/datasets.py, DatasetCache: how stale an entry it takes
        while ZooKeeper does not answer)."""
        return self.datasets.get(header.dataset, write) if header.dataset else None

    @staticmethod
    def need(d: Dataset | None, header: pb.RequestHeader) -> Dataset:
        """The dataset a request names; a Refusal naming header.dataset if it has none."""
        if not header.dataset:
            raise BadRequest("header.dataset: required")
        if d is None:
            raise Refusal(Code.NOT_FOUND, f"header.dataset: unknown dataset {header.dataset!r}")
        return d

    def check_rate(self, d: Dataset | None, peer: str) -> None:
        """Over a limit: RESOURCE_EXHAUSTED, naming which."""
        now = world.monotonic()
        if not self.limiter.allow(("client", peer), self.client_rate_limit, now):
            raise Refusal(Code.RESOURCE_EXHAUSTED,
                        f"client: over the limit of {self.client_rate_limit:g} requests/s per "
                        "client; retry later")
        if d is not None and not self.limiter.allow(("dataset", d.id), d.rate_limit, now):
            raise Refusal(Code.RESOURCE_EXHAUSTED,
                        f"header.dataset: {d.name!r} is over its limit of {d.rate_limit:g} "
                        "requests/s; retry later")

    def check_quota(self, d: Dataset | None, req: Any) -> None:
        """A write that can add data to a dataset at or over its storage quota:
        RESOURCE_EXHAUSTED, marked so that clients do not retry it (coordinator/quotas.py).
        What the nodes counted last, plus what this coordinator let in since, is what the
        dataset holds."""
        written = quotas.writes(req, d.id) if d is not None and d.quota_bytes else []
        if d is None or not written:
            return
        counted, at_ms = usage.used(self.usage.reports(), d.id)
        now_ms = world.wall_ms()
        with self._quota_lock:
            holds = counted + self._recent.since(d.id, at_ms - quotas.APPLY_SLACK_MS, now_ms)
            if not quotas.over(d.quota_bytes, holds):
                self._recent.add(d.id, now_ms, written)
                return
        raise Refusal(Code.RESOURCE_EXHAUSTED,
                    f"header.dataset: {d.name!r} holds {quotas.format_size(holds)}, at or over "
                    f"its storage quota of {quotas.format_size(d.quota_bytes)}; delete data "
                    "or raise the quota (midtown dataset quota)", quotas.REFUSED_TRAILER)

    def authorize(self, d: Dataset | None, ctx: grpc.ServicerContext, write: bool) -> None:
        """A dataset with an access list takes only its users' calls (coordinator/acl.py)."""
        if d is None or not d.acl:
            return
        token = acl.bearer(ctx.invocation_metadata())
        user = self.users.user(token) if token else None
        refused = acl.decide(d.access, d.name, user, token is not None, write)
        if refused is not None:
            raise refused
