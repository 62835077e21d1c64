"""Which log server a log prefers as its writer: a pure function of the topology.

The integration tests do not assert where writers end up (an election is won by whoever
claims first); this is the property the election is built on."""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from log.zk import Topology


@given(logs=st.integers(1, 64), servers=st.lists(st.integers(0, 1000), min_size=3, max_size=7,
                                                    unique=True))
def test_each_log_ranks_every_server_once_and_rank_zero_is_spread(logs: int, servers: list[int]) -> None:
    topo = Topology(logs=logs, log_servers=tuple(servers))
    first = Counter()
    for log_id in range(logs):
        ranks = sorted(topo.preferred_rank(log_id, s) for s in servers)
        assert ranks == list(range(len(servers))), f"log {log_id}: ranks {ranks}"
        first[next(s for s in servers if topo.preferred_rank(log_id, s) == 0)] += 1
    # Preferred writers differ by at most one log between servers.
    counts = [first.get(s, 0) for s in servers]
    assert max(counts) - min(counts) <= 1, counts


def test_log_i_prefers_the_ith_server() -> None:
    topo = Topology(logs=16, log_servers=(0, 1, 2))
    assert [next(s for s in (0, 1, 2) if topo.preferred_rank(i, s) == 0) for i in range(6)] == \
        [0, 1, 2, 0, 1, 2]
