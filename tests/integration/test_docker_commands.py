"""No Docker engine runs here, so run what the images run: every command of
docker/compose.yaml, with its hosts mapped to loopback ports, forms a working cluster: a
ZooKeeper ensemble of three, the certificates, and three machines of two workers each
under mutual TLS, the shards then placed one copy per machine."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cluster.ports import free_ports
from cluster.zookeeper import four_letter
from midtown import Client
from tests.integration.conftest import wait_for

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
ZKS = ("zk-1", "zk-2", "zk-3")
MACHINES = ("machine-1", "machine-2", "machine-3")


class Loopback:
    """The compose file's names and paths mapped onto this machine: each ZooKeeper member
    on loopback ports of its own, each volume a directory under `tmp`."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.zk = {z: free_ports(3) for z in ZKS}  # client, peer, election

    @property
    def zk_hosts(self) -> str:
        return ",".join(f"127.0.0.1:{p[0]}" for p in self.zk.values())

    def arg(self, prev: str, arg: str, service: str) -> str:
        if arg == "zk-1:2181,zk-2:2181,zk-3:2181":
            return self.zk_hosts
        if prev == "--peers":
            return ",".join(f"127.0.0.1:{p[1]}:{p[2]}" for p in self.zk.values())
        if prev == "--port" and service in self.zk:
            return str(self.zk[service][0])
        if prev in ("--host", "--advertise"):
            return "127.0.0.1"
        if prev == "--base-port":
            return "0"  # free ports: three machines share this one's
        if arg == "/data":
            return str(self.tmp / service)
        if arg.startswith("/certs"):
            return str(self.tmp / "certs") + arg[len("/certs"):]
        return arg

    def command(self, services: dict, name: str) -> list[str]:
        cmd = services[name]["command"]
        out = [self.arg(cmd[i - 1] if i else "", a, name) for i, a in enumerate(cmd)]
        if out[0] == "midtown":
            return [sys.executable, "-m", "cli", *out[1:]]
        assert out[0] == "python"
        return [sys.executable, *out[1:]]

    def env(self, compose: dict, service: str | None = None) -> dict[str, str]:
        """A service's environment (its own, or the common one), mapped."""
        given = compose["x-midtown"]["environment"]
        if service is not None and "environment" in compose["services"][service]:
            given = compose["services"][service]["environment"]
        base = {k: v for k, v in os.environ.items() if not k.startswith("MIDTOWN_")}
        return {**base, "PYTHONPATH": str(ROOT), **{k: self.arg("", str(v), "") for k, v in given.items()}}


def test_compose_commands_form_a_cluster_over_three_machines(tmp_path: Path) -> None:
    compose = yaml.safe_load((ROOT / "docker" / "compose.yaml").read_text())
    services = compose["services"]
    assert set(services) == {*ZKS, "certs", "init", *MACHINES, "admin"}
    for f in ("Dockerfile", "midtown-machine.service"):
        assert (ROOT / "docker" / f).exists()
    lo = Loopback(tmp_path)
    env = lo.env(compose)
    assert env["MIDTOWN_ZK"] == lo.zk_hosts
    procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(name: str) -> None:
        out = open(tmp_path / f"{name}.out", "wb")
        procs[name] = subprocess.Popen(lo.command(services, name), env=env, stdout=out,
                                       stderr=subprocess.STDOUT, start_new_session=True)

    def said(name: str) -> str:
        return (tmp_path / f"{name}.out").read_text(errors="replace")

    def serving(z: str) -> bool:
        try:
            return b"Mode: " in four_letter("127.0.0.1", lo.zk[z][0], b"srvr")
        except OSError:
            return False

    try:
        for z in ZKS:
            start(z)
        wait_for(lambda: all(serving(z) for z in ZKS), 90, "a ZooKeeper quorum", every_s=0.5)
        for once in ("certs", "init"):
            p = subprocess.run(lo.command(services, once), env=lo.env(compose, once), capture_output=True,
                               text=True, timeout=120)
            assert p.returncode == 0, p.stdout + p.stderr
        for m in MACHINES:
            start(m)
        for m in MACHINES:
            wait_for(lambda m=m: "running in the foreground" in said(m) or procs[m].poll() is not None, 240,
                     f"{m} up", every_s=0.5)
            assert procs[m].poll() is None, said(m)
            assert "mutual TLS between machines" in said(m)

        def admin(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run([sys.executable, "-m", "cli", *args], env=env, capture_output=True,
                                  text=True, timeout=600)
        placed = admin("cluster", "rebalance", "--json")
        assert placed.returncode == 0, placed.stderr
        checked = admin(*lo.command(services, "admin")[3:], "--json")
        assert checked.returncode == 0, checked.stdout + checked.stderr
        out = json.loads(checked.stdout)
        assert [(r["machine"], r["locality"], len(r["storage_nodes"])) for r in out["machines"]] == [
            ("machine-1", "zone=a", 2), ("machine-2", "zone=b", 2), ("machine-3", "zone=c", 2)]
        assert out["ok"] and out["shards_sharing_a_machine"] == 0
        assert admin("dataset", "create", "t").returncode == 0
        with Client(zk=lo.zk_hosts, timeout=30, tls_ca=str(tmp_path / "certs" / "ca.pem")) as db:
            db.put("t", "p", "k", b"v")
            got = db.get("t", "p", "k")
            assert got is not None and got.value == b"v"
        # A machine stops its workers when stopped (SIGTERM, as Docker and systemd stop it).
        procs["machine-1"].send_signal(signal.SIGTERM)
        assert procs["machine-1"].wait(120) == 0
        assert said("machine-1").rstrip().endswith("stopped")
    finally:
        for p in reversed(list(procs.values())):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs.values():
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
