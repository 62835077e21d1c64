"""`midtown bench kv --rounds N` reports each figure's median over the rounds."""

from __future__ import annotations

from midtown.bench.kv import medians


def test_medians_of_odd_and_even_rounds() -> None:
    runs = [{"ops_per_s": 900, "p50_ms": 5.0, "p99_ms": 30.0, "errors": 0},
            {"ops_per_s": 1300, "p50_ms": 4.0, "p99_ms": 90.0, "errors": 1},
            {"ops_per_s": 1000, "p50_ms": 6.0, "p99_ms": 20.0, "errors": 0}]
    assert medians(runs) == {"ops_per_s": 1000, "p50_ms": 5.0, "p99_ms": 30.0, "errors": 0}
    assert medians(runs[:2]) == {"ops_per_s": 1100, "p50_ms": 4.5, "p99_ms": 60.0, "errors": 0}
    assert medians(runs[1:]) == {"ops_per_s": 1150, "p50_ms": 5.0, "p99_ms": 55.0, "errors": 0}
    halves = [{"ops_per_s": 1001}, {"ops_per_s": 1002}]
    assert isinstance(medians(halves)["ops_per_s"], int)
    assert medians(runs[:1]) == runs[0]
