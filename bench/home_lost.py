"""`midtown-bench home-lost`: what a local dataset's fail-over loses when its home data
center is lost, against what the asynchronous lag predicted (docs/architecture.md, "A data
center lost"), on machines played by network namespaces (root).

Seven machines in three data centers (east and west of three: a local scope's home holds
a log's whole ensemble; north of one), one host each (the host layout), `--delay-ms` held
each way between data centers (bench/wan.py); log 1 kept in east with scope east on it
(`local`), `global` on log 0 (bench/datacenters.py lays it out). First the asynchronous
lag: from a write acknowledged in east to its value readable from west's replica. Then an
application writes `local` at `--rate` writes/s, one key each, for `--seconds`; east is
lost whole (every host there SIGKILLed); once east's log servers left ZooKeeper the
operator runs `dataset fail-over local --to west`; east comes back, its storage nodes take
the scope's shards again, and its log servers say what they kept aside. Printed: the
writes acknowledged, those acknowledged in the last lag (p50, p99) before the loss (what
the lag predicts a fail-over loses), the positions the fail-over reported lost for sure
and kept aside, the acknowledged writes missing at the end, and how long `local` took no
write (the longest time between two writes acknowledged, from the last before the loss). tests/integration/
test_datacenters.py runs the same loss under the linearizability checker."""

from __future__ import annotations

import argparse
import contextlib
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench import datacenters
from bench.datacenters import Machines
from bench.harness import Say, midtown_json, percentile_ms, progress_for
from catalog import registry
from cli.output import emit
from cluster import Cluster
from log import zk as zkpaths
from midtown import Client, errors

MACHINES: Machines = (("e0", "east"), ("e1", "east"), ("e2", "east"), ("w0", "west"), ("w1", "west"),
                      ("w2", "west"), ("n0", "north"))
SUBNET = "10.209.{}.{}"  # this benchmark's namespaces only


