"""No Docker engine runs here, so run what the images run: every command of
docker/compose.yaml, with its hosts mapped to loopback ports, forms a working cluster."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from catalog import datasets, registry
from log import zk as zkpaths
from log.client import LogClient
from midtown import Client
from midtown.cluster.ports import free_ports
from tests.integration.conftest import wait_for

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def _localize(cmd: list[str], ports: dict[str, int], data: Path, name: str) -> list[str]:
    out = []
    for i, arg in enumerate(cmd):
        if ":" in arg and arg.split(":")[0] in ports:
            arg = f"127.0.0.1:{ports[arg.split(':')[0]]}"
        elif i > 0 and cmd[i - 1] == "--port":
            arg = str(ports[name])
        elif i > 0 and cmd[i - 1] == "--metrics-port":
            arg = str(free_ports(1)[0])
        elif i > 0 and cmd[i - 1] == "--host":
            arg = "127.0.0.1"
        elif arg == "/data":
            arg = str(data / name)
        out.append(arg)
    if out[0] == "midtown":
        out = [sys.executable, "-m", "midtown", *out[1:]]
    elif out[0] == "python":
        out[0] = sys.executable
    return out


def test_compose_commands_form_a_cluster(tmp_path: Path) -> None:
    compose = yaml.safe_load((ROOT / "docker" / "compose.yaml").read_text())
    services = compose["services"]
    servers = ["log-0", "log-1", "log-2", "storage-0", "storage-1", "storage-2",
               "coordinator-0", "coordinator-1"]
    assert set(services) == {"zookeeper", "init", *servers}
    assert (ROOT / "docker" / "Dockerfile").exists()
    ports = dict(zip(services, free_ports(len(services)), strict=True))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs: list[subprocess.Popen[bytes]] = []
    try:
        zk_cmd = _localize(services["zookeeper"]["command"], ports, tmp_path, "zookeeper")
        procs.append(subprocess.Popen(zk_cmd, env=env, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL, start_new_session=True))
        zk_hosts = f"127.0.0.1:{ports['zookeeper']}"
        from midtown.cluster.zookeeper import is_ok

        wait_for(lambda: is_ok("127.0.0.1", ports["zookeeper"]), 30, "ZooKeeper")
        init = _localize(services["init"]["command"], ports, tmp_path, "init")
        subprocess.run(init, env=env, check=True, capture_output=True, timeout=60)
        for name in servers:
            cmd = _localize(services[name]["command"], ports, tmp_path, name)
            procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL, start_new_session=True))
        with LogClient(zk_hosts) as c:
            wait_for(lambda: all(zkpaths.writer_is_live(c.zk, i) for i in range(16)), 60,
                     "writers for all 16 logs")
            assert c.append(9, [b"from compose"]).first_position == 0
            assert [e.payload for e in c.read(9, 0)] == [b"from compose"]
            advertised = {s["addr"] for s in zkpaths.servers(c.zk).values()}
            assert advertised == {f"127.0.0.1:{ports[n]}" for n in ("log-0", "log-1", "log-2")}
            wait_for(lambda: len(registry.members(c.zk, registry.STORAGE_NODES)) == 3, 60,
                     "three storage nodes")
            datasets.create(c.zk, "t")
        # The key-value store through each coordinator, as a client outside Docker would
        # reach it (by the published port).
        for i, name in enumerate(("coordinator-0", "coordinator-1")):
            with Client(f"127.0.0.1:{ports[name]}", timeout=30) as db:
                db.put("t", "p", "k", b"v%d" % i)
                got = db.get("t", "p", "k")
                assert got is not None and got.value == b"v%d" % i
    finally:
        for p in reversed(procs):
            os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
