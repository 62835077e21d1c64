"""`midtown log-server decommission` refuses to leave fewer live servers than an ensemble
needs, naming the argument (cli/log_servers.py)."""

from __future__ import annotations

import pytest

from cli.connect import CliError
from cli.log_servers import check_enough_stay


def test_a_server_may_leave_while_three_live_servers_stay() -> None:
    check_enough_stay(4, pool=[0, 1, 2, 3, 4], leaving=[], live=[0, 1, 2, 4])
    check_enough_stay(4, pool=[0, 1, 2, 3, 4], leaving=[4], live=[0, 1, 2])  # itself leaving already
    check_enough_stay(2, pool=[0, 1, 2, 3, 9], leaving=[], live=[0, 1, 2, 9])  # 0, 1 and 9 stay


@pytest.mark.parametrize("pool, leaving, live, stay", [
    ([0, 1, 2], [], [0, 1, 2], "0, 1"),            # three servers: none may leave
    ([0, 1, 2, 3], [3], [0, 1, 2, 3], "0, 1"),     # another one is leaving already
    ([0, 1, 2, 3], [], [0, 1, 2], "0, 1"),         # one of those that stay is down
    ([0, 1, 2, 3], [], [0, 1, 2, 9], "0, 1"),      # 9 is live but not in the pool, 3 is down
])
def test_too_few_would_stay(pool: list[int], leaving: list[int], live: list[int], stay: str) -> None:
    said = rf"ID: without log server 2 the pool has 2 live servers that stay \({stay}\)"
    with pytest.raises(CliError, match=said):
        check_enough_stay(2, pool, leaving, live)