class Application:
    """Writes of `local` from a client in east (in the root namespace, its packets not
    held), one new key each, `rate` a second (0: as fast as they are acknowledged); what it
    was told: the keys acknowledged, and when."""

    def __init__(self, zk: str, rate: float = 0.0) -> None:
        self.zk, self.rate = zk, rate
        self.acked: list[tuple[str, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._write, name="application")

    def __enter__(self) -> Application:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(60)

    def _write(self) -> None:
        with Client(zk=self.zk, timeout=5, dc="east") as app:
            i = 0
            next_at = time.monotonic()
            while not self._stop.is_set():
                if self.rate:
                    next_at += 1 / self.rate
                    time.sleep(max(0.0, next_at - time.monotonic()))
                key = f"w{i}"
                i += 1
                try:
                    app.put("local", key, "k", b"x")
                except (errors.Unavailable, errors.DeadlineExceeded):
                    time.sleep(0.1)  # its outcome unknown: nothing is claimed of it
                    next_at = time.monotonic()
                    continue
                self.acked.append((key, time.monotonic()))

    def missing(self) -> list[str]:
        """The acknowledged keys not read back (strong reads, wherever the scope is kept now)."""
        with Client(zk=self.zk, timeout=30) as db:
            return [k for k, _ in self.acked if db.get("local", k, "k") is None]


def lose_home(c: Cluster, machines: Machines, away_s: float, say: Say) -> dict[str, Any]:
    """East lost whole (its hosts SIGKILLed); once its log servers left ZooKeeper, `dataset
    fail-over local --to west`; `away_s` later east's hosts started again. The command's
    report, and when each step happened (time.monotonic): lost, failed_over, back."""
    east = {i for i, (_, d) in enumerate(machines) if d == "east"}
    marks = {"lost": time.monotonic()}
    say("east lost: its hosts killed...")
    for i in sorted(east):
        c.kill(f"host-{i}")
    zkc = zkpaths.connect(c.zk_hosts)
    try:
        deadline = time.monotonic() + 60
        while set(zkpaths.servers(zkc)) & east:
            if time.monotonic() > deadline:
                raise RuntimeError("east's log servers still registered 60 s after east was lost")
            time.sleep(0.1)
    finally:
        zkc.stop()
    say("east's log servers gone from ZooKeeper: `dataset fail-over local --to west`...")
    report = midtown_json(c.zk_hosts, "dataset", "fail-over", "local", "--to", "west", timeout_s=180)
    marks["failed_over"] = time.monotonic()
    time.sleep(away_s)
    say("east back...")
    marks["back"] = time.monotonic()
    for i in sorted(east):
        c.restart(f"host-{i}")
    return {"report": report, **marks}


def settled(c: Cluster, timeout_s: float = 300) -> int:
    """Once east is back: until every storage node the fail-over condemned took the scope's
    shards again and east's log servers answer for what they kept aside; how many positions
    that is."""
    zkc = zkpaths.connect(c.zk_hosts)
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            kv = registry.read_kv(zkc)
            kept = kept_aside(c) if kv is not None and not kv.failovers[-1]["condemned"] else None
            if kept is not None:
                return kept
            if time.monotonic() > deadline:
                raise RuntimeError(f"east not settled {timeout_s:g} s after it came back")
            time.sleep(0.5)
    finally:
        zkc.stop()


def kept_aside(c: Cluster) -> int | None:
    """How many positions east's log servers kept aside past the cut (`scope list`), None
    while some of them do not answer."""
    (row,) = [r for r in midtown_json(c.zk_hosts, "scope", "list") if r["scope"] == "east"]
    said = row["cuts"][0]["kept_aside"]
    if said == "":
        return 0
    if said == "unknown" or "at least" in said:
        return None
    first, last = map(int, said.split(".."))
    return last - first + 1


@contextlib.contextmanager
def seven_machines(root: Path, delay_ms: int, jitter_ms: int, say: Say) -> Iterator[tuple[Cluster, Any]]:
    """The seven machines' cluster, laid out and started, `delay_ms` held between data
    centers; stopped on the way out."""
    with datacenters.started("home-lost", root, MACHINES, SUBNET, 3, say) as (c, by_machine), \
            datacenters.held(MACHINES, by_machine, delay_ms, jitter_ms, say):
        yield c, by_machine


def run(a: argparse.Namespace) -> int:
    say = progress_for(a.json)
    with tempfile.TemporaryDirectory(prefix="midtown-bench-home-lost-") as tmp, \
            seven_machines(Path(tmp) / "midtown", a.delay_ms, a.jitter_ms, say) as (c, _):
        lags = datacenters.async_lag(c, a.lag_ops, "lag-", say)
        say(f"the application writes local at {a.rate:g}/s for {a.seconds:g} s, then east is lost...")
        with Application(c.zk_hosts, a.rate) as app:
            time.sleep(a.seconds)
            lost = lose_home(c, MACHINES, a.away_s, say)
        kept = settled(c)
        missing = app.missing()
    _print(lags, app.acked, lost, kept, missing, a)
    return 0


def _print(lags: list[float], acked: list[tuple[str, float]], lost: dict[str, Any], kept: int,
           missing: list[str], a: argparse.Namespace) -> None:
    row = figures(lags, acked, lost, kept, missing, a.delay_ms, a.rate)
    if a.json:
        emit(row, True)
        return
    emit([row], False, list(row))
    print(f"\n{row['acked']} writes of local acknowledged before east was lost; the lag's p50 and p99 "
          f"windows before the loss held {row['predicted_p50']} and {row['predicted_p99']} of them (what "
          f"the lag predicts a fail-over loses); the fail-over reported {row['lost_for_sure']} positions "
          f"lost for sure and {kept} kept aside on east's servers; {len(missing)} acknowledged writes were "
          f"not read back. fail_over_s: from the loss to the command's end (east's sessions expiring "
          f"first); no_writes_s: the longest time between two writes acknowledged, from the last before the "
          f"loss on.")


def figures(lags: list[float], acked: list[tuple[str, float]], lost: dict[str, Any], kept: int,
            missing: list[str], delay_ms: int, rate: float) -> dict[str, Any]:
    """The row printed: `lags` (seconds), `acked` (key, when), `lost` (lose_home's), `kept`
    (positions kept aside), `missing` (acknowledged keys not read back)."""
    (cut,) = lost["report"]["logs"]
    p50, p99 = percentile_ms(lags, 0.5), percentile_ms(lags, 0.99)
    before = [t for _, t in acked if t <= lost["lost"]]
    times = sorted(t for _, t in acked)
    gaps = [b - a for a, b in zip(times, times[1:]) if b > lost["lost"]]
    return {"delay_ms": delay_ms, "rate": rate, "acked": len(before),
            "lag_p50_ms": round(p50, 1), "lag_p99_ms": round(p99, 1),
            "predicted_p50": sum(1 for t in before if t > lost["lost"] - p50 / 1000),
            "predicted_p99": sum(1 for t in before if t > lost["lost"] - p99 / 1000),
            "lost_for_sure": cut["lost_entries"], "kept_aside": kept, "missing": len(missing),
            "no_writes_s": round(max(gaps), 1) if gaps else None,
            "fail_over_s": round(lost["failed_over"] - lost["lost"], 1)}
