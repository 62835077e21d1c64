"""A pool of five log servers (issue 32): each segment opens on an ensemble of three
(log/ensemble.py), strong reads ask the last segment's own replicas (log/read_index.py),
and a writer's death moves its logs to new segments on live servers."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from catalog import datasets
from catalog.routing import log_of, shard_of
from cluster import Cluster
from log import limits
from log import zk as zkpaths
from log.catch_up import CATCHUP_POLL_S
from midtown import Client
from tests.integration.conftest import started, wait_for
from tests.integration.test_kv import run_history
from tests.linearizability import check_per_key

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with started(Path(tmp_path_factory.mktemp("pool")) / "c", log_server_count=5, logs=8,
                 kv_logs=3) as c:
        c.create_dataset("t")
        yield c


def _segments(c: Cluster) -> dict[int, tuple[int, tuple[int, ...]]]:
    """Each log's last segment: (epoch, replicas)."""
    zk = zkpaths.connect(c.zk_hosts)
    try:
        out = {}
        for log_id in range(c.logs):
            meta, _ = zkpaths.read_metadata(zk, log_id)
            seg = meta.last_segment
            assert seg is not None, f"log {log_id} has no segment"
            out[log_id] = (seg.epoch, seg.replicas)
        return out
    finally:
        zk.stop()
        zk.close()


def _kill_the_writer(pool: Cluster, zk: Any, log_id: int) -> int:
    """SIGKILL the writer of a log; once another server writes it, the one killed."""
    w = zkpaths.read_writer(zk, log_id)
    assert w is not None
    dead = int(w["server"])
    pool.kill(f"log-{dead}")
    wait_for(lambda: (x := zkpaths.read_writer(zk, log_id)) and x["server"] != dead
             and x.get("state") != "recovering", 60, "a new writer")
    return dead


def test_every_segment_is_on_three_of_the_five_servers(pool: Cluster) -> None:
    pool_ids = {p.server_id for p in pool.log_servers()}
    assert len(pool_ids) == 5
    for log_id, (_, replicas) in _segments(pool).items():
        assert len(set(replicas)) == len(replicas) == limits.ENSEMBLE_SIZE, (log_id, replicas)
        assert set(replicas) <= pool_ids


def test_linearizable_when_a_writer_dies_and_its_log_moves_to_live_servers(pool: Cluster) -> None:
    """Puts, strong gets, check-and-sets and deletes on hot keys while the writer of their
    log is SIGKILLed: every key's history linearizes (strong reads by the read index of the
    segment's own replicas), and the log's new segment leaves the dead server out."""
    keys = ["h0", "h1", "h2"]
    zk = zkpaths.connect(pool.zk_hosts)
    d = datasets.get(zk, "t")
    assert d is not None
    log_id = log_of(shard_of(d.id, b"h0", 64), pool.kv_logs)
    keys = [k for k in (f"h{i}" for i in range(40)) if log_of(shard_of(d.id, k.encode(), 64),
                                                                pool.kv_logs) == log_id][:3]
    killed: list[int] = []
    epochs: list[int] = []

    def kill_the_writer() -> None:
        meta, _ = zkpaths.read_metadata(zk, log_id)
        epochs.append(meta.epoch)
        killed.append(_kill_the_writer(pool, zk, log_id))

    try:
        with Client(zk=pool.zk_hosts, timeout=20) as db:
            history = run_history(db, keys, kill_the_writer)
        assert check_per_key(history) == []
        # The segment the takeover opened leaves the dead server out. (A later writer
        # change on a loaded machine, with live servers' sessions lapsing, may fill an
        # ensemble from the pool's servers that are not live: log/ensemble.py choose.)
        meta, _ = zkpaths.read_metadata(zk, log_id)
        opened = next(seg for seg in meta.segments if seg.epoch > epochs[0])
        assert killed[0] not in opened.replicas, f"the new segment {opened} is on the dead server"
    finally:
        zk.stop()
        zk.close()
        if killed:
            pool.restart(f"log-{killed[0]}")


