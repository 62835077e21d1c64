"""A cluster laid over four machines played by network namespaces (tests/integration/
netns.py): each machine has its own address on a bridge, three of them run a member of a
ZooKeeper ensemble, and each runs `midtown machine up --workers 2` (two host-layout
workers, ids from ZooKeeper), with mutual TLS between machines (the default: certificates
from `midtown cluster certs`). No process listens on 127.0.0.1: every address is a
namespace's, and the test's clients reach them over the bridge. A caller on another
machine without a certificate of the cluster's CA is refused on every internal method.

Under the linearizability checker's workload: every process of one machine is SIGKILLed at
once (its ZooKeeper member too) and the machine brought back; another machine's network
goes down and comes back; the machine beside the probed key's log's writer is paused whole
(SIGSTOP, its ZooKeeper member too if it has one) past the servers' ZooKeeper sessions and
resumed, and then the machine of ZooKeeper's leader the same way; a third is killed for
good and its copies moved to the others (`node decommission`, `log-server decommission`).
Nothing acknowledged is lost (the checker), writes go on while each machine is away, no
server logs a traceback at WARNING or above (an expected fault is one line), and at the
end every shard and open segment has its copies on distinct machines (`cluster check`).

MIDTOWN_NETNS_ROUNDS=N repeats the kill, the partition and the pause N times (`make soak-machines`:
the longer run, outside the suite)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from bench.failover import Prober
from cluster import netns
from cluster.zookeeper import four_letter
from midtown import Client
from tests.integration.conftest import wait_for
from tests.integration.test_kv import run_history
from tests.linearizability import check_per_key

WHY_NOT = netns.can_make()
pytestmark = [pytest.mark.integration, pytest.mark.skipif(WHY_NOT is not None, reason=f"{WHY_NOT}")]
SUBNET = "10.202.{}.{}"  # this test's namespaces only (test_partition.py uses 10.201)
MACHINES, ZK_MEMBERS, WORKERS = 4, 3, 2
ZK_PORT, BASE_PORT = 2181, 7000
ROUNDS = int(os.environ.get("MIDTOWN_NETNS_ROUNDS", "1"))
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} ")  # a log line's start (not a traceback's)
PAUSE_S = 6.0  # past the servers' ZooKeeper sessions (4 s)


@dataclass
class Machines:
    spaces: list[netns.Namespace]
    dir: Path
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def zk(self) -> str:
        return ",".join(f"{ns.ip}:{ZK_PORT}" for ns in self.spaces[:ZK_MEMBERS])

    def _start(self, name: str, ns: netns.Namespace, cmd: list[str]) -> None:
        out = open(self.dir / f"{name}.log", "ab")
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
        self.procs[name] = subprocess.Popen(ns.run(*cmd), stdout=out, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, env=env)

    def start_zk(self, i: int) -> None:
        ns = self.spaces[i]
        peers = ",".join(f"{m.ip}:2888:3888" for m in self.spaces[:ZK_MEMBERS])
        self._start(f"zk-{i}", ns, [sys.executable, "-m", "cluster.zookeeper", "--port", str(ZK_PORT),
                                    "--host", ns.ip, "--data", str(self.dir / f"zk-{i}"), "--id", str(i + 1),
                                    "--peers", peers])

    def zk_serving(self, i: int) -> bool:
        try:
            return b"Mode: " in four_letter(self.spaces[i].ip, ZK_PORT, b"srvr")
        except OSError:
            return False

    def start_machine(self, i: int) -> None:
        ns = self.spaces[i]
        (self.dir / f"m{i}.log").unlink(missing_ok=True)
        self._start(f"m{i}", ns, [sys.executable, "-m", "cli", "machine", "up", "--zk", self.zk, "--dir",
                                  str(self.dir / f"m{i}"), "--workers", str(WORKERS), "--machine", f"m{i}",
                                  "--locality", f"zone=z{i}", "--host", ns.ip, "--base-port", str(BASE_PORT),
                                  "--tls-dir", str(self.dir / f"tls-m{i}"), "--timeout", "180"])

    def make_certs(self) -> None:
        """The cluster's CA, each machine's certificate (only ca.pem and its own pair copied
        to its directory, as docs/operations.md says), and one for the command line."""
        for i, ns in enumerate(self.spaces):
            self.mt("cluster", "certs", "--dir", str(self.dir / "ca"), "--machine", f"m{i}", "--address",
                    ns.ip, zk=False)
            mine = self.dir / f"tls-m{i}"
            mine.mkdir()
            for f in ("ca.pem", f"m{i}.pem", f"m{i}.key"):
                shutil.copy(self.dir / "ca" / f, mine / f)
        self.mt("cluster", "certs", "--dir", str(self.dir / "ca"), "--machine", "admin", zk=False)

    @property
    def ca(self) -> str:
        return str(self.dir / "ca" / "ca.pem")

    def env(self) -> dict[str, str]:
        """The command line's: the admin certificate for internal calls, the CA for all."""
        return {**os.environ, "MIDTOWN_TLS_CA": self.ca,
                "MIDTOWN_TLS_CERT": str(self.dir / "ca" / "admin.pem"),
                "MIDTOWN_TLS_KEY": str(self.dir / "ca" / "admin.key")}

    def machine_up(self, i: int) -> bool:
        log = self.dir / f"m{i}.log"
        said = log.read_text(errors="replace") if log.exists() else ""
        if self.procs[f"m{i}"].poll() is not None:
            raise AssertionError(f"machine m{i} exited: {said[-3000:]}")
        return "running in the foreground" in said

    def ids(self, i: int) -> list[int]:
        return [int((self.dir / f"m{i}" / f"worker-{k}" / "id").read_text()) for k in range(WORKERS)]

    def kill(self, i: int) -> None:
        """Every process of machine i at once (its ZooKeeper member too), then reaped."""
        assert self.spaces[i].kill_all() > 0
        for name in (f"m{i}", f"zk-{i}"):
            if name in self.procs:
                self.procs[name].wait(30)

    def lay_out(self) -> None:
        """The ZooKeeper ensemble, the cluster made by machines, every machine up, the
        shards placed on three machines each, and the dataset "t"."""
        self.make_certs()
        for i in range(ZK_MEMBERS):
            self.start_zk(i)
        wait_for(lambda: all(self.zk_serving(i) for i in range(ZK_MEMBERS)), 90, "a ZooKeeper quorum",
                 every_s=0.5)
        self.mt("cluster", "init", "--by-machines", "--logs", "4", "--shards", "16", "--kv-logs", "2")
        for i in range(MACHINES):
            self.start_machine(i)
        for i in range(MACHINES):
            wait_for(lambda i=i: self.machine_up(i), 240, f"machine m{i}", every_s=0.5)
        # The machines joined one after another: place every shard on three of them.
        self.mt("cluster", "rebalance", "--json", timeout=600)
        self.mt("dataset", "create", "t")

    def pause(self, i: int, on: bool) -> None:
        """Every process of machine i stopped (SIGSTOP) or continued at once: a machine gone
        quiet without dying (a hung kernel, a stalled VM), its sockets open."""
        self.spaces[i].pause_all(on)

    def zk_leader(self) -> int | None:
        """The machine whose ZooKeeper member leads now (None: none answers so)."""
        for i in range(ZK_MEMBERS):
            try:
                if b"Mode: leader" in four_letter(self.spaces[i].ip, ZK_PORT, b"srvr"):
                    return i
            except OSError:
                pass
        return None

    def machine_of(self, addr: str) -> int:
        """The machine whose address `addr` (HOST:PORT) is on."""
        return [ns.ip for ns in self.spaces].index(addr.rsplit(":", 1)[0])

    def tracebacks_at_warning(self) -> list[str]:
        """Every traceback a server logged at WARNING or above (a defect: an expected
        fault is one line, runtime/faults.py), as the line that introduced it."""
        found = []
        for f in sorted(self.dir.glob("m*/logs/*.log")):
            lines = f.read_text(errors="replace").splitlines()
            for k, line in enumerate(lines):
                if line.startswith("Traceback (most recent call last)") and k > 0:
                    said = next((x for x in reversed(lines[max(0, k - 30):k]) if LOG_LINE.match(x)), "")
                    if re.search(r" (WARNING|ERROR|CRITICAL) ", said):
                        found.append(f"{f.relative_to(self.dir)}: {said[:300]}")
        return found

    def bring_back(self, i: int) -> None:
        if i < ZK_MEMBERS:
            self.start_zk(i)
        self.start_machine(i)
        wait_for(lambda: self.machine_up(i), 180, f"machine m{i} back", every_s=0.5)

    def mt(self, *args: str, ok: bool = True, timeout: float = 300,
           zk: bool = True) -> subprocess.CompletedProcess[str]:
        # (without --zk: `cluster certs`, which makes the certificates the environment names)
        p = subprocess.run([sys.executable, "-m", "cli", *args, *(["--zk", self.zk] if zk else [])],
                           capture_output=True, text=True, timeout=timeout, env=self.env() if zk else None)
        if ok:
            assert p.returncode == 0, f"midtown {' '.join(args)}: {p.stdout}{p.stderr}"
        return p


