"""One process per machine running a log server, a storage node and a coordinator: the
`host` layout (`midtown cluster up --layout host`, docs/performance.md).

Each component is the same as in its own process: it listens on its own port and
registers in ZooKeeper under its own address. Calls between the three go straight from
one to the other (through the ports bound here: runtime/inprocess.py, log/local.py)
instead of through gRPC: on the machine that writes a log, a strong write crosses the
network once each way to its client and once to the other log replicas, and nothing else.
A host whose log server left the pool (`midtown log-server decommission`) runs its storage
node and coordinator alone, calling the log servers over gRPC as the split layout does.

Run: python -m coordinator.host --id 0 --zk ZK --data DIR --log-port P1 --storage-port P2
     --coordinator-port P3"""

from __future__ import annotations

import argparse
import logging
import os

from coordinator import limits as kv_limits
from coordinator import server as coordinator_server
from coordinator.storage_link import GrpcStorage, ProcessStorage
from fleet import machines
from log import server as log_server
from log import zk as zkpaths
from log.client import LocalLog
from log.client_link import GrpcLog
from log.local import ProcessLog
from log.node import Node
from runtime import inprocess, metrics, transport
from runtime.process import Part, log_to_stderr, serve_all, trace_from_env, tune_runtime, wait_until
from storage_node import server as storage_server
from storage_node.callbacks import AnswerTaker, Callbacks, ProcessAnswers


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m coordinator.host",
                                 description="a log server, a storage node and a coordinator in one process")
    ap.add_argument("--id", type=int, required=True, help="the id of all three components")
    ap.add_argument("--zk", required=True, help="ZooKeeper HOST:PORT")
    ap.add_argument("--data", required=True, help="data directory (log/ and storage/ inside)")
    ap.add_argument("--log-port", type=int, required=True)
    ap.add_argument("--storage-port", type=int, required=True)
    ap.add_argument("--coordinator-port", type=int, required=True)
    ap.add_argument("--host", default="127.0.0.1", help="address to listen on")
    ap.add_argument("--advertise", help="host name the others reach this machine by (default: --host)")
    ap.add_argument("--metrics-port", type=int, default=0, help="serve Prometheus metrics (0: off)")
    ap.add_argument("--client-rate-limit", type=float, default=kv_limits.CLIENT_RATE_LIMIT_DEFAULT,
                    help="requests/s per client connection (0: none)")
    transport.add_flags(ap)
    machines.add_flags(ap)
    a = ap.parse_args(argv)
    transport.use_flags(ap, a)
    domain = machines.flags_domain(ap, a)
    log_to_stderr(f"host-{a.id}")
    if a.metrics_port:
        metrics.serve(a.metrics_port, a.host)
    tune_runtime()
    trace_from_env(f"host {a.id}")
    name = a.advertise or a.host
    log_addr, storage_addr, coord_addr = (f"{name}:{port}" for port in
                                          (a.log_port, a.storage_port, a.coordinator_port))
    parts: list[Part] = []
    node: Node | None = None
    pooled = in_the_pool(a.zk, a.id)
    machines.claim_at_start(a.zk, [*([(machines.LOG_SERVERS, a.id)] if pooled else []),
                                   (machines.STORAGE_NODES, a.id)], domain)
    if pooled:
        ls, node = log_server.build(a.id, log_addr, a.zk, os.path.join(a.data, "log"))
        log_server.add_health(ls, node)
        parts.append(Part(ls, f"{a.host}:{a.log_port}", node.start, node.stop, grace_s=2.0,
                          name="log server"))
    else:  # decommissioned (midtown log-server decommission): the rest of the host serves on
        logging.getLogger("coordinator.host").warning(
            "log server %d is not in the log servers' pool (decommissioned, or never added): this host "
            "runs its storage node and coordinator only (midtown log-server add %d, then a restart, "
            "brings it back)", a.id, a.id)
    # The log server of this process, as its storage node and coordinator reach it (one port).
    local_log = inprocess.Local[LocalLog]().bind([log_addr], node) if node is not None else None
    local_answers = inprocess.Local[AnswerTaker]()  # bound once the coordinator is built
    # The coordinator's and the storage node's way to the log servers: this one directly.
    link = ProcessLog(node, GrpcLog()) if node is not None else None
    ss, storage = storage_server.build(a.id, storage_addr, a.zk, os.path.join(a.data, "storage"), link,
                                          local_log, ProcessAnswers(local_answers, Callbacks()))
    storage_server.add_health(ss, storage)
    b = coordinator_server.build(
        a.id, coord_addr, a.zk, f"{a.host}:{a.coordinator_port}", a.client_rate_limit, log_link=link,
        local_log=local_log,
        storage_link=ProcessStorage(storage, storage_addr, GrpcStorage()))
    b.coordinator.dc = domain.dc  # clients in its data center call it first
    local_answers.bind([b.callback_addr], b.coordinator)  # storage answers are handed over
    parts += [Part(ss, f"{a.host}:{a.storage_port}", storage.start, storage.stop, name="storage node"),
              Part(b.internal, "", lambda: None, lambda: None, name="coordinator's callback port"),
              Part(b.client, "", b.coordinator.start, b.coordinator.stop, name="coordinator")]
    serve_all(parts, f"host {a.id} ready: log server on {log_addr if node is not None else '(none)'}, "
                     f"storage node on {storage_addr}, coordinator on {coord_addr}")


def in_the_pool(zk_hosts: str, server_id: int) -> bool:
    """Whether `server_id` is in the log servers' pool (waiting, as a log server does, for a
    topology to exist). A host whose log server was decommissioned runs without it."""
    zk = zkpaths.connect(zk_hosts, patience_s=zkpaths.SERVER_PATIENCE_S)
    try:
        topo = wait_until(lambda: zkpaths.read_topology(zk),
                          "no topology in ZooKeeper: run `midtown cluster up` (or create it)")
        return server_id in topo.log_servers
    finally:
        zk.stop()
        zk.close()


if __name__ == "__main__":
    main()