def test_a_log_server_lost_for_good_is_replaced_in_its_sealed_segments(pool: Cluster) -> None:
    """The writer of a log is SIGKILLed and not started again: writes go on (a new writer,
    its segment on live servers), the writer re-replicates the sealed segment the dead
    server held (log/rereplicator.py): a live server holding every committed entry of it
    takes its place in the metadata. Then a second replica of that segment dies too, and
    every acknowledged entry of the log still reads back."""
    from log.client import LogClient

    log_id = pool.kv_logs  # a log no storage node truncates: every entry stays to be read
    zk = zkpaths.connect(pool.zk_hosts)
    killed: list[int] = []
    try:
        with LogClient(pool.zk_hosts) as logs:
            acked = [logs.append(log_id, [b"before-%d" % i]) for i in range(20)]
            killed.append(_kill_the_writer(pool, zk, log_id))
            acked += [logs.append(log_id, [b"after-%d" % i], timeout_s=30) for i in range(20)]

            def sealed_on_dead() -> list[tuple[int, tuple[int, ...]]]:
                meta, _ = zkpaths.read_metadata(zk, log_id)
                return [(s.epoch, s.replicas) for s in meta.segments if s.sealed and killed[0] in s.replicas]
            wait_for(lambda: not sealed_on_dead(), 60,
                     f"the sealed segments of log {log_id} off server {killed[0]}")
            meta, _ = zkpaths.read_metadata(zk, log_id)
            sealed = [s for s in meta.segments if s.sealed and s.end is not None and s.end >= s.first]
            assert sealed, "the writer's death sealed a segment with entries"
            # A second replica of the newest sealed segment dies: what was acknowledged stays.
            writer = int(zkpaths.read_writer(zk, log_id)["server"])  # type: ignore[index]
            second = next(r for r in sealed[-1].replicas if r not in (killed[0], writer))
            killed.append(second)
            pool.kill(f"log-{second}")
            first = min(r["first"] for r in logs.status() if r["log"] == log_id)
            last = max(a.first_position + a.count - 1 for a in acked)
            got = [e.position for e in logs.read(log_id, first, max_entries=last - first + 1, timeout_s=30)
                   if e.position <= last]
            assert got == list(range(first, last + 1))
    finally:
        zk.stop()
        zk.close()
        for k in killed:
            pool.restart(f"log-{k}")


def _replica_stub(pool: Cluster, server_id: int) -> Any:
    from midtown_pb import log_pb2_grpc

    addr = next(p.addr for p in pool.log_servers() if p.server_id == server_id)
    from runtime import transport

    return log_pb2_grpc.ReplicaStub(transport.channel(addr))


def _held(pool: Cluster, server_id: int, log_id: int, seg_epoch: int, lo: int, hi: int) -> set[int]:
    """The positions lo..hi of a segment that a server holds in its own store."""
    from log import codec
    from log.messages import ReadRange

    rep = _replica_stub(pool, server_id).ReadRange(
        codec.read_to_pb(ReadRange(log_id, 0, seg_epoch, lo, hi)), timeout=10)
    return {e.position for e in codec.read_reply_from_pb(rep).entries}