@pytest.fixture(scope="module")
def machines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Machines]:
    with netns.namespaces(MACHINES, SUBNET, "m") as (spaces, _):
        m = Machines(spaces, Path(tmp_path_factory.mktemp("machines")))
        m.lay_out()
        yield m


def check(m: Machines) -> dict[str, Any]:
    p = m.mt("cluster", "check", "--json", ok=False)
    assert p.returncode in (0, 1), p.stderr
    return json.loads(p.stdout)


def all_registered(m: Machines, back: str) -> None:
    """Until no machine's servers are down (`back`'s came back), 120 s at most."""
    wait_for(lambda: not any(r["down"] for r in check(m)["machines"]), 120,
             f"{back}'s servers registered again", every_s=1.0)


def first_after(prober: Prober, t: float) -> float:
    """Seconds from `t` to the first put started after it being acknowledged."""
    at = prober.first_ack_after(t, 120)
    assert at is not None, "no put acknowledged within 120 s"
    return at - t


def test_every_address_is_a_namespaces_and_copies_are_on_distinct_machines(machines: Machines) -> None:
    out = check(machines)
    assert out["ok"] and not out["one_machine"], out
    assert [r["machine"] for r in out["machines"]] == [f"m{i}" for i in range(MACHINES)]
    for i, r in enumerate(out["machines"]):
        assert sorted(r["storage_nodes"]) == sorted(machines.ids(i)) and not r["down"]
    assert out["shards_sharing_a_machine"] == 0 and out["open_segments_sharing_a_machine"] == 0
    for ns in machines.spaces:  # nothing of theirs on loopback
        inside = subprocess.run(ns.run("ss", "-ltn"), capture_output=True, text=True).stdout
        assert "127.0.0.1" not in inside, inside
        assert re.search(rf"{re.escape(ns.ip)}\]?:{BASE_PORT}\s", inside), inside


