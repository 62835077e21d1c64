"""Power loss on log servers: their data directories sit on a filesystem that loses every
write not yet synced (tests/faults/lossyfs.py). The third log server is paused past its
session first, so that the entries acknowledged meanwhile are held by the two others
alone; then both lose power at the same moment. An entry acknowledged to a client was
synced on both; had either acknowledged before its sync, entries would be lost here (with
the log servers' WAL sync turned off, this test fails: tried)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from log import zk as logzk
from log.client import LogClient
from midtown import Client
from tests.faults.lossyfs import Mount
from tests.integration.conftest import Appenders, started, verify_logs, wait_for
from tests.integration.test_kv import run_history
from tests.linearizability import check_per_key

pytestmark = pytest.mark.integration


def test_two_log_servers_lose_power_at_once(tmp_path: Path) -> None:
    cdir = tmp_path / "c"
    cdir.mkdir()
    mounts = {}
    for name in ("log-1", "log-2"):
        m = Mount(tmp_path / f"{name}-disk", tmp_path / f"{name}-mnt").start()
        mounts[name] = m
        (cdir / name).symlink_to(m.mountpoint)  # the log server's --data is on the lossy disk
    try:
        with started(cdir, coordinators=1) as c:
            c.create_dataset("t")
            with LogClient(c.zk_hosts) as logs, Client(zk=c.zk_hosts, timeout=30) as db:
                appenders = Appenders(logs, logs=[1, 2, 3, 4], threads=4).start()  # not the KV log

                def disturb() -> None:
                    for _ in range(2):
                        n = appenders.count()
                        wait_for(lambda: appenders.count() > n + 100, 90, "appends before the loss")
                        # log-0 stops answering (paused past its session): every entry from now
                        # on is acknowledged by log-1 and log-2 alone, and held by them alone.
                        c.signal("log-0", signal.SIGSTOP)
                        try:
                            wait_for(lambda: logs.zk.exists(f"{logzk.SERVERS}/0") is None, 60,
                                     "log-0's session to expire")
                            n = appenders.count()
                            wait_for(lambda: appenders.count() > n + 200, 90,
                                     "appends acknowledged by log-1 and log-2 alone")
                            for name, m in mounts.items():  # both at once: a rack loses power
                                c.signal(name, signal.SIGKILL)
                                m.power_loss()
                        finally:
                            c.signal("log-0", signal.SIGCONT)
                        for name in mounts:
                            c.wait_exit(name)
                        for name, m in mounts.items():
                            m.start()
                            c.restart(name)
                        wait_for(lambda: len(logzk.servers(logs.zk)) == 3, 60, "the servers back")
                    n = appenders.count()
                    wait_for(lambda: appenders.count() > n + 200, 90, "appends after the losses")

                try:
                    history = run_history(db, ["h0", "h1", "h2"], disturb)
                finally:
                    appenders.stop()
                assert check_per_key(history) == [], "a linearizability violation"
                verify_logs(logs, appenders.acks, [p.addr for p in c.log_servers()])
    finally:
        for m in mounts.values():
            m.stop()
