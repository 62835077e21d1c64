"""Start and stop a real standalone ZooKeeper server (Debian's `zookeeper` package) on a
loopback port, with its data in a directory of our choosing.

ZooKeeper logs through SLF4J, and Debian's package puts no binding on its class path, so a
server started as `java -cp zookeeper.jar` says `SLF4J: Defaulting to no-operation (NOP)
logger` and logs nothing (PITFALLS.md): the one component that decides who writes left no
trace. Every member Midtown starts (`cluster up`, `python -m cluster.zookeeper`,
and so compose and the benchmarks) runs with SLF4J's log4j 1.2 binding, which Debian ships
with ZooKeeper's own dependencies (libslf4j-java, liblog4j1.2-java), and a log4j
configuration of its own: INFO and above into `zookeeper.log` beside its data (rolled at
LOG_FILE_MB, LOG_FILES kept)."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

from log import limits
from runtime import children

CLASSPATH = "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-log4j12.jar:/usr/share/java/log4j-1.2.jar"
MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
LOG_NAME = "zookeeper.log"
# An ensemble's followers give up on a leader that has not answered for this many ticks
# (of limits.ZK_TICK_MS, 0.25 s: 0.5 s) and elect another: a leader on a machine that went
# quiet (paused, cut off) is replaced in 0.5 s plus the election's 0.2-0.4 s, since every
# takeover of a log waits on ZooKeeper (issue 68). ZooKeeper's examples use a 2 s tick and
# 5 ticks (10 s); with a 0.5 s tick and 2, the leader's machine paused held every log's
# takeover for 1.45 s. The leader pings its followers every half tick. A follower has
# INIT_LIMIT_TICKS (5 s) to connect to a new leader and take its data.
SYNC_LIMIT_TICKS = 2
INIT_LIMIT_TICKS = 20
LOG_FILE_MB, LOG_FILES = 16, 4


def four_letter(host: str, port: int, cmd: bytes, timeout_s: float = 1.0) -> bytes:
    with socket.create_connection((host, port), timeout=timeout_s) as s:
        s.sendall(cmd)
        chunks = []
        while True:
            b = s.recv(4096)
            if not b:
                break
            chunks.append(b)
    return b"".join(chunks)


def is_ok(host: str, port: int) -> bool:
    try:
        return four_letter(host, port, b"ruok") == b"imok"
    except OSError:
        return False


def config_text(data_dir: Path, port: int, host: str = "127.0.0.1", peers: list[str] | None = None) -> str:
    """zoo.cfg of a standalone server, or of a member of the ensemble `peers` (each
    HOST:PEER_PORT:ELECTION_PORT, member i+1 being the i-th: its myid file says which)."""
    ensemble = [f"initLimit={INIT_LIMIT_TICKS}", f"syncLimit={SYNC_LIMIT_TICKS}", "reconfigEnabled=false",
                "standaloneEnabled=false",
                "quorumListenOnAllIPs=true",
                *(f"server.{i + 1}={p}" for i, p in enumerate(peers))] if peers else []
    return "\n".join(
        [
            *ensemble,
            f"tickTime={limits.ZK_TICK_MS}",
            f"dataDir={data_dir}",
            f"clientPort={port}",
            f"clientPortAddress={host}",
            "admin.enableServer=false",
            "4lw.commands.whitelist=srvr,ruok,mntr",
            "maxClientCnxns=200",
            # Sessions may be as short as 2 ticks; Midtown asks for ZK_SESSION_TIMEOUT_S.
            f"minSessionTimeout={2 * limits.ZK_TICK_MS}",
            "",
        ]
    )


# A member electing a leader that has heard no vote for this long sends its own again
# (ZooKeeper's default: 200 ms, doubling). With the leader's machine gone quiet, half of the
# elections of `make quiet-machines` waited for such a resend: 410-460 ms where the others
# took 210-300 ms (each member's log: "LEADER ELECTION TOOK").
ELECTION_RESEND_MS = 50


def log4j_text(log_file: Path) -> str:
    """A log4j 1.2 configuration: INFO and above into `log_file`, rolled."""
    return "\n".join([
        "log4j.rootLogger=INFO, FILE",
        "log4j.appender.FILE=org.apache.log4j.RollingFileAppender",
        f"log4j.appender.FILE.File={log_file}",
        f"log4j.appender.FILE.MaxFileSize={LOG_FILE_MB}MB",
        f"log4j.appender.FILE.MaxBackupIndex={LOG_FILES - 1}",
        "log4j.appender.FILE.layout=org.apache.log4j.PatternLayout",
        "log4j.appender.FILE.layout.ConversionPattern=%d{ISO8601} %-5p [%t:%C{1}@%L] - %m%n",
        "",
    ])


# For the members of local clusters (`cluster up`, the tests' and the benchmarks' clusters),
# which start often and serve one machine's few clients: the JVM's first compiler alone and
# its serial collector. A member's start and first seconds in a three-server cluster took
# 0.70 s of CPU with the JVM's defaults and 0.53 s so (a member alone, twice each), and a
# local cluster's start and stop 4.5 s against 4.05; the suite starts one for almost every
# test. A member started by `python -m cluster.zookeeper` (machines, images) keeps the
# defaults: it runs for long.
QUICK_START = ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"]


def command(config: Path, log_file: Path | None = None, quick_start: bool = False) -> list[str]:
    """The java command line of a server with `config` (zoo.cfg), logging into `log_file`
    (default: LOG_NAME beside the config) through log4j.properties, written beside it;
    `quick_start`: QUICK_START's options."""
    log_file = log_file or config.parent / LOG_NAME
    props = config.parent / "log4j.properties"
    props.write_text(log4j_text(log_file))
    return ["java", "-Xmx256m", *(QUICK_START if quick_start else []), f"-Dlog4j.configuration=file:{props}",
            f"-Dzookeeper.fastleader.minNotificationInterval={ELECTION_RESEND_MS}", "-cp", CLASSPATH, MAIN,
            str(config)]


