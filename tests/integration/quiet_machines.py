"""How long writes stop when a machine goes quiet (issue 68), Midtown beside etcd:
`make quiet-machines` (QUIET_ROUNDS=N, 5 by default), outside the suite. Needs root
(network namespaces).

Four machines played by network namespaces, as tests/integration/test_netns.py lays them
(a ZooKeeper member on three, `midtown machine up --workers 2` on each, mutual TLS, two
key-value logs). One key per key-value log gets a put every 50 ms, each with a 2 s
deadline, from a client outside the machines. Each round pauses whole (SIGSTOP of every
process in the namespace) and then cuts off (its interface down) the machine beside the
first key's log's writer, for 8 s, and reports per key the time from the fault to the
first acknowledged put started after it, and whether ZooKeeper's leader was on that
machine. Then the same faults, as many rounds, on etcd's leader: three etcd members, each
in a namespace of its own, the client outside trying the next member when one fails. A line
of JSON a round, then a table: per system and kind of fault, the median and the largest
(Midtown: over the keys whose log's writer was on the quiet machine).

What it measures is the seconds a share of the keys is stopped for; where the time goes
is in the workers' logs and ZooKeeper's (`zookeeper.log` beside each member's data) under
the directory it prints."""

from __future__ import annotations

import json
import logging
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from bench.etcd import Etcd, FailingOver
from bench.failover import ETCD_TRY_S
from cli import interrupts
from cluster import netns
from midtown import Client
from tests.integration.test_netns import MACHINES, ZK_MEMBERS, Machines

QUIET_S = 8.0
PUT_EVERY_S = 0.05
PUT_DEADLINE_S = 2.0
SUBNET = "10.204.{}.{}"  # its own namespaces (test_netns.py uses 10.202)
ETCD_SUBNET = "10.205.{}.{}"


