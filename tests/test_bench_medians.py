"""Benchmarks' figures from their rounds: `midtown-bench kv --rounds N` reports each figure's
median; `bench spark-read` each source's first and fastest round."""

from __future__ import annotations

from bench.kv import medians, spread


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


def test_cpu_per_operation_counts_the_processes_it_is_given() -> None:
    """bench kv's CPU per operation: /proc CPU of each kind of process around a run, per
    operation; a gone process counts nothing."""
    import os
    import time

    from bench.harness import cpu_seconds
    from bench.kv import with_cpu

    def busy(op: str, clients: int, seconds: float) -> dict:
        end = time.process_time() + 0.2  # 0.2 s of this process's CPU for 100 operations
        while time.process_time() < end:
            pass
        return {"ops_per_s": 100, "p50_ms": 1.0}

    r = with_cpu(busy, lambda: {"client": [os.getpid()], "gone": [2**22 + 7]})("put", 1, 1.0)
    assert 1500 <= r["cpu_client_us"] <= 3000  # 0.2 s over 100 operations: 2,000 µs
    assert r["cpu_gone_us"] == 0 and r["cpu_total_us"] == r["cpu_client_us"]
    assert cpu_seconds(2**22 + 7) == 0.0


def test_bench_kv_runs_the_workloads_and_client_counts_asked() -> None:
    """`--ops cas --clients 1` measures single-client CAS alone; a bad name is refused
    with a message naming the option."""
    import importlib

    import pytest
    bench = importlib.import_module("bench.main")
    a = bench.parser().parse_args(["kv", "--ops", "cas", "--clients", "1"])
    assert (a.ops, a.clients) == (("cas",), ("1",))
    a = bench.parser().parse_args(["kv", "--ops", "cas,put", "--clients", "64,1"])
    assert (a.ops, a.clients) == (("put", "cas"), ("1", "64"))  # in the benchmark's order
    a = bench.parser().parse_args(["kv"])
    assert (a.ops, a.clients) == (("put", "get", "cas"), ("1", "64"))
    for args in (["--ops", "delete"], ["--clients", "2"], ["--ops", ","]):
        with pytest.raises(SystemExit):
            bench.parser().parse_args(["kv", *args])
    conv = importlib.import_module("cli.arguments").subset_arg("--ops", ("put", "get", "cas"))
    with pytest.raises(Exception, match="--ops: delete not among put,get,cas"):
        conv("put,delete")
    with pytest.raises(Exception, match="--ops: give one or more of put,get,cas"):
        conv(" , ")


def test_the_spark_read_table_shows_each_sources_first_and_fastest_round() -> None:
    from bench.spark_read import COLUMNS, figures

    row = figures(300_000, [10.0, 3.0, 4.0], [1.0, 0.5, 0.6], 2048 * 1024, 4)
    assert set(row) == set(COLUMNS)
    assert row["midtown_first_rows_per_s"] == 30_000 and row["parquet_first_rows_per_s"] == 300_000
    assert row["first_ratio"] == 0.1
    assert row["midtown_best_rows_per_s"] == 100_000 and row["midtown_best_s"] == 3.0
    assert row["parquet_best_rows_per_s"] == 600_000 and row["best_ratio"] == round(0.5 / 3.0, 3)
    assert row["worker_peak_mb"] == 2048 and row["partitions"] == 4


def test_a_spread_is_the_range_over_rounds_as_printed() -> None:
    """bench/ingest.py prints each figure's range beside its median (issue 71: how sure a
    ratio is that swung from 0.76 to 0.99 between runs)."""
    assert spread([0.89, 0.76, 0.99]) == "0.76..0.99"
    assert spread([25_548.0, 25_857.2]) == "25,548..25,857"
    assert spread([0.9]) == "0.90"


def test_ingest_says_how_sure_its_rounds_make_it() -> None:
    from bench.ingest import how_sure
    assert "no spread" in how_sure(1) and "--rounds 3" in how_sure(1)
    assert how_sure(3).startswith("each figure is the median of 3 rounds") and "_spread" in how_sure(3)
