"""A local cluster on loopback: ZooKeeper and three log servers, their data under one
directory, their ports and process ids in DIR/cluster.json.

Used by `midtown cluster up|down|status`, `make run`, the benchmarks and the integration
tests (which kill and restart its processes for real)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from catalog import registry
from catalog.replica_sets import REPLICAS_DEFAULT
from cluster.ports import free_ports
from cluster.zookeeper import ZooKeeper, is_ok
from fleet import failure_domains, machines
from fleet.failure_domains import Domain
from log import limits
from log import zk as zkpaths
from runtime import children, membership
from runtime.transport import Credentials

if TYPE_CHECKING:
    from catalog.datasets import Dataset

LOG_SERVERS = 3
STORAGE_NODES = 3
COORDINATORS = 1
STATE = "cluster.json"
# "split": one process per component; "host": ZooKeeper and one process per machine with a
# log server, a storage node and a coordinator (coordinator.host; docs/performance.md).
LAYOUTS = ("split", "host")
# What `midtown cluster up`, `make run`, `make demo` and the benchmarks start. Measured
# (docs/performance.md@71edb5a, "The default layout: host"): host with routed clients meets every
# key-value target of issue 12 in one run (single-client CAS 1.79x etcd's p50 against split's
# 3.6-5x), and ingests within the noise of split (bulk 12.4-14.1x etcd against 13.8-13.9x,
# Spark exactly once 0.76-0.78 of plain against 0.72-0.79).
LAYOUT_DEFAULT = "host"


class ClusterError(Exception):
    pass


@dataclass
class Proc:
    name: str
    kind: str  # "zookeeper" | "log-server" | "storage-node" | "coordinator" | "host"
    port: int  # a host's: its coordinator's
    pid: int = 0
    started: int = 0  # its start time (clock ticks since boot): with the pid, which process it is
    server_id: int = -1
    metrics_port: int = 0  # coordinators: Prometheus metrics over HTTP
    log_port: int = 0  # hosts only (coordinator.host)
    storage_port: int = 0  # hosts only
    restarts: int = 0  # by the supervisor (cluster/supervisor.py)
    last_exit: int | None = None  # the exit code it last ended with, when known
    state: str = ""  # the supervisor's word: "restarting", "exited" (not restarted)
    host: str = "127.0.0.1"  # where it listens and is reached
    netns: str = ""  # a network namespace it runs in (tests of partitions), or none
    machine: str = ""  # the machine it says it runs on ("": this host's name)
    locality: str = ""  # zone=...,rack=... (fleet/failure_domains.py)
    advertise: str = ""  # the name others reach it by, when not `host` (a machine's: 0.0.0.0)

    def addr_of(self, role: str) -> str:
        """Where this process serves `role` (a host serves each on its own port)."""
        if self.kind == "host":
            port = {"log-server": self.log_port, "storage-node": self.storage_port}.get(role, self.port)
            return f"{self.host}:{port}"
        return self.addr

    def plays(self, role: str) -> bool:
        """Whether this process is a `role` ("log-server", "storage-node", "coordinator"):
        a host is all three."""
        return self.kind == role or (self.kind == "host" and role != "zookeeper")

    @property
    def addr(self) -> str:
        return f"{self.host}:{self.port}"

    def alive(self) -> bool:
        """Whether the process recorded (pid and start time) still runs: a pid that another
        program holds now is not it (runtime/children.py)."""
        return children.is_recorded(self.pid, self.started)


def pid_alive(pid: int) -> bool:
    """Whether some process holds `pid` (not a zombie). Not whether it is one we started:
    for that, Proc.alive (the pid with its start time)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child counts as dead.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