class Ticker:
    """`put(n)` every PUT_EVERY_S, each in a thread of its own with a PUT_DEADLINE_S deadline
    of its own (at most PUT_DEADLINE_S / PUT_EVERY_S at once); `key`: what it puts to."""

    def __init__(self, key: str, put: Callable[[int], object]) -> None:
        self.key, self.put = key, put
        self.done: list[tuple[float, float, bool]] = []
        self.stopped = threading.Event()
        self.lock = threading.Lock()
        threading.Thread(target=self._run, daemon=True).start()

    def _one(self, n: int) -> None:
        t0 = time.monotonic()
        try:
            self.put(n)
            ok = True
        except Exception:  # noqa: BLE001  (a failed put is what is measured)
            ok = False
        with self.lock:
            self.done.append((t0, time.monotonic(), ok))

    def _run(self) -> None:
        n = 0
        while not self.stopped.is_set():
            n += 1
            threading.Thread(target=self._one, args=(n,), daemon=True).start()
            time.sleep(PUT_EVERY_S)

    def first_ack_after(self, t: float, timeout_s: float) -> float | None:
        """Seconds from `t` to the first acknowledged put started at or after it."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self.lock:
                acks = [end for start, end, ok in self.done if ok and start >= t]
            if acks:
                return min(acks) - t
            time.sleep(0.02)
        return None

    def puts_between(self, t: float, until: float) -> list[tuple[float, float, bool]]:
        """The puts started from `t` to `until`: (start, end, acknowledged), from `t`."""
        with self.lock:
            return [(round(s - t, 2), round(e - t, 2), ok) for s, e, ok in self.done if t <= s <= until]


def quiet(space: netns.Namespace, fault: str, on: bool) -> None:
    """A machine paused whole ("pause") or cut off ("cut"), or back."""
    if fault == "pause":
        space.pause_all(on)
    else:
        space.link(not on)


def at(t: float) -> str:
    """The wall-clock time of monotonic `t`, to the millisecond (the servers' logs')."""
    wall = time.time() - time.monotonic() + t
    return time.strftime("%H:%M:%S", time.localtime(wall)) + f".{int(wall * 1000) % 1000:03d}"


def one_round(space: netns.Namespace, kind: str,
              tickers: list[Ticker]) -> tuple[float, dict[str, float | None]]:
    """`space` quiet for QUIET_S: (when it was quiet, each ticker's seconds to its next put
    started then or after and acknowledged). Counted from when every process is stopped
    or the link is down: a put sent while the pause was still being signalled was answered
    by the machine, 0.01 s "after the fault"."""
    quiet(space, kind, True)
    t = time.monotonic()
    try:
        gaps = {tk.key: tk.first_ack_after(t, 60) for tk in tickers}
        time.sleep(max(0.0, QUIET_S - (time.monotonic() - t)))
    finally:
        quiet(space, kind, False)
    return t, gaps


def _putter(db: Client, key: str) -> Callable[[int], object]:
    return lambda n: db.put("t", key, "n", str(n).encode(), timeout=PUT_DEADLINE_S)


def midtown_rounds(rounds: int, results: dict[str, list[float]]) -> None:
    with netns.namespaces(MACHINES, SUBNET, "q") as (spaces, _):
        m = Machines(spaces, Path(tempfile.mkdtemp(prefix="midtown-quiet-")))
        print(f"machines under {m.dir}", flush=True)
        m.lay_out()
        # The SDK's side of a round: each failed attempt and each change of routes.
        trace = logging.FileHandler(m.dir / "client.log")
        trace.setFormatter(logging.Formatter("%(asctime)s.%(msecs)03d %(name)s %(message)s", "%H:%M:%S"))
        for name in ("midtown.client", "midtown.routes", "midtown.discovery"):
            logging.getLogger(name).addHandler(trace)
            logging.getLogger(name).setLevel(logging.DEBUG)
        with Client(zk=m.zk, timeout=10, tls_ca=m.ca) as db:
            for n in range(100):  # routes are learnt by use
                db.put("t", f"p{n}", "n", b"x")
            time.sleep(3)
            keys: dict[str, str] = {}  # the coordinator beside a log's writer -> a key of that log
            for n in range(100):
                beside = db.coordinator_for("t", f"p{n}")
                if beside is not None:
                    keys.setdefault(beside, f"p{n}")
            tickers = [Ticker(k, _putter(db, k)) for k in keys.values()]
            time.sleep(3)
            for r in range(rounds):
                for kind in ("pause", "cut"):
                    beside = db.coordinator_for("t", tickers[0].key)
                    if beside is None:
                        time.sleep(2)
                        continue
                    i = m.machine_of(beside)
                    # the keys whose log's writer is on that machine (the first key's, at least)
                    there = {tk.key for tk in tickers
                             if (c := db.coordinator_for("t", tk.key)) is not None and m.machine_of(c) == i}
                    leader = m.zk_leader()
                    t, gaps = one_round(spaces[i], kind, tickers)
                    print(json.dumps({"system": "midtown", "round": r, "fault": kind, "machine": f"m{i}",
                                      "at": at(t), "zk_leader_there": leader == i,
                                      "seconds_to_next_ack": {k: None if g is None else round(g, 2)
                                                              for k, g in gaps.items()},
                                      "writer_there": sorted(there),
                                      # the first key's puts up to its next ack: (start, end, ok)
                                      "puts": tickers[0].puts_between(t, t + (gaps[tickers[0].key] or 0))}),
                          flush=True)
                    results[kind] += [float("inf") if g is None else g for k, g in gaps.items() if k in there]
                    time.sleep(10)
            for tk in tickers:
                tk.stopped.set()


def etcd_rounds(rounds: int, results: dict[str, list[float]]) -> None:
    """The same faults on etcd's leader, a member in each of three namespaces (etcd 3.4's
    defaults: heartbeat 100 ms, election timeout 1 s), the client in the root namespace
    trying the next member when one fails (bench/etcd.py FailingOver)."""
    with netns.namespaces(ZK_MEMBERS, ETCD_SUBNET, "e") as (spaces, _):
        etcd = Etcd(Path(tempfile.mkdtemp(prefix="midtown-quiet-etcd-")), hosts=[s.ip for s in spaces],
                    wrap=lambda i, cmd: spaces[i].run(*cmd))
        try:
            puts = FailingOver([etcd.client(i, "grpc", timeout_s=ETCD_TRY_S) for i in range(3)],
                               etcd.leader() - 1)
            ticker = Ticker("probe", lambda n: puts.put(b"probe", str(n).encode(), PUT_DEADLINE_S))
            time.sleep(3)
            for r in range(rounds):
                for kind in ("pause", "cut"):
                    i = etcd.leader()
                    t, gaps = one_round(spaces[i], kind, [ticker])
                    g = gaps["probe"]
                    took = None if g is None else round(g, 2)
                    print(json.dumps({"system": "etcd", "round": r, "fault": kind, "member": f"m{i}",
                                      "at": at(t), "seconds_to_next_ack": took}), flush=True)
                    results[kind].append(float("inf") if g is None else g)
                    etcd.wait_healthy(60)
                    time.sleep(10)
            ticker.stopped.set()
        finally:
            etcd.stop()


def main() -> None:
    raw = os.environ.get("ROUNDS", "5")
    if not raw.isdigit() or int(raw) < 1:
        raise SystemExit(f"quiet-machines: ROUNDS={raw!r}: a number of rounds, 1 or more")
    rounds = int(raw)
    if os.environ.get("ETCD", "1") not in ("0", "1"):
        raise SystemExit(f"quiet-machines: ETCD={os.environ['ETCD']!r}: 0 leaves etcd's rounds out, 1 runs "
                         "them (the default)")
    why = netns.can_make()
    if why is not None:
        raise SystemExit(f"quiet-machines: {why}")
    figures: dict[str, dict[str, list[float]]] = {}
    figures["midtown"] = {"pause": [], "cut": []}
    midtown_rounds(rounds, figures["midtown"])
    if os.environ.get("ETCD", "1") == "0":
        print("ETCD=0: no etcd figures", flush=True)
    elif shutil.which("etcd"):
        figures["etcd"] = {"pause": [], "cut": []}
        etcd_rounds(rounds, figures["etcd"])
    else:
        print("etcd is not installed (make bench installs it): no etcd figures", flush=True)
    print("\nfrom the fault to the next acknowledged put (a put every 50 ms, 2 s deadline); Midtown: the "
          "logs whose writer was on the quiet machine; etcd: its leader's machine", flush=True)
    print(f"{'system':8} {'fault':6} {'rounds':>6} {'median s':>9} {'largest s':>10}")
    for system, by_kind in figures.items():
        for kind, gs in by_kind.items():
            if gs:
                print(f"{system:8} {kind:6} {len(gs):6d} {statistics.median(gs):9.2f} {max(gs):10.2f}",
                      flush=True)


if __name__ == "__main__":
    # SIGINT, SIGTERM, SIGHUP: the namespaces and their processes go (a second signal does
    # not cut that short: a `timeout` wrapper and a `kill` of both left namespaces behind).
    interrupts.interrupt_on_stop_signals()
    try:
        main()
    except KeyboardInterrupt as e:
        sys.exit(interrupts.exit_code(e))