def test_a_log_server_is_decommissioned_while_writes_go_on_and_added_back(pool: Cluster) -> None:
    """`midtown log-server decommission X`, X the writer of a log: appends to every log go
    on meanwhile and all are acknowledged; then no segment with entries still held names
    X, it writes no log, it is out of the pool, and every acknowledged entry reads back.
    Each segment's entries are stored by its replicas and by no other server (but X, whose
    copies of the segments moved off it stay until truncated): with five servers, each
    stores about 3/5 of them. `log-server add X` puts it back. A server that is not in the
    pool is refused."""
    from log.client import LogClient

    def mt(*args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
        p = subprocess.run([sys.executable, "-m", "cli", "log-server", *args, "--zk", pool.zk_hosts],
                           capture_output=True, text=True, timeout=300)
        assert (p.returncode == 0) == ok, p.stdout + p.stderr
        return p

    bad = mt("decommission", "17", ok=False)
    assert bad.returncode == 2 and "ID: log server 17 is not in the pool" in bad.stderr
    bad = mt("add", "-1", ok=False)
    assert bad.returncode == 2 and "ID: -1, must be 0 or more" in bad.stderr
    zk = zkpaths.connect(pool.zk_hosts)
    stop = threading.Event()
    acked: list[tuple[int, bytes, Any]] = []
    errors: list[BaseException] = []
    try:
        # The writer of log 0 (the test before restarted two servers: it may be changing).
        x = int(wait_for(lambda: zkpaths.read_writer(zk, 0), 30, "a writer of log 0")["server"])

        def append() -> None:
            with LogClient(pool.zk_hosts) as logs:
                i = 0
                while not stop.is_set():
                    log_id = i % pool.logs
                    try:
                        acked.append((log_id, b"d-%d" % i, logs.append(log_id, [b"d-%d" % i], timeout_s=30)))
                    except BaseException as e:  # noqa: BLE001 (the test reports it)
                        errors.append(e)
                        return
                    i += 1
        t = threading.Thread(target=append)
        t.start()
        try:
            # Entries on every log before X leaves: the segments it seals then hold some (a
            # fresh client's first appends had once come after the decommission).
            wait_for(lambda: errors or {lg for lg, _, _ in list(acked)} == set(range(pool.logs)), 60,
                     "an acknowledged entry on every log")
            out = json.loads(mt("decommission", str(x), "--json").stdout)
        finally:
            stop.set()
            t.join(60)
        assert errors == [] and len(acked) > pool.logs
        assert out["removed"] and x not in out["pool"]
        rows = {r["server"]: r for r in json.loads(mt("list", "--json").stdout)}
        assert rows[x]["segments"] == 0 and rows[x]["writes"] == 0 and rows[x]["leaving"]
        assert not rows[x]["in_pool"]
        for log_id in range(pool.logs):
            meta, _ = zkpaths.read_metadata(zk, log_id)
            before, _ = zkpaths.read_truncation(zk, log_id)
            named = [s.epoch for s in meta.segments if x in s.replicas and (s.end is None or s.end >= before)]
            assert named == [], (log_id, named)
            assert zkpaths.read_writer(zk, log_id)["server"] != x  # type: ignore[index]
        with LogClient(pool.zk_hosts) as logs:
            for log_id in range(pool.kv_logs, pool.logs):  # the logs no storage node truncates
                mine = {a.first_position: data for lg, data, a in acked if lg == log_id}
                lo, hi = min(mine), max(mine)
                read = logs.read(log_id, lo, max_entries=hi - lo + 1, timeout_s=30)
                got = {e.position: e.payload for e in read}
                assert all(got.get(p) == data for p, data in mine.items()), log_id
        _stored_by_their_replicas_only(pool, zk, acked, but=x)
        mt("add", str(x))
        rows = {r["server"]: r for r in json.loads(mt("list", "--json").stdout)}
        assert rows[x]["in_pool"] and not rows[x]["leaving"]
    finally:
        zk.stop()
        zk.close()


def test_a_log_server_that_lost_its_disk_refuses_to_start_until_decommissioned(pool: Cluster) -> None:
    """A log server restarted under its id on an empty data directory (its disk lost) exits
    with EXIT_CONFIG and says what to do (log/store_identity.py): serving, it could answer
    recoveries as if it had never held what it acknowledged. Once decommissioned (its
    segments copied from the others) and added back, it starts on the empty directory."""
    import shutil

    from runtime.process import EXIT_CONFIG

    zk = zkpaths.connect(pool.zk_hosts)
    try:
        writers = {int(w["server"]) for log_id in range(pool.logs) if (w := zkpaths.read_writer(zk, log_id))}
        # (Each recorded at its first start; the one the test before decommissioned and added
        # back while it ran records its store again, within seconds.)
        wait_for(lambda: all(zkpaths.read_store_identity(zk, p.server_id) for p in pool.log_servers()), 30,
                 "every log server's store recorded")
        # (one that writes no log if there is one: which servers the elections picked is
        # theirs to say, and with eight logs on five servers each may write one)
        ids = [p.server_id for p in pool.log_servers()]
        x = next((i for i in ids if i not in writers), ids[-1])
        name = f"log-{x}"
        pool.kill(name)
        shutil.rmtree(pool.dir / name)
        pool.restart(name)
        assert pool.wait_exit(name, 60) and pool.exit_code(name) == EXIT_CONFIG
        said = (pool.dir / "logs" / f"{name}.log").read_text()
        assert f"its replica store is empty, but ZooKeeper records that server {x}" in said
        assert f"midtown log-server decommission {x}" in said
        recorded = zkpaths.read_store_identity(zk, x)
        for args in (("decommission", str(x)), ("add", str(x))):
            p = subprocess.run([sys.executable, "-m", "cli", "log-server", *args, "--zk", pool.zk_hosts],
                               capture_output=True, text=True, timeout=300)
            assert p.returncode == 0, p.stdout + p.stderr
            if args[0] == "decommission":
                assert zkpaths.read_store_identity(zk, x) == recorded  # still refused meanwhile
        assert zkpaths.read_store_identity(zk, x) is None  # added back: forgotten
        pool.restart(name)
        wait_for(lambda: x in zkpaths.servers(zk) and zkpaths.read_store_identity(zk, x) is not None, 60,
                 f"log server {x} to start on its new disk")
    finally:
        zk.stop()
        zk.close()


def _stored_by_their_replicas_only(pool: Cluster, zk: Any, acked: list[tuple[int, bytes, Any]],
                                   but: int) -> None:
    servers = {p.server_id for p in pool.log_servers()}
    others: list[tuple[int, int, int, int, int, tuple[int, ...]]] = []
    sealed = 0  # segments with entries of the test that are sealed (the old catch-up filled those)
    for log_id in range(pool.logs):
        mine = sorted(a.first_position for lg, _, a in acked if lg == log_id)
        meta, _ = zkpaths.read_metadata(zk, log_id)
        for seg in meta.segments:
            want = {p for p in mine if p >= seg.first and (seg.end is None or p <= seg.end)}
            if not want:
                continue
            lo, hi = min(want), max(want)

            def holds(r: int) -> bool:  # what is not truncated yet (logs 0..2 carry shards)
                before, _ = zkpaths.read_truncation(zk, log_id)
                return {p for p in want if p >= before} <= _held(pool, r, log_id, seg.epoch, lo, hi)
            for r in seg.replicas:
                wait_for(lambda r=r: holds(r), 30,
                         f"server {r} to hold log {log_id}'s positions {lo}..{hi} of segment {seg.epoch}")
            others += [(o, log_id, seg.epoch, lo, hi, seg.replicas)
                       for o in servers - set(seg.replicas) - {but}]
            sealed += seg.sealed
    assert sealed, "no sealed segment holds an entry the test appended"
    time.sleep(2 * CATCHUP_POLL_S)  # a catch-up round that would fill the others has run
    for o, log_id, seg_epoch, lo, hi, replicas in others:
        assert _held(pool, o, log_id, seg_epoch, lo, hi) == set(), \
            f"server {o} stores log {log_id}'s segment {seg_epoch} on {replicas}"


def test_a_dead_copy_leaves_the_open_segment_and_a_second_death_stalls_nothing(tmp_path: Path) -> None:
    """Five log servers, appends going on to one log (issue 48): a follower of its open
    segment is SIGKILLed for good, and the writer moves the segment to live servers itself
    (an ensemble change: log/ensemble_change.py, Writer.change_ensemble), with no writer
    change; then a follower of the new segment is SIGKILLed too, and the segment moves
    again. Appends never stop for long (once, a second death left a log on one live copy
    until the next writer change, and it stalled); after both servers come back every
    acknowledged entry reads back where it was acknowledged."""
    from log.client import LogClient

    with started(tmp_path / "c", log_server_count=5, logs=4, kv_logs=1) as c:
        log_id = c.kv_logs  # a log no storage node truncates: every entry stays to be read
        zk = zkpaths.connect(c.zk_hosts)
        stop = threading.Event()
        acked: list[tuple[float, bytes, Any]] = []
        errors: list[BaseException] = []
        killed: list[int] = []

        def append() -> None:
            with LogClient(c.zk_hosts) as logs:
                i = 0
                while not stop.is_set():
                    try:
                        a = logs.append(log_id, [b"e-%d" % i], timeout_s=30)
                    except BaseException as e:  # noqa: BLE001 (reported below)
                        errors.append(e)
                        return
                    acked.append((time.monotonic(), b"e-%d" % i, a))
                    i += 1
                    time.sleep(0.005)

        def open_segment() -> Any:
            seg = zkpaths.read_metadata(zk, log_id)[0].last_segment
            assert seg is not None
            return seg

        def kill_a_follower() -> tuple[float, Any]:
            seg = open_segment()
            writer = int(zkpaths.read_writer(zk, log_id)["server"])  # type: ignore[index]
            victim = next(r for r in seg.replicas if r != writer and r not in killed)
            killed.append(victim)
            c.kill(f"log-{victim}")
            return time.monotonic(), seg

        t = threading.Thread(target=append)
        try:
            writer0 = int(wait_for(lambda: zkpaths.read_writer(zk, log_id), 30, "a writer")["server"])
            t.start()
            wait_for(lambda: len(acked) > 50 or errors, 60, "appends before the first kill")
            moves = []
            for _ in range(2):
                at, before = kill_a_follower()
                moved = wait_for(lambda: (s := open_segment()).epoch > before.epoch and s, 30,
                                 f"the open segment off server {killed[-1]}")
                moves.append((time.monotonic() - at, before.replicas, moved.replicas))
                assert not set(moved.replicas) & set(killed), moves
                n = len(acked)
                wait_for(lambda: len(acked) > n + 50 or errors, 60, "appends after the move")
        finally:
            stop.set()
            t.join(60)
        try:
            assert errors == [], errors[:1]
            # The writer never changed: it moved its own segment.
            assert int(zkpaths.read_writer(zk, log_id)["server"]) == writer0  # type: ignore[index]
            times = [a[0] for a in acked]
            gaps = sorted((b - a for a, b in zip(times, times[1:])), reverse=True)
            print(f"ensemble changes {[(round(s, 2), b, a) for s, b, a in moves]}, longest gaps between "
                  f"acknowledged appends {[round(g, 3) for g in gaps[:3]]} s")
            assert gaps[0] < 5.0, f"the log stalled for {gaps[0]:.1f} s"
            for k in killed:
                c.restart(f"log-{k}")
            with LogClient(c.zk_hosts) as logs:
                last = max(a.first_position for _, _, a in acked)
                first = min(a.first_position for _, _, a in acked)
                got = {e.position: e.payload for e in logs.read(log_id, first, max_entries=last - first + 1,
                                                                 timeout_s=60)}
            lost = [(a.first_position, p) for _, p, a in acked if got.get(a.first_position) != p]
            assert lost == [], f"{len(lost)} acknowledged entries not read back: {lost[:3]}"
        finally:
            zk.stop()
            zk.close()