class ZooKeeper:
    """A ZooKeeper server process. `start()` returns once it answers `ruok`."""

    def __init__(self, data_dir: Path, port: int, log_path: Path | None = None,
                 host: str = "127.0.0.1", peers: list[str] | None = None, member: int = 0) -> None:
        """`peers`, `member`: a member of an ensemble (config_text), the `member`-th from 1."""
        assert not peers or 1 <= member <= len(peers), (member, peers)
        self.data_dir = Path(data_dir)
        self.port = port
        self.host = host
        self.peers = peers
        self.member = member
        self.log_path = log_path or self.data_dir / LOG_NAME  # log4j's
        self.out_path = self.log_path.with_suffix(".out")  # the JVM's own output (start-up errors)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def hosts(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout_s: float = 30.0) -> ZooKeeper:
        if not Path("/usr/share/java/zookeeper.jar").exists():
            raise RuntimeError("ZooKeeper is not installed: run `make install` (apt-get install zookeeper)")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cfg = self.data_dir / "zoo.cfg"
        cfg.write_text(config_text(self.data_dir, self.port, self.host, self.peers))
        if self.peers:
            (self.data_dir / "myid").write_text(f"{self.member}\n")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        out = open(self.out_path, "ab")
        self.proc = children.start(command(cfg, self.log_path, quick_start=True), stdout=out,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited with {self.proc.returncode}; see {self.log_path} "
                                   f"and {self.out_path}")
            if is_ok(self.host, self.port):
                return self
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"ZooKeeper did not answer on port {self.port} within {timeout_s}s")

    def pause(self, paused: bool = True) -> None:
        """SIGSTOP the server (returns once every thread of it is stopped: until then it can
        still answer a request sent after the kill) or, `paused` False, SIGCONT it."""
        assert self.proc is not None, "not started"
        children.pause(self.proc, paused)

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None



def main(argv: list[str] | None = None) -> None:
    """Run ZooKeeper in the foreground (what the Docker image does):
    python -m cluster.zookeeper --port 2181 --data /data [--host 0.0.0.0]"""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m cluster.zookeeper", description=main.__doc__)
    ap.add_argument("--port", type=int, default=2181)
    ap.add_argument("--data", required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--peers", default="",
                    help="a member of an ensemble: every member's HOST:PEER_PORT:ELECTION_PORT, comma-"
                         "separated, the same list on each (three: one member may be lost)")
    ap.add_argument("--id", type=int, default=0, help="with --peers: this member's place in it, from 1")
    a = ap.parse_args(argv)
    peers = [p for p in a.peers.split(",") if p]
    if peers and not 1 <= a.id <= len(peers):
        ap.error(f"--id: {a.id}, must be this member's place in --peers (1 to {len(peers)})")
    for p in peers:
        if len(p.split(":")) != 3:
            ap.error(f"--peers: {p!r} is not HOST:PEER_PORT:ELECTION_PORT")
    data = Path(a.data)
    data.mkdir(parents=True, exist_ok=True)
    if peers:
        (data / "myid").write_text(f"{a.id}\n")
    cfg = data / "zoo.cfg"
    cfg.write_text(config_text(data, a.port, a.host, peers))
    os.execvp("java", command(cfg))


if __name__ == "__main__":
    main()
