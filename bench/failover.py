"""`midtown-bench failover`: how long the writer of a key stays unavailable when the
process that writes it dies or stops, Midtown beside etcd in the same run and harness.

Midtown: the process writing the log that carries the probed key (a host in the default
layout: log server, storage node and coordinator at once) is SIGKILLed `--rounds` times
(restarted after each), then SIGSTOPped for `--pause-seconds` `--rounds` times. etcd: its
leader, the same way. One client thread puts to the key without pause, each put with a
deadline of `--deadline` seconds within which it retries on its own (Midtown's SDK does;
for etcd the harness retries on the next member, each try bounded by ETCD_TRY_S).

The failover time of a round is from the signal to the acknowledgement of the first put
that started after it, as the client sees it. A put that fails (its deadline passed, or an
error no retry cured) counts as an error: the target is none."""

from __future__ import annotations

import argparse
import signal
import statistics
import threading
import time
from collections.abc import Callable

from bench.etcd import Etcd, FailingOver
from bench.harness import fresh_cluster, fresh_etcd, log
from catalog import datasets, registry
from catalog.routing import shard_of
from cli.output import emit
from cluster import Cluster
from log import zk as zkpaths
from log.takeover import SETTLE_S
from midtown.client import Client

DATASET, PARTITION, LOCAL = "failover", "probe", "k"
# Each try of an etcd put is bounded by this, then the next member is tried: a put to a
# follower whose leader died waits on a proposal the dead leader never commits. Short, so
# that etcd's figure is not rounded up to whole tries (at 1 s, every round measured 1.0 or
# 2.0 s); an etcd put takes about 2 ms here.
ETCD_TRY_S = 0.2
STEADY_S = SETTLE_S + 1.0  # before each round