def test_a_caller_on_another_machine_without_a_certificate_is_refused_on_every_internal_method(
        machines: Machines) -> None:
    m1 = machines.spaces[1]
    listening = subprocess.run(m1.run("ss", "-ltnH"), capture_output=True, text=True).stdout
    ports = {int(line.split()[3].rsplit(":", 1)[1]) for line in listening.splitlines()}
    clients_and_metrics = {BASE_PORT + 4 * k + j for k in range(WORKERS) for j in (0, 3)}
    internal = sorted(ports - clients_and_metrics - {ZK_PORT, 2888, 3888})
    assert len(internal) == 3 * WORKERS, listening  # per worker: log server, storage node, callback
    stranger = [sys.executable, "-m", "tests.integration.stranger", machines.ca,
                *(f"{m1.ip}:{p}" for p in internal)]
    got = subprocess.run(machines.spaces[0].run(*stranger),
                         capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
                         cwd=str(Path(__file__).resolve().parents[2]))
    assert got.returncode == 0, got.stderr
    result = json.loads(got.stdout)
    methods = 0
    for addr, per in result.items():
        for path, codes in per.items():
            assert codes == {"plaintext": "UNAVAILABLE", "TLS without a certificate": "UNAVAILABLE"}, \
                (addr, path, codes)
            methods += 1
    assert methods == len(internal) * 23, methods  # every method of the four internal services
    # A holder of a certificate of the cluster's CA is served (the command line's).
    out = json.loads(machines.mt("node", "status", "--json", ok=False).stdout)
    assert all(r["state"] == "up" for r in out)