@dataclass
class Cluster:
    dir: Path
    logs: int = limits.LOGS_DEFAULT
    shards: int = registry.SHARDS_DEFAULT
    coordinators: int = COORDINATORS
    storage_nodes: int = STORAGE_NODES
    kv_logs: int = registry.KV_LOGS_LOCAL_DEFAULT
    # Copies of each shard: with more storage nodes than this, each holds a part of the
    # shards (catalog/replica_sets.py).
    replicas: int = REPLICAS_DEFAULT
    layout: str = LAYOUT_DEFAULT
    # Log servers in the pool (in the host layout, hosts); each segment is on three of them.
    log_server_count: int = LOG_SERVERS
    tls: bool = False  # mutual TLS between the processes, TLS for clients (cluster/certs.py)
    supervisor_pid: int = 0  # `cluster up --detach`: the supervisor that runs it
    supervisor_started: int = 0  # its start time (runtime/children.py)
    # Each coordinator's --client-rate-limit (requests/s per client connection; 0: none);
    # None: the coordinator's default. The benchmarks measure capacity, without the limit.
    client_rate_limit: float | None = None
    # Where some processes run, by name: (network namespace or "", address). Tests of
    # network partitions put log servers in namespaces of their own.
    places: dict[str, tuple[str, str]] = field(default_factory=dict)
    # The machine (and locality) some processes say they run on, by name: (machine,
    # locality). The others run on this host's name.
    where: dict[str, tuple[str, str]] = field(default_factory=dict)
    procs: dict[str, Proc] = field(default_factory=dict)
    # The ZooKeeper of a cluster this one's processes join (a machine's workers,
    # cluster/machine.py); "": its own, started as the process "zookeeper".
    zk_external: str = ""
    # With tls: the CA, certificate and key every process uses (a machine's, made by
    # `midtown cluster certs`); none: a certificate per process made in DIR/tls.
    tls_files: list[str] = field(default_factory=list)
    _popen: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    # ------------------------------------------------------------ state file
    @property
    def zk_hosts(self) -> str:
        return self.zk_external or self.procs["zookeeper"].addr

    def log_servers(self) -> list[Proc]:
        return [p for p in self.procs.values() if p.kind == "log-server"]

    def of_kind(self, kind: str) -> list[Proc]:
        return [p for p in self.procs.values() if p.kind == kind]

    def playing(self, role: str) -> list[Proc]:
        """The processes that are a `role`, hosts included."""
        return [p for p in self.procs.values() if p.plays(role)]

    @property
    def coordinator_addrs(self) -> list[str]:
        return [p.addr for p in self.playing("coordinator")]

    def save(self) -> None:
        data = {
            "logs": self.logs,
            "shards": self.shards,
            "kv_logs": self.kv_logs,
            "replicas": self.replicas,
            "storage_nodes": self.storage_nodes,
            "layout": self.layout,
            "log_server_count": self.log_server_count,
            "tls": self.tls,
            "supervisor_pid": self.supervisor_pid,
            "supervisor_started": self.supervisor_started,
            "client_rate_limit": self.client_rate_limit,
            "zk": self.zk_hosts,
            "zk_external": self.zk_external,
            "tls_files": self.tls_files,
            "processes": [p.__dict__ for p in self.procs.values()],
        }
        tmp = self.dir / (STATE + ".tmp")
        tmp.write_text(json.dumps(data, indent=2))
        tmp.replace(self.dir / STATE)

    @staticmethod
    def load(dir: Path) -> Cluster:
        path = Path(dir) / STATE
        if not path.exists():
            raise ClusterError(
                f"no cluster in {dir} (no {STATE}); start one with `midtown cluster up --dir {dir}`"
            )
        d = json.loads(path.read_text())
        c = Cluster(Path(dir), logs=d["logs"], shards=d.get("shards", registry.SHARDS_DEFAULT),
                    kv_logs=d.get("kv_logs", registry.KV_LOGS_LOCAL_DEFAULT),
                    replicas=d.get("replicas", REPLICAS_DEFAULT),
                    storage_nodes=d.get("storage_nodes", STORAGE_NODES),
                    layout=d.get("layout", "split"), tls=d.get("tls", False),
                    log_server_count=d.get("log_server_count", LOG_SERVERS),
                    supervisor_pid=d.get("supervisor_pid", 0),
                    supervisor_started=d.get("supervisor_started", 0),
                    client_rate_limit=d.get("client_rate_limit"), zk_external=d.get("zk_external", ""),
                    tls_files=d.get("tls_files", []))
        for p in d["processes"]:
            c.procs[p["name"]] = Proc(**p)
        return c

    # ------------------------------------------------------------ lifecycle
    def plan(self) -> None:
        """Choose the processes and ports of a new cluster and write DIR/cluster.json (a
        supervisor in its own process starts them from there)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "logs").mkdir(exist_ok=True)
        self._plan()
        self.save()

    def _plan(self) -> None:
        if self.procs:
            return
        self._plan_ports()
        for name, (netns, host) in self.places.items():
            self.procs[name].netns, self.procs[name].host = netns, host
        for name, (machine, locality) in self.where.items():
            self.procs[name].machine, self.procs[name].locality = machine, locality

    def _plan_ports(self) -> None:
        if self.layout not in LAYOUTS:
            raise ClusterError(f"layout: {self.layout!r}; choose one of {', '.join(LAYOUTS)}")
        if self.layout == "host":
            ports = iter(free_ports(1 + 4 * self.log_server_count))
            self.procs["zookeeper"] = Proc("zookeeper", "zookeeper", next(ports))
            for i in range(self.log_server_count):
                self.procs[f"host-{i}"] = Proc(f"host-{i}", "host", next(ports), server_id=i,
                                               log_port=next(ports), storage_port=next(ports),
                                               metrics_port=next(ports))
            return
        ports = iter(free_ports(1 + 2 * (self.log_server_count + self.storage_nodes + self.coordinators)))
        zk_port = next(ports)
        if not self.zk_external:  # else it joins that ZooKeeper (an ensemble a test started)
            self.procs["zookeeper"] = Proc("zookeeper", "zookeeper", zk_port)
        for i in range(self.log_server_count):
            self.procs[f"log-{i}"] = Proc(f"log-{i}", "log-server", next(ports), server_id=i,
                                          metrics_port=next(ports))
        for i in range(self.storage_nodes):
            self.procs[f"storage-{i}"] = Proc(f"storage-{i}", "storage-node", next(ports), server_id=i,
                                              metrics_port=next(ports))
        for i in range(self.coordinators):
            self.procs[f"coordinator-{i}"] = Proc(f"coordinator-{i}", "coordinator", next(ports),
                                                  server_id=i, metrics_port=next(ports))

    def start(self, timeout_s: float = 90.0, progress: bool = False) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "logs").mkdir(exist_ok=True)
        self._plan()
        running = [p.name for p in self.procs.values() if p.alive()]
        if running:
            raise ClusterError(f"cluster in {self.dir} is already running ({', '.join(running)}); "
                               f"stop it with `midtown cluster down --dir {self.dir}`")
        if "zookeeper" in self.procs:
            self.start_process("zookeeper")
        self.save()
        zk = zkpaths.connect(self.zk_hosts)
        try:
            self._record_machines(zk)
            zkpaths.create_cluster(zk, self.logs, [p.server_id for p in self.playing("log-server")],
                                   leased_below=self.kv_logs)
            registry.create_kv(zk, self.shards, [p.server_id for p in self.playing("storage-node")],
                               self.kv_logs, self.replicas)
            for p in self.procs.values():
                if p.kind != "zookeeper":
                    self.start_process(p.name)
            self.save()
            self.wait_ready(zk, timeout_s, progress)
        except BaseException:
            zk.stop()  # a cluster that did not come up is not left half running
            self.stop()
            raise
        finally:
            zk.stop()
            zk.close()

    def metric(self, name: str, metric: str, labels: str = "") -> float:
        """The sum of counter or gauge `metric` on process `name`'s /metrics page, over the
        lines whose labels include `labels` (as 'log="1"'; "": all of them)."""
        import urllib.request

        p = self.procs[name]
        text = urllib.request.urlopen(f"http://{p.host}:{p.metrics_port}/metrics", timeout=10).read().decode()
        return sum(float(line.split()[-1]) for line in text.splitlines()
                   if (line.startswith(metric + "{") and labels in line.split("}")[0])
                   or (line.startswith(metric + " ") and not labels))

    def machine_of(self, p: Proc) -> str:
        return p.machine or machines.this_machine()

    def one_machine(self) -> bool:
        """Whether every server of the cluster runs on one machine (a local cluster: this
        one), so that its copies share it. Servers given machines of their own
        (Proc.machine) are placed by the rule, and what it cannot place is refused."""
        return len({self.machine_of(p) for p in self.procs.values() if p.kind != "zookeeper"}) <= 1

    def _record_machines(self, zk: Any) -> None:
        """Before placing anything: where each server runs (fleet/machines.py), and, for
        a cluster whose servers share machines, that it runs so (its copies share them)."""
        machines.set_one_machine(zk, self.one_machine())
        for role, kind in ((machines.LOG_SERVERS, "log-server"), (machines.STORAGE_NODES, "storage-node")):
            for p in self.playing(kind):
                machines.record(zk, role, p.server_id,
                                Domain(self.machine_of(p), failure_domains.parse_locality(p.locality)))

    # ------------------------------------------------------------ TLS
    @property
    def tls_dir(self) -> Path:
        return self.dir / "tls"

    @property
    def tls_ca(self) -> Path | None:
        """The CA clients trust to call this cluster's coordinators (None: plaintext)."""
        if self.tls_files:
            return Path(self.tls_files[0])
        return self.tls_dir / "ca.pem" if self.tls else None

    def credentials(self, name: str = "admin") -> Credentials | None:
        """A cluster certificate (the `midtown` command's, by default) for calls on the
        internal services of a cluster with mutual TLS; None without TLS."""
        if not self.tls:
            return None
        if self.tls_files:
            return Credentials.load(*self.tls_files)
        from cluster import certs  # cryptography: only for a cluster with TLS

        cert, key = certs.ensure_cert(self.tls_dir, name)
        return Credentials.load(str(self.tls_dir / "ca.pem"), str(cert), str(key))

    def _tls_flags(self, name: str) -> list[str]:
        if not self.tls:
            return []
        if self.tls_files:
            return [f for flag, path in zip(("--tls-ca", "--tls-cert", "--tls-key"), self.tls_files)
                    for f in (flag, path)]
        from cluster import certs

        cert, key = certs.ensure_cert(self.tls_dir, name)
        return ["--tls-ca", str(self.tls_dir / "ca.pem"), "--tls-cert", str(cert), "--tls-key", str(key)]

    def add_storage_process(self) -> str:
        """Start one more storage node process (split layout), with the next id: the
        process only; `midtown node add ID` makes it a member. Its name."""
        if self.layout != "split":
            raise ClusterError("a storage node process of its own is started in the split layout only")
        i = 1 + max((p.server_id for p in self.of_kind("storage-node")), default=-1)
        port, metrics = free_ports(2)
        name = f"storage-{i}"
        self.procs[name] = Proc(name, "storage-node", port, server_id=i, metrics_port=metrics)
        self.storage_nodes += 1
        self.start_process(name)
        self.save()
        return name

    def command(self, name: str) -> list[str]:
        p = self.procs[name]
        netns = ["ip", "netns", "exec", p.netns] if p.netns else []
        where = ["--machine", self.machine_of(p)] + (["--locality", p.locality] if p.locality else []) + (
            ["--advertise", p.advertise] if p.advertise and p.kind == "host" else [])
        # A coordinator says only its data center (it places nothing): where its clients call
        dc = failure_domains.parse_locality(p.locality) if p.locality else ()
        coord_dc = [v for k, v in dc if k == failure_domains.DC][:1]
        return (netns + self._command(name) + ["--host", p.host] + self._tls_flags(name)
                + (where if p.kind != "coordinator" else ["--dc", *coord_dc] if coord_dc else []))

    def _command(self, name: str) -> list[str]:
        p = self.procs[name]
        if p.kind == "log-server":
            return [sys.executable, "-m", "log.server", "--id", str(p.server_id), "--port",
                    str(p.port), "--zk", self.zk_hosts, "--data", str(self.dir / p.name),
                    "--metrics-port", str(p.metrics_port)]
        if p.kind == "storage-node":
            return [sys.executable, "-m", "storage_node.server", "--id", str(p.server_id), "--port",
                    str(p.port), "--zk", self.zk_hosts, "--data", str(self.dir / p.name),
                    "--metrics-port", str(p.metrics_port)]
        if p.kind == "coordinator":
            return [sys.executable, "-m", "coordinator.server", "--id", str(p.server_id), "--port",
                    str(p.port), "--zk", self.zk_hosts, "--metrics-port", str(p.metrics_port),
                    *self._rate_flags()]
        if p.kind == "host":
            return [sys.executable, "-m", "coordinator.host", "--id", str(p.server_id), "--zk",
                    self.zk_hosts, "--data", str(self.dir / p.name), "--log-port", str(p.log_port),
                    "--storage-port", str(p.storage_port), "--coordinator-port", str(p.port),
                    "--metrics-port", str(p.metrics_port), *self._rate_flags()]
        raise ClusterError(f"no command for {name}")

    def _rate_flags(self) -> list[str]:
        limit = self.client_rate_limit
        return [] if limit is None else ["--client-rate-limit", f"{limit:g}"]

    def start_process(self, name: str) -> None:
        p = self.procs[name]
        out = open(self.dir / "logs" / f"{name}.log", "ab")
        if p.kind == "zookeeper":
            z = ZooKeeper(self.dir / "zk", p.port, log_path=self.dir / "logs" / "zookeeper.log", host=p.host)
            z.start()
            assert z.proc is not None
            p.pid, p.started = z.proc.pid, children.start_ticks(z.proc.pid) or 0
            self._popen[name] = z.proc
            return
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parent.parent)
        env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
        proc = children.start(self.command(name), stdout=out, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        p.pid, p.started = proc.pid, children.start_ticks(proc.pid) or 0
        self._popen[name] = proc

    def wait_ready(self, zk: object, timeout_s: float, progress: bool = False) -> None:
        """Until every log server is registered and every log has a writer."""
        deadline = time.monotonic() + timeout_s
        last = ""
        while True:
            regs = zkpaths.servers(zk)  # type: ignore[arg-type]
            # The log servers of the pool: one decommissioned is not started (its host runs
            # without it: coordinator/host.py), so none is waited for.
            topo = zkpaths.read_topology(zk)  # type: ignore[arg-type]
            pool = set(topo.log_servers) if topo is not None else set()
            want_l = sum(1 for p in self.playing("log-server") if p.server_id in pool)
            writers = sum(1 for i in range(self.logs) if zkpaths.writer_is_live(zk, i))  # type: ignore[arg-type]
            storage = len(membership.members(zk, registry.STORAGE_NODES))  # type: ignore[arg-type]
            coords = len(membership.members(zk, registry.COORDINATORS))  # type: ignore[arg-type]
            want_s, want_c = len(self.playing("storage-node")), len(self.playing("coordinator"))
            msg = (f"log servers up: {len(regs)}/{want_l}, logs with a writer: "
                   f"{writers}/{self.logs}, storage nodes: {storage}/{want_s}, "
                   f"coordinators: {coords}/{want_c}")
            if progress and msg != last:
                print(msg, file=sys.stderr, flush=True)
                last = msg
            if (len(regs) >= want_l and writers == self.logs and storage >= want_s
                    and coords >= want_c):
                return
            for p in self.procs.values():
                if not p.alive():
                    raise ClusterError(f"{p.name} exited; see {self.dir / 'logs' / (p.name + '.log')}")
            if time.monotonic() > deadline:
                raise ClusterError(f"cluster not ready after {timeout_s}s: {msg}")
            time.sleep(0.2)

    def signal(self, name: str, sig: int) -> None:
        """Signal the process `name`, only if it is the one started: through its Popen when
        this object started it (not reaped yet, so its pid is still its own), else by its
        recorded pid and start time (a pid another program holds now is left alone). A
        SIGSTOP returns once the process is stopped."""
        proc = self._popen.get(name)
        p = self.procs[name]
        if proc is not None:
            if proc.poll() is not None:
                return
            proc.send_signal(sig)
        elif not children.signal_recorded(p.pid, p.started, sig):
            return
        if sig == signal.SIGSTOP:  # paused when this returns, not a few ms later
            children.wait_stopped(p.pid)

    def supervisor_alive(self) -> bool:
        """Whether the supervisor recorded in cluster.json still runs (pid and start time)."""
        return children.is_recorded(self.supervisor_pid, self.supervisor_started)

    def kill(self, name: str) -> None:
        """SIGKILL and reap."""
        self.signal(name, signal.SIGKILL)
        self.wait_exit(name)

    def wait_exit(self, name: str, timeout_s: float = 15.0) -> bool:
        p = self.procs[name]
        proc = self._popen.get(name)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if proc is not None:
                if proc.poll() is not None:
                    return True
            elif not p.alive():
                return True
            time.sleep(0.05)
        return False

    def running(self, name: str) -> bool:
        """Whether `name` still runs. For a process this object started, its wait status
        decides: a multithreaded process killed with SIGKILL shows its main thread as a zombie
        while its other threads are still exiting, and only once they have all gone is its
        exit code there to read (so `pid_alive` alone would report it dead too early)."""
        proc = self._popen.get(name)
        if proc is not None:
            return proc.poll() is None
        return self.procs[name].alive()

    def exit_code(self, name: str) -> int | None:
        """The exit code of a process this object started and that has exited (None: not
        known, or not exited)."""
        proc = self._popen.get(name)
        return proc.poll() if proc is not None else None

    def terminate(self, name: str, grace_s: float = 10.0) -> None:
        """SIGTERM (after SIGCONT, in case it is paused), SIGKILL if it has not exited
        within `grace_s`."""
        self.signal(name, signal.SIGCONT)
        self.signal(name, signal.SIGTERM)
        if not self.wait_exit(name, grace_s):
            self.kill(name)

    def restart(self, name: str) -> None:
        self.wait_exit(name)
        self.start_process(name)
        self.save()

    def stop(self) -> None:
        """SIGTERM everything (log servers first), SIGKILL what does not exit."""
        # Log servers first, while ZooKeeper still runs: they close their sessions, so
        # their ephemeral nodes do not outlive them.
        front = [p.name for p in self.procs.values() if p.kind in ("coordinator", "storage-node")]
        back = [p.name for p in self.procs.values() if p.kind in ("log-server", "host")]
        for group in (front, back, ["zookeeper"]):
            for name in group:
                if name in self.procs:
                    self.signal(name, signal.SIGCONT)
                    self.signal(name, signal.SIGTERM)
            for name in group:
                if name in self.procs and not self.wait_exit(name, 10):
                    self.signal(name, signal.SIGKILL)
                    self.wait_exit(name, 5)
        for p in self.procs.values():
            p.pid, p.started = 0, 0
            p.state = ""
        if (self.dir / STATE).exists():
            self.save()

    def create_dataset(self, name: str, **options: Any) -> Dataset:
        """Create a dataset in this cluster's ZooKeeper, as `midtown dataset create` does."""
        from catalog import datasets

        zk = zkpaths.connect(self.zk_hosts)
        try:
            return datasets.create(zk, name, **options)
        finally:
            zk.stop()
            zk.close()

    def status(self) -> list[dict]:
        rows = []
        for p in self.procs.values():
            up = p.alive()
            if up and p.kind == "zookeeper":
                up = is_ok(p.host, p.port)
            addr = p.addr
            if p.kind == "host":
                addr = f"{p.addr} (coordinator), :{p.log_port} (log), :{p.storage_port} (storage)"
            state = "running" if up else (p.state if p.state in ("restarting", "exited") else "stopped")
            rows.append({"name": p.name, "kind": p.kind, "addr": addr, "pid": p.pid or None,
                         "state": state, "restarts": p.restarts, "last_exit": p.last_exit,
                         "metrics": f"http://{p.host}:{p.metrics_port}/metrics" if p.metrics_port
                         else None})
        return rows
