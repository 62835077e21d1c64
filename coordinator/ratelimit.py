"""Rate limits: token buckets per dataset and per client connection. Pure (the clock is
passed in); over the limit a request gets RESOURCE_EXHAUSTED naming the limit."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from runtime import world

BUCKETS_MAX = 100_000  # clients remembered at once; the least recently seen are forgotten


@dataclass
class TokenBucket:
    rate: float  # tokens per second
    burst: float  # bucket size
    tokens: float
    at: float  # last refill time, seconds

    def take(self, now: float, n: float = 1.0) -> bool:
        assert self.rate > 0 and self.burst > 0
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = max(self.at, now)
        if self.tokens >= n:
            self.tokens -= n
            return True
        return False


class RateLimiter:
    """Buckets by key; a rate of 0 means no limit."""

    def __init__(self) -> None:
        self._buckets: OrderedDict[object, TokenBucket] = OrderedDict()
        self._lock = world.lock()

    def allow(self, key: object, rate: float, now: float) -> bool:
        if rate <= 0:
            return True
        with self._lock:
            b = self._buckets.get(key)
            if b is None or b.rate != rate:
                b = TokenBucket(rate, max(rate, 1.0), max(rate, 1.0), now)
                self._buckets[key] = b
                if len(self._buckets) > BUCKETS_MAX:
                    self._buckets.popitem(last=False)
            self._buckets.move_to_end(key)
            return b.take(now)