def test_a_machine_killed_a_machine_cut_off_and_a_machine_gone_for_good_lose_nothing(
        machines: Machines) -> None:
    m = machines
    gaps: dict[str, list[float]] = {"kill": [], "partition": [], "pause": [], "zk leader": []}
    with Client(zk=m.zk, timeout=30, tls_ca=m.ca) as db:
        probe = Prober(lambda n: db.put("t", "probe", "n", str(n).encode(), timeout=10))

        def paused(i: int, kind: str) -> None:
            """Machine i paused whole past its servers' sessions, the time to the next
            acknowledged put kept under `kind`, then resumed and registered again."""
            t = time.monotonic()
            m.pause(i, True)
            try:
                gaps[kind].append(first_after(probe, t))
                time.sleep(max(0.0, PAUSE_S - (time.monotonic() - t)))
            finally:
                m.pause(i, False)
            all_registered(m, f"m{i}")

        def disturb() -> None:
            for _ in range(ROUNDS):
                time.sleep(1)
                t = time.monotonic()
                m.kill(1)  # every process of m1 at once, its ZooKeeper member too
                gaps["kill"].append(first_after(probe, t))
                time.sleep(2)
                m.bring_back(1)
                # One machine out at a time: with m1 still starting, m2 cut off would leave
                # the copies on m1 and m2 of a segment or a shard out together (under load a
                # restart takes long enough for that: no put came within 120 s)
                all_registered(m, "m1")
                time.sleep(1)
                t = time.monotonic()
                m.spaces[2].link(False)  # m2 cut off: its ZooKeeper member, its workers
                gaps["partition"].append(first_after(probe, t))
                time.sleep(6)
                m.spaces[2].link(True)
                all_registered(m, "m2")
                # The machine beside the probed key's log's writer paused whole, past its
                # servers' ZooKeeper sessions: the log is taken over while it sleeps.
                time.sleep(1)
                beside = db.coordinator_for("t", "probe")
                paused(m.machine_of(beside) if beside is not None else 3, "pause")
                # ZooKeeper's leader's machine paused whole (every session suspended while
                # the others elect one; writers there or not): writes go on.
                time.sleep(1)
                leader = m.zk_leader()
                if leader is not None:
                    paused(leader, "zk leader")
            # m3 is lost for good: its copies move to the others.
            gone = m.ids(3)
            m.kill(3)
            wait_for(lambda: sum(len(r["down"]) for r in check(m)["machines"] if r["machine"] == "m3") == 4,
                     60, "m3's servers seen down (their sessions expired)", every_s=1.0)
            for n in gone:
                m.mt("node", "decommission", str(n), "--timeout", "300", timeout=400)
            for n in gone:
                m.mt("log-server", "decommission", str(n), "--timeout", "300", timeout=400)
        try:
            history = run_history(db, ["h0", "h1", "h2"], disturb)
        finally:
            probe.stop()
    assert check_per_key(history) == [], "a linearizability violation"
    out = check(m)
    assert [r["machine"] for r in out["machines"]] == ["m0", "m1", "m2"]
    assert out["ok"] and out["shards_sharing_a_machine"] == 0 and out["open_segments_sharing_a_machine"] == 0
    assert out["open_segments"] == 4
    assert m.tracebacks_at_warning() == []
    said = {k: ", ".join(f"{g:.2f}" for g in v) for k, v in gaps.items()}
    print(f"\nfrom a machine killed to the next acknowledged put: {said['kill']} s; "
          f"from a machine cut off: {said['partition']} s; "
          f"from the writer's machine paused: {said['pause']} s; "
          f"from ZooKeeper's leader's machine paused: {said['zk leader']} s")
