"""A log server's store closes only between replica writes, and a write that comes after
it is refused as UNAVAILABLE ("stopping; retry"), never an internal error: at shutdown a
replication stream still writing once met the store's close ('RuntimeError: Already
mutably borrowed', logged with a traceback: issue 48, 4)."""

from __future__ import annotations

import threading
from pathlib import Path

import grpc

from log.entry import Entry
from log.messages import AddEntries
from log.node import Node
from log.rocks_store import RocksStore
from log.zk import Topology
from runtime.refusals import Refusal
from tests.test_wiring import _NoCalls


def test_writes_racing_the_close_end_in_a_refusal_or_in_the_store(tmp_path: Path) -> None:
    for run in range(20):
        node = Node(0, "127.0.0.1:1", _NoCalls("zk"), Topology(1, (0, 1, 2)),
                    RocksStore(str(tmp_path / f"r{run}")))
        outcomes: list[str] = []
        start = threading.Event()

        def write(t: int) -> None:
            start.wait()
            for i in range(2_000):
                e = Entry(t * 1_000_000 + i, 1, 1, b"x" * 100)
                try:
                    node.local_batch([AddEntries(0, 1, 1, (e,), -1)])
                except Refusal as r:
                    outcomes.append(r.code.name)
                    return
                except Exception as x:  # noqa: BLE001 (the defect: reported below)
                    outcomes.append(f"{type(x).__name__}: {x}")
                    return
            outcomes.append("done")
        ts = [threading.Thread(target=write, args=(t,)) for t in range(4)]
        for t in ts:
            t.start()
        start.set()
        node.stop()
        for t in ts:
            t.join(30)
        assert set(outcomes) <= {"done", grpc.StatusCode.UNAVAILABLE.name}, outcomes