class Prober:
    """One thread putting without pause; every put's start, end and outcome recorded."""

    def __init__(self, put: Callable[[int], object]) -> None:
        self.put = put
        self.done: list[tuple[float, float, bool]] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            n += 1
            t0 = time.monotonic()
            try:
                self.put(n)
                ok = True
            except Exception as e:  # noqa: BLE001  (every failure is counted and shown)
                ok = False
                with self._lock:
                    self.errors.append(f"{type(e).__name__}: {str(e)[:120]}")
            with self._lock:
                self.done.append((t0, time.monotonic(), ok))
            time.sleep(0.002)

    def first_ack_after(self, t: float, timeout_s: float) -> float | None:
        """When the first put that started at or after `t` was acknowledged (None: none
        within `timeout_s`)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                acks = [end for start, end, ok in self.done if ok and start >= t]
            if acks:
                return min(acks)
            time.sleep(0.01)
        return None

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(60)


Signal = Callable[[], tuple[float, Callable[[], object]]]


def rounds(prober: Prober, signal_at: Signal, n: int, what: str, pause_s: float | None) -> list[float]:
    """`n` rounds: `signal_at()` finds its target, signals it and returns when it did and how
    to undo it (restart, SIGCONT); the undo runs once the first put after the signal is
    acknowledged, or after `pause_s`. Each round starts STEADY_S after the last recovery:
    a writer that has held its log for less than SETTLE_S is not taken over (log/takeover.py's
    damping), and a round should not measure that."""
    took: list[float] = []
    for r in range(n):
        log(f"{what}, round {r + 1}/{n}...")
        time.sleep(STEADY_S)
        t0, undo = signal_at()
        try:
            at = prober.first_ack_after(t0, 60)
            took.append(float("nan") if at is None else at - t0)
            if pause_s is not None:
                time.sleep(max(0.0, t0 + pause_s - time.monotonic()))
        finally:
            undo()
        prober.first_ack_after(time.monotonic(), 60)
    return took


def midtown_side(cluster: Cluster, n: int, pause_s: float, deadline_s: float) -> dict:
    zk = zkpaths.connect(cluster.zk_hosts)
    try:
        d = datasets.get(zk, DATASET)
        kv = registry.read_kv(zk)
        assert d is not None and kv is not None
        log_id = registry.read_log_map(zk, kv).log_of(shard_of(d.id, PARTITION.encode(), kv.shards))

        def writer_proc() -> str:
            w = None
            deadline = time.monotonic() + 60
            while w is None and time.monotonic() < deadline:
                w = zkpaths.read_writer(zk, log_id)
                if w is None:
                    time.sleep(0.05)
            assert w is not None, "the log has no writer"
            return next(p.name for p in cluster.playing("log-server") if p.server_id == int(w["server"]))

        def kill() -> tuple[float, Callable[[], object]]:
            name = writer_proc()
            t0 = time.monotonic()
            cluster.kill(name)

            def undo() -> None:
                cluster.restart(name)
                cluster.wait_ready(zk, 60)
            return t0, undo

        def pause() -> tuple[float, Callable[[], object]]:
            name = writer_proc()
            t0 = time.monotonic()
            cluster.signal(name, signal.SIGSTOP)

            def undo() -> None:
                cluster.signal(name, signal.SIGCONT)
                cluster.wait_ready(zk, 60)
            return t0, undo

        with Client(zk=cluster.zk_hosts, timeout=deadline_s) as db:
            prober = Prober(lambda i: db.put(DATASET, PARTITION, LOCAL, str(i).encode()) and None)
            try:
                prober.first_ack_after(time.monotonic(), 60)
                kills = rounds(prober, kill, n, "midtown: SIGKILL the writer", None)
                pauses = rounds(prober, pause, n, f"midtown: SIGSTOP the writer for {pause_s:.0f}s",
                                pause_s)
            finally:
                prober.stop()
        return figures("midtown", kills, pauses, prober)
    finally:
        zk.stop()
        zk.close()


def etcd_side(etcd: Etcd, n: int, pause_s: float, deadline_s: float) -> dict:
    # The harness talks to a member that is not the leader.
    puts = FailingOver([etcd.client(i, "grpc", timeout_s=ETCD_TRY_S) for i in range(3)], etcd.leader() - 1)

    def put(i: int) -> None:
        puts.put(b"probe", str(i).encode(), deadline_s)

    def kill() -> tuple[float, Callable[[], object]]:
        m = etcd.leader()
        t0 = time.monotonic()
        etcd.kill(m)

        def undo() -> None:
            etcd.restart(m)
            etcd.wait_healthy(60, members=(m,))  # back in the cluster before the next round
        return t0, undo

    def pause() -> tuple[float, Callable[[], object]]:
        m = etcd.leader()
        t0 = time.monotonic()
        etcd.pause(m, True)
        return t0, lambda: etcd.pause(m, False)

    prober = Prober(put)
    try:
        prober.first_ack_after(time.monotonic(), 60)
        kills = rounds(prober, kill, n, "etcd: SIGKILL the leader", None)
        pauses = rounds(prober, pause, n, f"etcd: SIGSTOP the leader for {pause_s:.0f}s", pause_s)
    finally:
        prober.stop()
    return figures("etcd", kills, pauses, prober)


def figures(system: str, kills: list[float], pauses: list[float], prober: Prober) -> dict:
    def ms(xs: list[float], f: Callable[[list[float]], float]) -> int | None:
        ok = [x for x in xs if x == x]  # NaN: no put acknowledged within 60 s
        return round(1000 * f(ok)) if ok else None

    return {"system": system, "kill_median_ms": ms(kills, statistics.median), "kill_max_ms": ms(kills, max),
            "pause_median_ms": ms(pauses, statistics.median), "pause_max_ms": ms(pauses, max),
            "rounds_without_recovery": sum(1 for x in kills + pauses if x != x),
            "puts": len(prober.done), "errors": len(prober.errors),
            "kills_ms": [round(1000 * x) if x == x else None for x in kills],
            "pauses_ms": [round(1000 * x) if x == x else None for x in pauses],
            "error_samples": prober.errors[:5]}


def run(a: argparse.Namespace) -> int:
    rows: list[dict] = []
    with fresh_cluster("failover", f"the {a.layout} layout", log, layout=a.layout) as cluster:
        cluster.create_dataset(DATASET)
        rows.append(midtown_side(cluster, a.rounds, a.pause_seconds, a.deadline))
    if not a.no_etcd:
        with fresh_etcd("failover") as etcd:
            rows.append(etcd_side(etcd, a.rounds, a.pause_seconds, a.deadline))
    if a.json:
        emit(rows, True)
        return 0
    emit(rows, False, ["system", "kill_median_ms", "kill_max_ms", "pause_median_ms", "pause_max_ms",
                       "puts", "errors", "rounds_without_recovery"])
    for r in rows:
        print(f"\n{r['system']}: after each SIGKILL (ms): {r['kills_ms']}")
        print(f"{r['system']}: after each SIGSTOP of {a.pause_seconds:.0f}s (ms): {r['pauses_ms']}")
        for e in r["error_samples"]:
            print(f"{r['system']}: error: {e}")
    print(f"\nfrom the signal to the first put started after it and acknowledged, as one client saw it; "
          f"every put had a {a.deadline:.0f}s deadline and retried within it (errors: puts that failed)")
    print("Midtown: the process writing the probed key's log; etcd: its leader (etcd 3.4 defaults: "
          "heartbeat 100 ms, election timeout 1 s)")
    return 0
