"""log/store_identity.py: a log server serves only on the store ZooKeeper records for its
id; a first start (nothing recorded) or one that stopped between its two writes may go on."""

from __future__ import annotations

import pytest

from log.store_identity import StoreLost, check
from runtime.process import StartRefused


@pytest.mark.parametrize("stored, recorded", [(None, None), ("a1", None), ("a1", "a1")])
def test_a_first_start_or_the_recorded_store_may_serve(stored: str | None, recorded: str | None) -> None:
    check(3, stored, recorded)


def test_an_empty_store_where_one_is_recorded_is_a_lost_disk() -> None:
    with pytest.raises(StoreLost, match="its replica store is empty") as e:
        check(3, None, "a1")
    assert "midtown log-server decommission 3" in str(e.value)
    assert isinstance(e.value, StartRefused)  # the process exits with EXIT_CONFIG, not restarted


def test_another_store_is_refused() -> None:
    with pytest.raises(StoreLost, match="ZooKeeper records store a1 for server 3"):
        check(3, "b2", "a1")
