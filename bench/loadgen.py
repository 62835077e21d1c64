"""The load generator both benchmarks share: one thread per client, each calling its own
operation in a loop for a fixed time; throughput and latency percentiles. The same with
coroutines on one event loop (run_async_workload), for the SDK's AsyncClient."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def run_workload(make_op: Callable[[int], Callable[[int], object]], clients: int, seconds: float) -> dict:
    lat: list[float] = []
    errors = [0]
    lock = threading.Lock()
    ops = [make_op(i) for i in range(clients)]
    start = threading.Barrier(clients + 1)
    stop_at = [0.0]

    def run(i: int) -> None:
        mine: list[float] = []
        n = 0
        try:
            start.wait()
        except threading.BrokenBarrierError:  # the run was interrupted before it began
            return
        while time.monotonic() < stop_at[0]:
            t0 = time.perf_counter()
            try:
                ops[i](n)
            except Exception:
                errors[0] += 1
                continue
            mine.append(time.perf_counter() - t0)
            n += 1
        with lock:
            lat.extend(mine)

    # Daemon threads, told to stop when the run is interrupted (Ctrl-C, SIGTERM: a
    # KeyboardInterrupt here): a client thread left waiting must not keep the process alive.
    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(clients)]
    try:
        for t in threads:
            t.start()
        stop_at[0] = time.monotonic() + seconds
        t0 = time.monotonic()
        start.wait()
        for t in threads:
            t.join()
    except BaseException:
        stop_at[0] = 0.0
        start.abort()
        raise
    dt = time.monotonic() - t0
    return {"ops_per_s": round(len(lat) / dt), "p50_ms": round(percentile(lat, 0.5) * 1000, 2),
            "p99_ms": round(percentile(lat, 0.99) * 1000, 2), "errors": errors[0]}


AsyncMakeOp = Callable[[Any, int], Awaitable[Callable[[int], Awaitable[object]]]]


def run_async_workload(make_op: AsyncMakeOp, clients: int, seconds: float,
                       connect: Callable[[], AbstractAsyncContextManager[Any]]) -> dict:
    """As run_workload, with `clients` coroutines on one event loop sharing what `connect()`
    opens (a client, made on that loop): `make_op(client, i)` prepares coroutine i's
    operation (a coroutine function of the count)."""

    async def main() -> tuple[list[float], int, float]:
        async with connect() as conn:
            return await timed([await make_op(conn, i) for i in range(clients)])

    async def timed(ops: list[Callable[[int], Awaitable[object]]]) -> tuple[list[float], int, float]:
        lat: list[float] = []
        errors = 0
        stop_at = time.monotonic() + seconds

        async def run(i: int) -> None:
            nonlocal errors
            n = 0
            while time.monotonic() < stop_at:
                t0 = time.perf_counter()
                try:
                    await ops[i](n)
                except Exception:
                    errors += 1
                    continue
                lat.append(time.perf_counter() - t0)
                n += 1

        t0 = time.monotonic()
        await asyncio.gather(*[run(i) for i in range(clients)])
        return lat, errors, time.monotonic() - t0

    lat, errors, dt = asyncio.run(main())
    return {"ops_per_s": round(len(lat) / dt), "p50_ms": round(percentile(lat, 0.5) * 1000, 2),
            "p99_ms": round(percentile(lat, 0.99) * 1000, 2), "errors": errors}
