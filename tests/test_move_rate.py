"""Moves are paced by default (catalog/shard_moves.py RATE_MB_S_DEFAULT): every command that
moves shards copies at that rate unless told (--rate 0: no limit), and `bench moves`
measures the workload's latency during a move at that rate."""

from __future__ import annotations

import pytest

from bench.main import parser as bench_parser
from catalog import shard_moves
from cli.main import parser


@pytest.mark.parametrize("args", [["shard", "move", "1", "--to", "2"], ["cluster", "rebalance"],
                                  ["node", "decommission", "3"], ["node", "add", "3", "--rebalance"]])
def test_every_command_that_moves_shards_is_paced_by_default(args: list[str]) -> None:
    assert parser().parse_args(args).rate == shard_moves.RATE_MB_S_DEFAULT > 0


def test_the_moves_benchmark_is_paced_by_default() -> None:
    assert bench_parser().parse_args(["moves"]).rate == shard_moves.RATE_MB_S_DEFAULT > 0


def test_zero_is_no_limit() -> None:
    assert parser().parse_args(["shard", "move", "1", "--to", "2", "--rate", "0"]).rate == 0
