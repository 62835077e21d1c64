"""A network partition isolating the log writer from its followers and from ZooKeeper,
made for real: each log server runs in a network namespace of its own, joined to the
others by veth pairs and a bridge, and the partition is iptables rules inside the
writer's namespace (this kernel has no netem). Coordinators and storage nodes can still
reach the isolated writer: the nastiest kind of partition, a writer that clients see but
that can reach neither a quorum nor ZooKeeper.

Needs root, `ip netns` and iptables (scripts/install.sh installs iptables)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cluster import netns
from log import zk as logzk
from log.client import LogClient
from midtown import Client
from tests.integration.conftest import Appenders, started, verify_logs, wait_for
from tests.integration.test_kv import run_history
from tests.linearizability import check_per_key

pytestmark = pytest.mark.integration

SUBNET = "10.201.{}.{}"  # addresses of this test's own namespaces only


@pytest.fixture
def hosts() -> Iterator[dict[str, tuple[str, str]]]:
    """Three namespaces (one per log server) on a bridge whose root-side address is where
    ZooKeeper listens. Removed afterwards, whatever happened."""
    with netns.namespaces(3, SUBNET, "p") as (made, bridge_ip):
        places = {f"log-{i}": (ns.name, ns.ip) for i, ns in enumerate(made)}
        places["zookeeper"] = ("", bridge_ip)
        yield places


def partition(places: dict[str, tuple[str, str]], victim: str, zk_port: int) -> None:
    """Cut `victim` (a log server) off from the other log servers and from ZooKeeper."""
    ns, _ = places[victim]
    zk_ip = places["zookeeper"][1]
    rules = [["OUTPUT", "-d", zk_ip, "-p", "tcp", "--dport", str(zk_port)],
             ["INPUT", "-s", zk_ip, "-p", "tcp", "--sport", str(zk_port)]]
    for name, (_, ip) in places.items():
        if name.startswith("log-") and name != victim:
            rules += [["OUTPUT", "-d", ip], ["INPUT", "-s", ip]]
    for r in rules:
        netns.sh("ip", "netns", "exec", ns, "iptables", "-A", *r, "-j", "DROP")


def heal(places: dict[str, tuple[str, str]], victim: str) -> None:
    netns.sh("ip", "netns", "exec", places[victim][0], "iptables", "-F")


def test_writer_partitioned_from_followers_and_zookeeper(tmp_path: Path,
                                                        hosts: dict[str, tuple[str, str]]) -> None:
    with started(tmp_path / "c", places=hosts, coordinators=2) as c:
        c.create_dataset("t")
        zk_port = c.procs["zookeeper"].port
        with LogClient(c.zk_hosts) as logs, Client(zk=c.zk_hosts, timeout=30) as db:
            writer = wait_for(lambda: logzk.read_writer(logs.zk, 0), 30, "a writer for log 0")
            victim = f"log-{writer['server']}"
            appenders = Appenders(logs, logs=[1, 2, 3, 4], threads=4).start()  # not the KV log

            def disturb() -> None:
                wait_for(lambda: appenders.count() > 100, 60, "appends before the partition")
                partition(hosts, victim, zk_port)
                try:
                    # A writer of log 0 on the majority side takes over and is used.
                    wait_for(lambda: (w := logzk.read_writer(logs.zk, 0)) is not None
                             and w["server"] != writer["server"] and w.get("state") == "writing",
                             60, "a new writer on the majority side")
                    n = appenders.count()
                    wait_for(lambda: appenders.count() > n + 100, 60, "appends during the partition")
                    time.sleep(2)
                finally:
                    heal(hosts, victim)
                n = appenders.count()
                wait_for(lambda: appenders.count() > n + 100, 60, "appends after healing")

            try:
                history = run_history(db, ["h0", "h1", "h2"], disturb)
            finally:
                appenders.stop()
            assert check_per_key(history) == [], "a linearizability violation"
            # Every acknowledged append is on every replica, once, in order: none lost.
            verify_logs(logs, appenders.acks, [p.addr for p in c.log_servers()])
