"""Every operation ends by its own deadline (issue 33): threads sharing one Client (its
operations coalesced), each operation with a deadline between 1 and 4 s, while the writer
of the key-value log is SIGKILLed and restarted, then paused (SIGSTOP) for about the
ZooKeeper session timeout and resumed. No operation returns later than LATE_S past its
deadline, and once the cluster is healthy again every operation succeeds: none stays
blocked behind the pause."""

from __future__ import annotations

import random
import signal
import threading
import time
from pathlib import Path
from typing import NamedTuple

import pytest

from fleet.connect import ZK_SESSION_TIMEOUT_S
from log import zk as zkpaths
from midtown import Client, errors
from tests.integration.conftest import started, wait_for

# make soak, not the suite: the whole-cluster simulation (tests/sim/nodes.py) runs threads
# sharing one coalescing SDK client, each operation with a deadline of 1 to 4 s, through log
# writer kills and pauses (and coordinator and storage node kills) in every seed, checks
# that each ends by its deadline plus LATE_S and that a put on each key succeeds once the
# faults end
pytestmark = [pytest.mark.integration, pytest.mark.moved_to_sim]

# What "by its deadline" allows: a thread's wake-up on this loaded 2-core machine. The
# defect this guards against returned 20 s late.
LATE_S = 0.25
THREADS = 12


class Done(NamedTuple):
    op: str
    deadline_s: float
    started: float
    took: float
    outcome: str


def test_operations_end_by_their_deadlines_across_writer_kills_and_pauses(tmp_path: Path) -> None:
    with started(tmp_path / "c", logs=4, kv_logs=1) as c:
        c.create_dataset("dl")
        done: list[Done] = []
        stop = threading.Event()
        zk = zkpaths.connect(c.zk_hosts)
        try:
            with Client(zk=c.zk_hosts, timeout=10) as db:
                def worker(i: int) -> None:
                    rnd = random.Random(i)
                    while not stop.is_set():
                        t, op = rnd.uniform(1.0, 4.0), rnd.choice(["put", "get", "cas"])
                        k = f"k{rnd.randrange(20)}"
                        t0 = time.monotonic()
                        try:
                            if op == "put":
                                db.put("dl", k, "l", b"v%d" % i, timeout=t)
                            elif op == "get":
                                db.get("dl", k, "l", timeout=t)
                            else:
                                db.cas("dl", k, "c", b"x", expect_absent=True, timeout=t)
                            outcome = "ok"
                        except errors.MidtownError as e:
                            outcome = e.code.name
                        done.append(Done(op, t, t0, time.monotonic() - t0, outcome))
                threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(THREADS)]
                for th in threads:
                    th.start()

                def writer() -> int:
                    w = wait_for(lambda: zkpaths.writer_is_live(zk, 0) and zkpaths.read_writer(zk, 0), 60,
                                 "a writer of log 0")
                    return int(w["server"])

                def healthy() -> float:
                    wait_for(lambda: _put_ok(db), 60, "a put to succeed")
                    return time.monotonic()
                time.sleep(1.0)
                w = writer()
                c.kill(f"log-{w}")
                time.sleep(2.0)
                c.restart(f"log-{w}")
                healthy()
                time.sleep(1.0)
                w = writer()
                c.signal(f"log-{w}", signal.SIGSTOP)
                try:
                    time.sleep(ZK_SESSION_TIMEOUT_S + 0.5)  # about the session timeout
                finally:
                    c.signal(f"log-{w}", signal.SIGCONT)
                writer()
                ok_at = healthy()
                time.sleep(4.0 + 1.0)  # every operation started before it has ended, and more
                stop.set()
                for th in threads:
                    th.join(10)
                assert not any(th.is_alive() for th in threads)
        finally:
            zk.stop()
            zk.close()
    assert len(done) > 100
    worst = max(d.took - d.deadline_s for d in done)
    print(f"{len(done)} operations, {sum(d.outcome == 'ok' for d in done)} ok; the latest ended "
          f"{worst * 1000:.0f} ms past its deadline")
    late = sorted((d for d in done if d.took > d.deadline_s + LATE_S), key=lambda d: d.deadline_s - d.took)
    assert late == [], f"{len(late)} of {len(done)} operations ended past their deadline: {late[:5]}"
    # Healthy again at ok_at: an operation that ends more than 2 s later (whenever it
    # started, even during the pause) succeeded; one that failed then was stuck.
    later = [d for d in done if d.started + d.took > ok_at + 2.0]
    stuck = [d for d in later if d.outcome != "ok"]
    assert later and stuck == [], f"{len(stuck)} failed over 2 s after the cluster was healthy: {stuck[:5]}"


def _put_ok(db: Client) -> bool:
    try:
        db.put("dl", "health", "l", b"v", timeout=2)
        return True
    except errors.MidtownError:
        return False
