"""Time-to-live on a quiet cluster: nothing is written after a value, so only the log
writer's time marks move the log's time (log/driver.py). Storage nodes publish their
positions once an hour here, so that no other append moves it either."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from cluster import Cluster
from midtown import Client
from tests.integration.conftest import started

pytestmark = pytest.mark.integration

# What the guarantee allows past an expiry: about a second (TIME_MARK_IDLE_MS), plus the
# time a loaded machine takes to apply the mark.
LATE_S_MAX = 4.0


@pytest.fixture(scope="module")
def quiet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with started(tmp_path_factory.mktemp("quiet") / "c", {"MIDTOWN_POSITION_INTERVAL_S": "3600"},
                 layout="host", logs=1) as c:
        c.create_dataset("q")
        yield c


def _gone_after(read, expires_at_ms: int) -> float:  # type: ignore[no-untyped-def]
    """Seconds past `expires_at_ms` (wall clock) at which `read()` first returned nothing,
    polling with nothing else written; fails the test past LATE_S_MAX."""
    while True:
        late = time.time() - expires_at_ms / 1000
        if not read():
            return late
        assert late < LATE_S_MAX, f"still readable {late:.1f} s past its expiry on a quiet cluster"
        time.sleep(0.05)


def test_an_expired_value_is_not_read_on_a_quiet_cluster(quiet: Cluster) -> None:
    with Client(zk=quiet.zk_hosts, timeout=20) as db:
        db.put("q", "s", "other", b"stays")
        db.put("q", "s", "token", b"secret", ttl_ms=1000)
        v = db.get("q", "s", "token")
        assert v is not None and v.expires_at_ms > 0, "readable before its expiry"
        late = _gone_after(lambda: db.get("q", "s", "token"), v.expires_at_ms)
        assert late > -0.5, "expired early"
        # Scans judge expiry the same way, and a write after it sees it gone.
        assert [i.local_key for i in db.scan("q", "s").items] == [b"other"]
        assert db.cas("q", "s", "token", b"new", expect_absent=True).succeeded


def test_an_expired_value_leaves_scans_on_a_quiet_cluster(quiet: Cluster) -> None:
    with Client(zk=quiet.zk_hosts, timeout=20) as db:
        db.put("q", "scan", "a", b"1", ttl_ms=1000)
        v = db.get("q", "scan", "a")
        assert v is not None
        _gone_after(lambda: db.scan("q", "scan").items, v.expires_at_ms)
