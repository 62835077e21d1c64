"""The `midtown` command.

Every command finds its cluster through --dir DIR (a local cluster), --zk HOST:PORT, or the
MIDTOWN_ZK environment variable; with none of them, ./run/local (the `make run` cluster)."""

from __future__ import annotations

import argparse
import base64
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from catalog import registry, replica_sets
from catalog.replica_sets import REPLICAS_DEFAULT
from midtown.cli.connect import DEFAULT_DIR, CliError, Unreachable, kv_client, zk_hosts
from midtown.cli.interrupts import STOP_SIGNALS, exit_code, interrupt_on_stop_signals
from midtown.cluster import LAYOUT_DEFAULT, LAYOUTS
from midtown.output import emit
from midtown.output import show_payload as _show_payload
from runtime.forking import restart_without_grpc_fork_handlers


def _log_client(a: argparse.Namespace) -> Any:
    from log.client import LogClient

    return LogClient(zk=_zk(a), own_zk=True)


# ---------------------------------------------------------------- cluster
def cmd_cluster_up(a: argparse.Namespace) -> int:
    """Start a local cluster under a supervisor (midtown/cluster/supervisor.py) that restarts a
    process that dies: in the foreground, or in a process of its own with --detach."""
    from midtown.cluster import Cluster, ClusterError, pid_alive

    d = Path(a.dir)
    try:
        c = Cluster.load(d) if (d / "cluster.json").exists() else \
            Cluster(d, logs=a.logs, kv_logs=a.kv_logs, layout=a.layout, tls=a.tls,
                    log_server_count=a.hosts, storage_nodes=a.hosts, replicas=a.replicas)
    except ClusterError as e:
        raise CliError(str(e)) from None
    if c.supervisor_pid and pid_alive(c.supervisor_pid):
        raise CliError(f"cluster in {d} is already running (supervisor pid {c.supervisor_pid}); "
                       f"stop it with `midtown cluster down --dir {d}`")
    t0 = time.monotonic()
    if a.detach:
        c = _start_detached(c, progress=not a.json)
        _print_up(a, c, time.monotonic() - t0)
        return 0
    import threading

    from midtown.cluster.supervisor import supervise

    # Whatever stops the command once it has begun to start processes (a stop signal while
    # they start: a KeyboardInterrupt; after, the handlers below, installed before anything
    # says the cluster is up), the `finally` stops them. A signal that came between that line
    # and the handlers used to end the command and leave the cluster running (found by the
    # signal test running its commands at once).
    stop = threading.Event()
    try:
        try:
            c.start(progress=not a.json)
        except ClusterError as e:
            raise CliError(str(e)) from None
        for sig in (signal.SIGINT, *STOP_SIGNALS):
            signal.signal(sig, lambda *_: stop.set())
        _print_up(a, c, time.monotonic() - t0)
        print("running in the foreground, restarting a process that dies; Ctrl-C stops everything",
              flush=True)
        supervise(c, stop, lambda msg: print(f"{time.strftime('%H:%M:%S')} {msg}", flush=True))
    finally:
        print("stopping...", flush=True)
        c.stop()
        print("stopped", flush=True)
    return 0


def _start_detached(c: Any, progress: bool) -> Any:
    """Run the supervisor in a process of its own, which starts the cluster; wait until it
    says the cluster is ready (or exits)."""
    import subprocess

    from midtown.cluster import Cluster

    c.plan()
    log_path = c.dir / "logs" / "supervisor.log"
    with open(log_path, "ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "midtown.cluster.supervisor", "--dir", str(c.dir)],
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log_path.read_text(errors="replace").strip().splitlines()[-3:]
            raise CliError(f"the cluster did not start: {' / '.join(tail)} (see {log_path})")
        loaded = Cluster.load(c.dir)
        if loaded.supervisor_pid == proc.pid:
            return loaded
        time.sleep(0.2)
    proc.terminate()
    raise CliError(f"the cluster was not ready after 120 s (see {log_path})")


def _print_up(a: argparse.Namespace, c: Any, took_s: float) -> None:
    rows = c.status()
    if a.json:
        emit({"dir": str(c.dir), "zk": c.zk_hosts, "coordinators": c.coordinator_addrs,
              "tls_ca": str(c.tls_ca) if c.tls_ca else None, "supervisor_pid": c.supervisor_pid or None,
              "processes": rows}, True)
        return
    print(f"cluster up in {took_s:.1f}s, data in {c.dir}")
    emit(rows, False, ["name", "addr", "pid", "state"])
    print(f"\nZooKeeper: {c.zk_hosts}   (other terminals: export MIDTOWN_ZK={c.zk_hosts})")
    tls = f", tls_ca=\"{c.tls_ca}\"" if c.tls_ca else ""
    for addr in c.coordinator_addrs:
        print(f"coordinator: {addr}")
    if c.layout == "host":  # a client given ZooKeeper sends each write beside its log's writer
        print(f"clients: midtown.Client(zk=\"{c.zk_hosts}\"{tls})   (each write to the coordinator "
              "beside its log's writer)")
    else:
        print(f"clients: midtown.Client(\"{c.coordinator_addrs[0]}\"{tls})")
    if c.tls_ca:
        print(f"TLS: clients trust {c.tls_ca}; the processes call each other with mutual TLS")
    if c.supervisor_pid:
        print(f"supervisor: pid {c.supervisor_pid} (restarts a process that dies; "
              f"log in {c.dir / 'logs' / 'supervisor.log'})")


def _load_cluster(d: str) -> Any:
    from midtown.cluster import Cluster, ClusterError

    try:
        return Cluster.load(Path(d))
    except ClusterError as e:
        raise CliError(str(e)) from None


def cmd_cluster_init(a: argparse.Namespace) -> int:
    """Create the topology in ZooKeeper for servers started by hand (Docker, several hosts)."""
    from log import zk as zkpaths

    try:
        ids = [int(x) for x in a.log_servers.split(",")]
    except ValueError:
        raise CliError(f"--log-servers: expected ids like 0,1,2, got {a.log_servers!r}") from None
    try:
        nodes = [int(x) for x in a.storage_nodes.split(",")]
    except ValueError:
        raise CliError(f"--storage-nodes: expected ids like 0,1,2, got {a.storage_nodes!r}") from None
    try:
        replica_sets.check_replicas(a.replicas, max(a.replicas, len(nodes)))
    except ValueError as e:
        raise CliError(f"--{e}") from None
    zk = _zk(a)
    try:
        topo = zkpaths.create_cluster(zk, a.logs, ids)
    except ValueError as e:
        raise CliError(str(e)) from None
    finally:
        zk.stop()
        zk.close()

    zk2 = _zk(a)
    try:
        kv = registry.create_kv(zk2, a.shards, nodes, a.kv_logs, a.replicas)
    except ValueError as e:
        raise CliError(str(e)) from None
    finally:
        zk2.stop()
        zk2.close()
    emit({"logs": topo.logs, "log_servers": list(topo.log_servers), "shards": kv.shards,
          "kv_logs": kv.logs,
          "storage_nodes": list(kv.storage_nodes)}, a.json)
    return 0


def cmd_cluster_down(a: argparse.Namespace) -> int:
    from midtown.cluster import pid_alive

    c = _load_cluster(a.dir)
    if c.supervisor_pid and pid_alive(c.supervisor_pid):
        os.kill(c.supervisor_pid, signal.SIGTERM)  # it stops the processes it supervises
        deadline = time.monotonic() + 90
        while pid_alive(c.supervisor_pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        c = _load_cluster(a.dir)
    c.stop()  # whatever is left (no supervisor, or one that did not finish)
    c.supervisor_pid = 0
    c.save()
    emit(c.status(), a.json, ["name", "addr", "state"])
    return 0


def cmd_cluster_status(a: argparse.Namespace) -> int:
    c = _load_cluster(a.dir)
    emit(c.status(), a.json, ["name", "kind", "addr", "pid", "state", "restarts", "metrics"])
    return 0


def cmd_cluster_restart(a: argparse.Namespace) -> int:
    """Restart one process: through the supervisor when one runs (it counts it), else
    directly. Returns once the process runs again."""
    from midtown.cluster import pid_alive
    from midtown.cluster.supervisor import request_restart

    c = _load_cluster(a.dir)
    if a.name not in c.procs:
        raise CliError(f"NAME: no process {a.name!r} in {a.dir}; choose one of {', '.join(c.procs)}")
    old = c.procs[a.name].pid
    if c.supervisor_pid and pid_alive(c.supervisor_pid):
        request_restart(c.dir, a.name)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            p = _load_cluster(a.dir).procs[a.name]
            if p.pid and p.pid != old and p.alive():
                break
            time.sleep(0.2)
        else:
            raise CliError(f"{a.name} did not start again within 60 s (see {c.dir / 'logs'})")
    else:
        c.terminate(a.name)
        c.start_process(a.name)
        c.procs[a.name].restarts += 1
        c.save()
    c = _load_cluster(a.dir)
    emit([r for r in c.status() if r["name"] == a.name], a.json, ["name", "pid", "state", "restarts"])
    return 0


# ---------------------------------------------------------------- log
def _payload(s: str, encoding: str) -> bytes:
    if encoding == "base64":
        try:
            return base64.b64decode(s, validate=True)
        except ValueError:
            raise CliError(f"DATA: {s!r} is not valid base64") from None
    return s.encode()


def _value(s: str, encoding: str, name: str) -> bytes:
    """A value on the command line: `@FILE` reads a file, `-` standard input (for values
    beyond what a command line holds, ~128 KiB); anything else as `_payload` says."""
    if s == "-":
        return sys.stdin.buffer.read()
    if s.startswith("@"):
        try:
            with open(s[1:], "rb") as f:
                return f.read()
        except OSError as e:
            raise CliError(f"{name}: cannot read {s[1:]}: {e.strerror}") from None
    return _payload(s, encoding)




def cmd_log_append(a: argparse.Namespace) -> int:
    from log.entry import validate_batch

    payloads = [_payload(x, a.encoding) for x in a.data]
    try:
        validate_batch(payloads)
    except ValueError as e:
        raise CliError(str(e)) from None
    with _log_client(a) as c:
        r = c.append(a.log, payloads, timeout_s=a.timeout)
    emit({"log": a.log, "first_position": r.first_position, "count": r.count,
          "timestamp_ms": r.timestamp_ms, "epoch": r.epoch}, a.json)
    return 0


def describe_entry(payload: bytes) -> dict[str, str]:
    """What a log entry holds, for people: the operation, the dataset and the keys of a
    key-value record, or the payload itself (text, or base64) when it is not one."""
    from record import codec
    from record.model import Drop, Position

    if not payload:  # the writer's time mark on an idle log (docs/log.md)
        return {"operation": "time mark", "dataset": "", "keys": ""}
    raw = {"operation": "(raw)", "dataset": "", "keys": _show_payload(payload)}
    try:
        rec = codec.record_from_bytes(payload)
    except Exception:
        return raw
    if not rec.ops and not rec.groups:
        return raw
    name = rec.dataset.rsplit("#", 1)[0]
    if rec.groups:
        keys = [_show_payload(g.partition_key) for g in rec.groups[:3]]
        more = f" (+{len(rec.groups) - 3})" if len(rec.groups) > 3 else ""
        return {"operation": f"bulk write, {len(rec.groups)} groups", "dataset": name,
                "keys": ", ".join(keys) + more}
    if all(isinstance(o, Position) for o in rec.ops):
        o = rec.ops[0]
        assert isinstance(o, Position)
        return {"operation": "position", "dataset": "", "keys": f"node {o.node_id} at {o.position}"}
    if all(isinstance(o, Drop) for o in rec.ops):
        return {"operation": "drop", "dataset": name, "keys": ""}
    kinds = [type(o).__name__.lower() for o in rec.ops]
    pk = _show_payload(rec.partition_key)
    locals_ = [_show_payload(o.local_key) for o in rec.ops if hasattr(o, "local_key")]
    return {"operation": " + ".join(kinds), "dataset": name,
            "keys": pk + ("/" + ",".join(locals_) if locals_ else "")}


def cmd_log_read(a: argparse.Namespace) -> int:
    """Committed entries of a log, as records people can read (--json: the raw fields).
    From before the first position still held (the log was truncated), from the first one."""
    from log.client import LogError

    with _log_client(a) as c:
        c.check_log(a.log)
        start = a.from_
        first = next(r["first"] for r in c.status() if r["log"] == a.log)
        if start < first:
            print(f"log {a.log} was truncated below position {first}: reading from {first}",
                  file=sys.stderr, flush=True)
            start = first
        rows = []
        if a.follow and not a.json:
            print("\t".join(k.upper() for k in LOG_COLUMNS), flush=True)
        try:
            for e in c.read(a.log, start, follow=a.follow, max_entries=a.max, server=a.server):
                if a.json:
                    row: dict[str, Any] = {"position": e.position, "timestamp_ms": e.timestamp_ms,
                                           "epoch": e.epoch, "payload": _show_payload(e.payload)}
                else:
                    when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(e.timestamp_ms / 1000))
                    row = {"position": e.position, "time": f"{when}.{e.timestamp_ms % 1000:03d}",
                           "epoch": e.epoch, **describe_entry(e.payload)}
                if a.follow:  # stream as they come
                    if a.json:
                        emit(row, True)
                    else:
                        print("\t".join(str(row[k]) for k in LOG_COLUMNS), flush=True)
                else:
                    rows.append(row)
        except LogError as e:
            if e.code.name != "OUT_OF_RANGE":
                raise
            raise CliError(f"log {a.log} was truncated while it was read ({e.message}); "
                           "read it again") from None
        if not a.follow:
            emit(rows, a.json, LOG_COLUMNS)
    return 0


LOG_COLUMNS = ["position", "time", "epoch", "operation", "dataset", "keys"]


def cmd_log_status(a: argparse.Namespace) -> int:
    with _log_client(a) as c:
        rows = c.status()
    if a.json:
        emit(rows, True)
    else:
        emit([{**r, "replicas": {f"s{k}": v for k, v in sorted(r["replicas"].items())}}
              for r in rows], False, ["log", "writer", "epoch", "first", "last", "replicas"])
    return 0


def cmd_log_truncate(a: argparse.Namespace) -> int:
    with _log_client(a) as c:
        first = c.truncate(a.log, a.before)
    emit({"log": a.log, "first_position": first}, a.json)
    return 0


# ---------------------------------------------------------------- datasets
_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(s: str, name: str) -> int:
    """'500ms', '30s', '5m', '2h', '7d', or plain milliseconds."""
    s = s.strip()
    for unit in ("ms", "s", "m", "h", "d"):
        if s.endswith(unit) and s[: -len(unit)].isdigit():
            return int(s[: -len(unit)]) * _UNITS[unit]
    if s.isdigit():
        return int(s)
    raise CliError(f"{name}: {s!r} is not a duration (examples: 500ms, 30s, 5m, 2h, 7d)")


ZK_CONNECT_MAX_S = 30.0


def _zk(a: argparse.Namespace) -> Any:
    """A ZooKeeper client, or a one-line error naming the address within --timeout."""
    from log import zk as zkpaths

    hosts = zk_hosts(a)
    # At most ZK_CONNECT_MAX_S: commands that run long (a shard move, a backup) take a
    # --timeout of minutes for their work, not for finding ZooKeeper.
    wait = min(float(getattr(a, "timeout", 10.0) or 10.0), ZK_CONNECT_MAX_S)
    try:
        return zkpaths.connect(hosts, connect_timeout_s=wait)
    except Exception:
        raise Unreachable(f"cannot reach ZooKeeper at {hosts} within {wait:g}s (--zk, --dir or "
                          "$MIDTOWN_ZK name it)") from None


def cmd_user(a: argparse.Namespace) -> int:
    from catalog import users

    zk = _zk(a)
    try:
        if a.cmd == "add":
            token = users.add(zk, a.name)
            emit({"user": a.name, "token": token}, a.json)
            if not a.json:
                print("keep the token: it is not stored and cannot be shown again", file=sys.stderr)
        elif a.cmd == "list":
            emit([{"user": n} for n in users.names(zk)], a.json, ["user"])
        else:
            users.remove(zk, a.name)
            emit({"removed": a.name}, a.json)
    except ValueError as e:
        raise CliError(str(e)) from None
    finally:
        zk.stop()
    return 0


def cmd_dataset(a: argparse.Namespace) -> int:
    from catalog import datasets, usage
    from coordinator import acl, quotas

    zk = _zk(a)
    try:
        if a.cmd == "create":
            ttl = parse_duration_ms(a.ttl, "--ttl") if a.ttl else 0
            try:
                access = acl.parse(a.acl) if a.acl else None
            except ValueError as e:
                raise CliError(str(e)) from None
            d = datasets.create(zk, a.name, a.consistency, a.replication, ttl, a.rate_limit, access,
                                a.quota, _ms(a.dedup_window, "--dedup-window"), a.dedup_max_ids or 0,
                                _ms(a.dedup_warn_below, "--dedup-warn-below"))
            emit(datasets.describe(d), a.json,
                 ["name", "consistency", "replication", "ttl_ms", "rate_limit", "quota_bytes", "acl", "id"])
        elif a.cmd == "dedup":
            d = datasets.set_dedup(zk, a.name, _ms(a.window, "--window") if a.window else None,
                                   a.max_ids, _ms(a.warn_below, "--warn-below") if a.warn_below else None)
            emit(datasets.describe(d), a.json,
                 ["name", "dedup_window_ms", "dedup_max_ids", "dedup_warn_below_ms"])
        elif a.cmd == "quota":
            d = datasets.set_quota(zk, a.name, a.size)
            emit(datasets.describe(d), a.json, ["name", "quota_bytes"])
        elif a.cmd == "grant":
            d = datasets.grant(zk, a.name, a.user, a.perm)
            emit(datasets.describe(d), a.json, ["name", "acl"])
        elif a.cmd == "list":
            found = [datasets.get(zk, n) for n in datasets.names(zk)]
            rows = [datasets.describe(x) for x in found if x is not None]
            emit(rows, a.json, ["name", "consistency", "replication", "ttl_ms", "rate_limit",
                                "quota_bytes", "acl"])
        elif a.cmd == "describe":
            got = datasets.get(zk, a.name)
            if got is None:
                raise CliError(f"NAME: no dataset {a.name!r}")
            out = datasets.describe(got)
            out["used_bytes"], _ = quotas.used(usage.view(zk), got.id)
            ids = [(e.ids, e.oldest_ms, e.log_time_ms) for st in _node_states(zk).values()
                   for e in st.event_ids if e.dataset == got.id]
            out["event_ids"] = max((n for n, _, _ in ids), default=0)
            out["effective_dedup_window_ms"] = datasets.effective_dedup_window(got, ids)
            low = got.dedup_warn_below_ms and out["effective_dedup_window_ms"] < got.dedup_warn_below_ms
            out["warning"] = (f"effective dedup window {out['effective_dedup_window_ms'] // 1000}s is below "
                              f"{got.dedup_warn_below_ms // 1000}s: raise --dedup-max-ids" if low else "")
            emit(out, a.json, ["name", "consistency", "replication", "ttl_ms", "rate_limit", "quota_bytes",
                               "used_bytes", "effective_dedup_window_ms", "warning", "acl", "id"])
        elif a.cmd == "drop":
            datasets.drop(zk, a.name)
            emit({"dropped": a.name}, a.json)
    except datasets.DatasetError as e:
        raise CliError(str(e)) from None
    finally:
        zk.stop()
        zk.close()
    return 0


def _ms(s: str | None, name: str) -> int:
    return parse_duration_ms(s, name) if s else 0


def _node_states(zk: Any) -> dict[int, Any]:
    """Each member storage node's Status answer (nodes that do not answer are left out)."""
    import grpc

    from midtown_pb import kv_pb2 as kvpb
    from midtown_pb import kv_pb2_grpc
    from runtime import transport

    kv = registry.read_kv(zk)
    if kv is None:
        raise CliError("no key-value topology in this cluster")
    live = registry.members(zk, registry.STORAGE_NODES)
    states: dict[int, Any] = {}
    for nid in kv.storage_nodes:
        addr = live.get(nid)  # members only
        if addr is None:
            continue
        try:
            states[nid] = kv_pb2_grpc.StorageStub(transport.channel(addr)).Status(
                kvpb.NodeStatusRequest(), timeout=5)
        except grpc.RpcError:
            pass
    return states


# ---------------------------------------------------------------- data
def _value_row(local: bytes, v: Any) -> dict:
    return {"local_key": _show_payload(local), "value": _show_payload(v.value), "version": v.version,
            "expires_at_ms": v.expires_at_ms or None}


def cmd_data(a: argparse.Namespace) -> int:

    enc = a.encoding
    p, lk = _payload(a.partition, enc), _payload(getattr(a, "local", "") or "", enc)
    with kv_client(a) as c:
        if a.group == "get":
            v = c.get(a.dataset, p, lk, consistency=a.consistency)
            if v is None:
                if a.json:
                    emit({"found": False}, True)
                else:
                    print("(not found)")
                return 3
            emit({"found": True, **_value_row(lk, v)}, a.json,
                 ["local_key", "value", "version", "expires_at_ms"])
        elif a.group == "put":
            ttl = parse_duration_ms(a.ttl, "--ttl") if a.ttl else 0
            ver = c.put(a.dataset, p, lk, _value(a.value, enc, "VALUE"), ttl_ms=ttl)
            emit({"version": ver}, a.json)
        elif a.group == "delete":
            n = c.delete(a.dataset, p, lk)
            emit({"deleted": n}, a.json)
            if not n and not a.json:
                print("(nothing deleted: no such key)")
        elif a.group == "cas":
            if a.expect is None and not a.expect_absent and not a.expect_version:
                raise CliError("cas: give --expect VALUE, --expect-absent or --expect-version N")
            r = c.cas(a.dataset, p, lk, _value(a.new or "", enc, "--new"),
                      expected=_value(a.expect, enc, "--expect") if a.expect is not None else None,
                      expect_absent=a.expect_absent, expected_version=a.expect_version,
                      delete=a.delete)
            cur = r.current
            emit({"succeeded": r.succeeded, "version": r.version or None,
                  "current": _show_payload(cur.value) if cur else None,
                  "current_version": cur.version if cur else None}, a.json)
            return 0 if r.succeeded else 4
        elif a.group == "incr":
            n = c.incr(a.dataset, p, lk, a.delta)
            emit({"value": n}, a.json)
        elif a.group == "scan":
            page = c.scan(a.dataset, p, start=_payload(a.start, enc), end=_payload(a.end, enc),
                          limit=a.limit, consistency=a.consistency)
            rows = [_value_row(i.local_key, i.value) for i in page.items]
            if a.json:
                emit({"items": rows, "next": _show_payload(page.next) if page.next else None}, True)
            else:
                emit(rows, False, ["local_key", "value", "version", "expires_at_ms"])
                if page.next:
                    print(f"(more: --start {_show_payload(page.next)})")
    return 0


def cmd_node_status(a: argparse.Namespace) -> int:
    """Storage nodes: up or not, the shards and bytes each holds, how far behind each
    log's end, and whether replicas that stand at the same position of a shard hold the
    same digest."""
    from catalog import usage

    with _log_client(a) as logs:
        kv = registry.read_kv(logs.zk)
        if kv is None:
            raise CliError("no key-value topology in this cluster")
        live = registry.members(logs.zk, registry.STORAGE_NODES)
        sets = registry.read_replica_sets(logs.zk, kv)
        ends = {r["log"]: r["last"] for r in logs.status()}
        states = _node_states(logs.zk)
        counted = usage.read_reports(logs.zk)  # what each node last counted it holds
        moving: dict[int, int] = {}  # moves under way to or from each node
        for m, _ in registry.read_moves(logs.zk).values():
            for n in (m.dest, m.leaving):
                if n is not None:
                    moving[n] = moving.get(n, 0) + 1
    digests: dict[tuple[int, int], set[int]] = {}
    for st in states.values():
        for s in st.shards:
            digests.setdefault((s.shard, s.position), set()).add(s.digest)
    rows: list[dict[str, Any]] = []
    for nid in kv.storage_nodes:
        st = states.get(nid)
        if st is None:
            rows.append({"node": nid, "addr": live.get(nid), "state": "down",
                         "shards": len(sets.shards_of(nid)), "bytes": _held(counted, nid),
                         "moving": moving.get(nid, 0), "behind": None,
                         "max_lag": None, "diverged_shards": None, "reclaimed": None,
                         "anti_entropy_taken": None, "anti_entropy_shards": None, "purged": None,
                         "event_ids": None, "event_ids_by_dataset": None})
            continue
        lags = [max(0, ends.get(i, -1) + 1 - p) for i, p in enumerate(st.log_positions)
                if i in sets.logs_of(nid, len(st.log_positions))]  # the logs it tails
        diverged = sum(1 for s in st.shards if len(digests[(s.shard, s.position)]) > 1)
        rows.append({"node": nid, "addr": live.get(nid), "state": "up", "shards": len(st.shards),
                     "bytes": _held(counted, nid), "moving": moving.get(nid, 0), "behind": sum(lags),
                     "max_lag": max(lags, default=0), "diverged_shards": diverged,
                     "reclaimed": st.reclaimed, "anti_entropy_taken": st.lww_repaired,
                     "anti_entropy_shards": st.lww_shards_pulled, "purged": st.lww_purged,
                     "event_ids": sum(e.ids for e in st.event_ids),
                     "event_ids_by_dataset": _ids_by_dataset(st.event_ids)})
    emit(rows, a.json, ["node", "addr", "state", "shards", "bytes", "moving", "behind", "max_lag",
                        "diverged_shards",
                        "reclaimed", "anti_entropy_taken", "anti_entropy_shards", "purged", "event_ids"])
    return 0 if all(r["state"] == "up" and not r["diverged_shards"] for r in rows) else 1


def _held(reports: dict[int, Any], node_id: int) -> int | None:
    """The bytes of keys and values a node counted at its last usage count (None: none yet)."""
    r = reports.get(node_id)
    return None if r is None else sum(r.bytes.values())


def _ids_by_dataset(event_ids: Any) -> dict[str, dict]:
    """Per dataset: ids held and the age of the oldest (in log time) over its shards."""
    out: dict[str, dict] = {}
    for e in event_ids:
        d = out.setdefault(e.dataset.rsplit("#", 1)[0], {"ids": 0, "oldest_age_ms": 0})
        d["ids"] += e.ids
        d["oldest_age_ms"] = max(d["oldest_age_ms"], max(0, e.log_time_ms - e.oldest_ms))
    return out


def cmd_node_remove(a: argparse.Namespace) -> int:
    from catalog import usage

    def remove(zk: Any, node_id: int) -> registry.KvTopology:
        t = registry.remove_storage_node(zk, node_id)
        usage.forget(zk, node_id)  # its counts no longer count toward the quotas
        return t
    t = _change_members(a, remove)
    emit({"removed": a.id, "storage_nodes": list(t.storage_nodes)}, a.json)
    return 0


def cmd_node_add(a: argparse.Namespace) -> int:
    from midtown.cli import shards as shards_cli

    if a.rebalance:
        shards_cli.check_rate(a.rate)
    t = _change_members(a, registry.add_storage_node)
    if a.rebalance:  # then move shards onto it, as `cluster rebalance` does, and say that
        a.dry_run, a.max_moves = False, None
        return shards_cli.cmd_rebalance(a, _zk)
    emit({"added": a.id, "storage_nodes": list(t.storage_nodes)}, a.json)
    return 0


def _change_members(a: argparse.Namespace, change: Any) -> Any:
    zk = _zk(a)
    try:
        return change(zk, a.id)
    except ValueError as e:
        raise CliError(str(e)) from None
    finally:
        zk.stop()
        zk.close()


def cmd_bench_kv(a: argparse.Namespace) -> int:
    from midtown.bench.kv import run as bench

    return bench(a)


def cmd_bench_placements(a: argparse.Namespace) -> int:
    from midtown.bench.placements import run as bench

    return bench(a)


def cmd_bench_spread(a: argparse.Namespace) -> int:
    from midtown.bench.spread import run as bench

    return bench(a)


def cmd_bench_moves(a: argparse.Namespace) -> int:
    from midtown.bench.moves import run as bench

    return bench(a)


def cmd_bench_ingest(a: argparse.Namespace) -> int:
    from midtown.bench.ingest import run as bench

    return bench(a)


def cmd_bench_failover(a: argparse.Namespace) -> int:
    from midtown.bench.failover import run as bench

    return bench(a)


def cmd_bench_spark_read(a: argparse.Namespace) -> int:
    from midtown.bench.spark_read import run as bench

    return bench(a)


def cmd_bench_watch(a: argparse.Namespace) -> int:
    from midtown.bench.watch import run as bench

    return bench(a)


def cmd_bench_log(a: argparse.Namespace) -> int:
    from midtown.bench.appends import run as bench

    return bench(a)


# ---------------------------------------------------------------- parser
def _at_least_one(name: str):  # type: ignore[no-untyped-def]
    nonneg = _nonneg(name)

    def conv(s: str) -> int:
        v = nonneg(s)
        if v < 1:
            raise argparse.ArgumentTypeError(f"{name} must be at least 1, got {v}")
        return v  # type: ignore[no-any-return]
    return conv


def _size(name: str):  # type: ignore[no-untyped-def]
    def conv(s: str) -> int:
        from coordinator.quotas import parse_size
        try:
            return parse_size(s)
        except ValueError as e:
            raise argparse.ArgumentTypeError(f"{name}: {e}") from None
    return conv


def _positive(name: str):  # type: ignore[no-untyped-def]
    def conv(s: str) -> float:
        try:
            v = float(s)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name}: {s!r} is not a number of seconds") from None
        if not v > 0:
            raise argparse.ArgumentTypeError(f"{name}: must be above 0")
        return v
    return conv


def _subset(name: str, allowed: tuple[str, ...]):  # type: ignore[no-untyped-def]
    def conv(s: str) -> tuple[str, ...]:
        got = tuple(x.strip() for x in s.split(",") if x.strip())
        bad = [x for x in got if x not in allowed]
        if bad:
            raise argparse.ArgumentTypeError(f"{name}: {', '.join(bad)} not among {','.join(allowed)}")
        if not got:
            raise argparse.ArgumentTypeError(f"{name}: give one or more of {','.join(allowed)}")
        return tuple(x for x in allowed if x in got)  # in the benchmark's order
    return conv


def _nonneg(name: str):  # type: ignore[no-untyped-def]
    def conv(s: str) -> int:
        try:
            v = int(s)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a whole number, got {s!r}") from None
        if v < 0:
            raise argparse.ArgumentTypeError(f"{name} must be >= 0, got {v}")
        return v
    return conv


def parser() -> argparse.ArgumentParser:
    """The `midtown` command's parser: one function per group of commands below."""
    p = argparse.ArgumentParser(
        prog="midtown", description="Midtown key-value store",
        epilog="The options of every command that talks to a cluster (--zk, --dir, --timeout, --json, "
               "--token, --coordinator, --tls-ca, --encoding) may also come before the command. Exit "
               "codes: 0 done, 1 refused by the store, 2 bad command line, 3 get found nothing, 4 cas "
               "did not succeed, 5 cluster unreachable or no answer in time, 128+N signal N.")
    p.add_argument("--version", action="version", version=f"midtown {version()}")
    sub = p.add_subparsers(dest="group", required=True)
    cluster = _cluster_commands(sub)
    for group in (_log_commands, _dataset_commands, _user_commands, _data_commands):
        group(sub)
    node = _node_commands(sub)
    from midtown.cli import placement as placement_cli
    from midtown.cli import shards as shards_cli

    placement_cli.add_parser(sub, _common)
    shards_cli.add_parser(sub, _common, _zk)
    shards_cli.add_balance_parsers(cluster, node, _common, _zk)  # cluster rebalance, node decommission
    from midtown.cli import log_servers as log_servers_cli

    log_servers_cli.add_parser(sub, _common, _zk)
    from midtown.cli import backup as backup_cli

    backup_cli.add_parser(sub, _common, _zk)
    from midtown.cli import watch as watch_cli

    watch_cli.add_parser(sub, _common)
    _bench_commands(sub)
    return p


def _common(sp: argparse.ArgumentParser, dir_required: bool = False, timeout_s: float = 10.0) -> None:
    """The options every command that talks to a cluster takes."""
    sp.add_argument("--dir", required=dir_required, help="a local cluster's directory")
    sp.add_argument("--zk", help="ZooKeeper HOST:PORT (default: $MIDTOWN_ZK)")
    sp.add_argument("--json", action="store_true", help="print JSON")
    sp.add_argument("--timeout", type=_positive("--timeout"), default=timeout_s,
                    help="seconds to wait for the cluster (default %(default)s)")


def _cluster_commands(sub: Any) -> Any:
    """cluster up|init|down|status|restart: a local cluster (and rebalance, added by
    midtown/cli/shards.py); returns the group's subparsers."""
    cl = sub.add_parser("cluster", help="start, stop and inspect a local cluster")
    cls = cl.add_subparsers(dest="cmd", required=True)
    up = cls.add_parser("up", help="start a local cluster (ZooKeeper and the servers) on loopback")
    up.add_argument("--dir", default=str(DEFAULT_DIR))
    up.add_argument("--detach", action="store_true", help="return once ready")
    up.add_argument("--tls", action="store_true",
                    help="new cluster only: mutual TLS between its processes and TLS for clients, with "
                         "certificates made in DIR/tls (clients trust DIR/tls/ca.pem)")
    up.add_argument("--json", action="store_true")
    up.add_argument("--logs", type=_nonneg("--logs"), default=16, help="logs (new cluster only)")
    up.add_argument("--kv-logs", type=_nonneg("--kv-logs"), default=registry.KV_LOGS_LOCAL_DEFAULT,
                    help="logs the key-value store spreads its shards over (new cluster only; "
                         "default %(default)s: on one machine fewer logs batch better)")
    up.add_argument("--hosts", type=_at_least_one("--hosts"), default=3,
                    help="machines to play (new cluster only): hosts of the host layout; log servers "
                         "and storage nodes of the split layout (default %(default)s)")
    up.add_argument("--replicas", type=_at_least_one("--replicas"), default=REPLICAS_DEFAULT,
                    help="copies of each shard (new cluster only; default %(default)s): with more "
                         "storage nodes, each holds a part of the shards")
    up.add_argument("--layout", choices=LAYOUTS, default=LAYOUT_DEFAULT,
                    help="host (default): one process per machine with a log server, a storage node "
                         "and a coordinator, clients given --zk routed to the log writer's; split: one "
                         "process per component (new cluster only; docs/performance.md)")
    up.set_defaults(fn=cmd_cluster_up)
    it = cls.add_parser("init", help="create a cluster's topology in ZooKeeper (servers started by hand)")
    it.add_argument("--zk", help="ZooKeeper HOST:PORT (default: $MIDTOWN_ZK)")
    it.add_argument("--timeout", type=_positive("--timeout"), default=10.0,
                    help="seconds to wait for ZooKeeper (default %(default)s)")
    it.add_argument("--logs", type=_nonneg("--logs"), default=16)
    it.add_argument("--log-servers", default="0,1,2", help="log server ids, comma-separated")
    it.add_argument("--shards", type=_nonneg("--shards"), default=64)
    it.add_argument("--storage-nodes", default="0,1,2", help="storage node ids, comma-separated")
    it.add_argument("--replicas", type=_at_least_one("--replicas"), default=REPLICAS_DEFAULT,
                    help="copies of each shard (default %(default)s): with more storage nodes, each "
                         "holds a part of the shards")
    it.add_argument("--kv-logs", type=_nonneg("--kv-logs"), default=registry.KV_LOGS_DEFAULT,
                    help="logs the key-value store spreads its shards over (default %(default)s: "
                         "one for each log server to write)")
    it.add_argument("--json", action="store_true")
    it.set_defaults(fn=cmd_cluster_init)
    down = cls.add_parser("down", help="stop a local cluster")
    down.add_argument("--dir", default=str(DEFAULT_DIR))
    down.add_argument("--json", action="store_true")
    down.set_defaults(fn=cmd_cluster_down)
    st = cls.add_parser("status", help="processes of a local cluster")
    st.add_argument("--dir", default=str(DEFAULT_DIR))
    st.add_argument("--json", action="store_true")
    st.set_defaults(fn=cmd_cluster_status)
    rs = cls.add_parser("restart", help="restart one process of a local cluster (see cluster status)")
    rs.add_argument("name", metavar="NAME", help="a process name, such as storage-1 or log-0")
    rs.add_argument("--dir", default=str(DEFAULT_DIR))
    rs.add_argument("--json", action="store_true")
    rs.set_defaults(fn=cmd_cluster_restart)
    return cls


def _log_commands(sub: Any) -> None:
    """log append|read|status|truncate: the replicated logs."""
    lg = sub.add_parser("log", help="operate the replicated logs")
    lgs = lg.add_subparsers(dest="cmd", required=True)
    ap = lgs.add_parser("append", help="append entries to a log")
    ap.add_argument("log", type=_nonneg("LOG"))
    ap.add_argument("data", nargs="+", metavar="DATA")
    ap.add_argument("--encoding", choices=["utf8", "base64"], default="utf8")
    _common(ap, timeout_s=30.0)
    ap.set_defaults(fn=cmd_log_append)
    rd = lgs.add_parser("read", help="read committed entries")
    rd.add_argument("log", type=_nonneg("LOG"))
    rd.add_argument("--from", dest="from_", type=_nonneg("--from"), default=0)
    rd.add_argument("--follow", action="store_true", help="keep reading new entries")
    rd.add_argument("--max", type=_nonneg("--max"), default=0, help="stop after N entries")
    rd.add_argument("--server", help="read from this log server (HOST:PORT)")
    _common(rd)
    rd.set_defaults(fn=cmd_log_read)
    ls = lgs.add_parser("status", help="writer, epoch, positions and replicas of every log")
    _common(ls)
    ls.set_defaults(fn=cmd_log_status)
    tr = lgs.add_parser("truncate", help="remove a log's prefix")
    tr.add_argument("log", type=_nonneg("LOG"))
    tr.add_argument("--before", type=_nonneg("--before"), required=True)
    _common(tr)
    tr.set_defaults(fn=cmd_log_truncate)


def _dataset_commands(sub: Any) -> None:
    """dataset create|dedup|quota|grant|list|describe|drop."""
    ds = sub.add_parser("dataset", help="create, list, describe and drop datasets")
    dss = ds.add_subparsers(dest="cmd", required=True)
    dc = dss.add_parser("create", help="create a dataset")
    dc.add_argument("name")
    dc.add_argument("--consistency", default="strong", choices=["strong", "eventual"])
    dc.add_argument("--replication", type=_nonneg("--replication"), default=3)
    dc.add_argument("--ttl", help="default TTL of new values (30s, 5m, 2h, 7d)")
    dc.add_argument("--rate-limit", type=float, default=0,
                    help="requests/s over all clients (default: none)")
    dc.add_argument("--acl", help="who may use it: USER=r or USER=rw, comma-separated "
                                  "(default: open to every client)")
    dc.add_argument("--quota", type=_size("--quota"), default=0,
                    help="bytes it may hold (10GiB, 500MB; default: none); writes that add data "
                         "are refused beyond it")
    dc.add_argument("--dedup-window", help="how long (log time) an event id is remembered: 28d, 12h "
                                           "(default 28d; docs/exactly-once.md)")
    dc.add_argument("--dedup-max-ids", type=_nonneg("--dedup-max-ids"),
                    help="event ids kept per shard at most; the oldest go first (default 1000000)")
    dc.add_argument("--dedup-warn-below", help="warn when the effective window falls below this (7d)")
    _common(dc)
    dd = dss.add_parser("dedup", help="change a dataset's event-id window, cap or warning threshold")
    dd.add_argument("name")
    dd.add_argument("--window", help="28d, 12h, 30m ...")
    dd.add_argument("--max-ids", type=_nonneg("--max-ids"), help="event ids per shard")
    dd.add_argument("--warn-below", help="warn when the effective window is shorter")
    _common(dd)
    dq = dss.add_parser("quota", help="set a dataset's storage quota")
    dq.add_argument("name")
    dq.add_argument("size", type=_size("SIZE"), help="10GiB, 500MB, bytes, or none")
    _common(dq)
    dg = dss.add_parser("grant", help="set a user's access to a dataset")
    dg.add_argument("name")
    dg.add_argument("user")
    dg.add_argument("perm", help="r (get, scan), rw (everything) or none (take access away)")
    _common(dg)
    for name, helptext in (("list", "list datasets"), ("describe", "show a dataset"),
                           ("drop", "drop a dataset")):
        sp = dss.add_parser(name, help=helptext)
        if name != "list":
            sp.add_argument("name")
        _common(sp)
    for sp in (dc, dd, dg, dq, *[dss.choices[n] for n in ("list", "describe", "drop")]):
        sp.set_defaults(fn=cmd_dataset)


def _user_commands(sub: Any) -> None:
    """user add|list|remove: users and their tokens."""
    us = sub.add_parser("user", help="users and their tokens, for datasets with an access list")
    uss = us.add_subparsers(dest="cmd", required=True)
    for name, helptext in (("add", "create a user and print its token (shown once)"),
                           ("list", "list users"), ("remove", "remove a user (its token stops "
                                                              "working within 5 s)")):
        sp = uss.add_parser(name, help=helptext)
        if name != "list":
            sp.add_argument("name")
        _common(sp)
        sp.set_defaults(fn=cmd_user)


def _data_commands(sub: Any) -> None:
    """get, put, delete, cas, incr, scan: the data."""
    def data(name: str, helptext: str, local: str = "required") -> argparse.ArgumentParser:
        sp = sub.add_parser(name, help=helptext)
        sp.add_argument("dataset")
        sp.add_argument("partition", help="partitioning key")
        if local == "required":
            sp.add_argument("local", help="local key")
        elif local == "optional":
            sp.add_argument("local", nargs="?", default="", help="local key (default empty)")
        sp.add_argument("--coordinator", help="coordinator HOST:PORT (default: discover)")
        sp.add_argument("--token", help="a user's token, for datasets with an access list "
                                        "(default: $MIDTOWN_TOKEN)")
        sp.add_argument("--tls-ca", help="call over TLS, trusting this CA's PEM file "
                                         "(default: $MIDTOWN_TLS_CA; none: plaintext)")
        sp.add_argument("--encoding", choices=["utf8", "base64"], default="utf8",
                        help="how keys and values are written on the command line")
        _common(sp)
        sp.set_defaults(fn=cmd_data)
        return sp

    g = data("get", "read a value", "optional")
    g.add_argument("--consistency", choices=["strong", "eventual"], default="strong")
    pt = data("put", "write a value")
    pt.add_argument("value", help="the value; @FILE reads a file, - standard input (up to ~960 KiB)")
    pt.add_argument("--ttl", help="expire after (30s, 5m, 2h, 7d)")
    data("delete", "delete a value", "optional")
    cs = data("cas", "check-and-set")
    cs.add_argument("new", nargs="?", help="the new value (omit with --delete)")
    cs.add_argument("--expect", help="the value expected now")
    cs.add_argument("--expect-absent", action="store_true", help="expect no value")
    cs.add_argument("--expect-version", type=_nonneg("--expect-version"), default=0)
    cs.add_argument("--delete", action="store_true", help="delete instead of writing NEW")
    ic = data("incr", "add to a decimal counter")
    ic.add_argument("delta", nargs="?", type=int, default=1)
    sc = data("scan", "list local keys of a partitioning key, in byte order", "none")
    sc.add_argument("--start", default="")
    sc.add_argument("--end", default="")
    sc.add_argument("--limit", type=_nonneg("--limit"), default=100)
    sc.add_argument("--consistency", choices=["strong", "eventual"], default="strong")


def _node_commands(sub: Any) -> Any:
    """node status|remove|add: storage node administration (and decommission, added by
    midtown/cli/shards.py); returns the group's subparsers."""
    nd = sub.add_parser("node", help="storage node administration")
    nds = nd.add_subparsers(dest="cmd", required=True)
    ns = nds.add_parser("status", help="storage nodes: up, entries behind, diverged shards")
    _common(ns)
    ns.set_defaults(fn=cmd_node_status)
    nr = nds.add_parser("remove", help="take a storage node out of the membership (it stops "
                                       "holding the logs back)")
    nr.add_argument("id", type=_nonneg("ID"))
    _common(nr)
    nr.set_defaults(fn=cmd_node_remove)
    na = nds.add_parser("add", help="make a storage node a member; started, it bootstraps from a "
                                    "peer if the logs no longer hold what it lacks")
    na.add_argument("id", type=_nonneg("ID"))
    na.add_argument("--rebalance", action="store_true",
                    help="then move shards onto it until every member holds as many (replica sets)")
    na.add_argument("--rate", type=float, default=0.0, help="with --rebalance: copy at most this many MB/s")
    _common(na, timeout_s=600.0)
    na.set_defaults(fn=cmd_node_add)
    return nds


def _ascending(name: str):  # type: ignore[no-untyped-def]
    """A list option (--keys, --watchers): whole numbers above 0, comma-separated, ascending."""
    def parse(raw: str) -> tuple[int, ...]:
        try:
            out = tuple(int(x) for x in raw.split(","))
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name}: {raw!r}: whole numbers, comma-separated") from None
        if not out or min(out) < 1 or list(out) != sorted(out):
            raise argparse.ArgumentTypeError(f"{name}: {raw!r}: numbers above 0, ascending")
        return out
    return parse


ETCD_APIS = ("grpc", "json")  # midtown/bench/etcd.py APIS (not imported: it loads gRPC)


def _bench_commands(sub: Any) -> None:
    """bench log|kv|placements|ingest: the benchmarks."""
    bn = sub.add_parser("bench", help="benchmarks")
    bns = bn.add_subparsers(dest="cmd", required=True)
    bl = bns.add_parser("log", help="append throughput, latency and failover time")
    bl.add_argument("--seconds", type=float, default=5.0, help="per workload")
    bl.add_argument("--dir", help="benchmark this running cluster instead of a fresh one")
    bl.add_argument("--no-failover", action="store_true")
    bl.add_argument("--json", action="store_true")
    bl.set_defaults(fn=cmd_bench_log)
    bf = bns.add_parser("failover", help="time from SIGKILL or SIGSTOP of a key's writer to its next "
                                         "acknowledged put, Midtown beside etcd (its leader)")
    bf.add_argument("--rounds", type=_at_least_one("--rounds"), default=10,
                    help="kills, and then pauses, of each system")
    bf.add_argument("--pause-seconds", type=_positive("--pause-seconds"), default=10.0)
    bf.add_argument("--deadline", type=_positive("--deadline"), default=10.0,
                    help="each put's deadline, in seconds, within which it retries")
    bf.add_argument("--layout", choices=LAYOUTS, default=LAYOUT_DEFAULT,
                    help="the Midtown cluster's process layout (see `cluster up --layout`)")
    bf.add_argument("--no-etcd", action="store_true", help="measure Midtown only")
    bf.add_argument("--json", action="store_true")
    bf.set_defaults(fn=cmd_bench_failover)
    br = bns.add_parser("spark-read", help="a whole dataset read through the Spark data source: rows/s and "
                                           "the Python workers' peak memory, beside Parquet on local disk")
    br.add_argument("--keys", type=_ascending("--keys"), default=(1_000_000, 5_000_000),
                    help="dataset sizes, comma-separated, ascending (default 1000000,5000000)")
    br.add_argument("--value-bytes", type=_at_least_one("--value-bytes"), default=100)
    br.add_argument("--json", action="store_true")
    br.set_defaults(fn=cmd_bench_spark_read, starts_spark=True)
    bw = bns.add_parser("watch", help="changes/s delivered to 1 and to 16 watchers, and the delay from a "
                                      "put's acknowledgement to its delivery (p50, p99)")
    bw.add_argument("--watchers", type=_ascending("--watchers"), default=(1, 16),
                    help="watcher counts, comma-separated, ascending (default 1,16)")
    bw.add_argument("--seconds", type=_positive("--seconds"), default=10.0, help="of puts per watcher count")
    bw.add_argument("--count", type=_at_least_one("--count"), default=1000, help="puts timed for the delay")
    bw.add_argument("--rate", type=_positive("--rate"), default=100.0, help="of those puts, per second")
    bw.add_argument("--json", action="store_true")
    bw.set_defaults(fn=cmd_bench_watch)
    bk = bns.add_parser("kv", help="put, strong get and CAS at 1 and 64 clients, against etcd "
                                   "and a Python gRPC server doing nothing (the floor)")
    bk.add_argument("--seconds", type=float, default=5.0, help="per workload and system")
    bk.add_argument("--rounds", type=_at_least_one("--rounds"), default=1,
                    help="measure each workload this many times, Midtown, etcd and the floor alternating, "
                         "and print medians (this machine is noisy)")
    bk.add_argument("--layout", choices=LAYOUTS, default=LAYOUT_DEFAULT,
                    help="the Midtown cluster's process layout (see `cluster up --layout`); with host, "
                         "clients send each key to the coordinator beside its log's writer, and an "
                         "'unrouted' column sends to any")
    bk.add_argument("--kv-logs", type=_at_least_one("--kv-logs"), default=registry.KV_LOGS_LOCAL_DEFAULT,
                    help="logs the key-value store spreads its shards over (see `cluster up --kv-logs`)")
    bk.add_argument("--ops", type=_subset("--ops", ("put", "get", "cas")), default=("put", "get", "cas"),
                    help="the workloads, comma-separated (default put,get,cas)")
    bk.add_argument("--clients", type=_subset("--clients", ("1", "64")), default=("1", "64"),
                    help="the client counts, comma-separated (default 1,64); --ops cas --clients 1 "
                         "measures single-client CAS alone")
    bk.add_argument("--etcd-api", choices=ETCD_APIS, default="grpc",
                    help="how etcd is called: its gRPC API (default) or its v3 JSON gateway over HTTP/1.1, "
                         "as this benchmark did before")
    bk.add_argument("--json", action="store_true")
    bk.set_defaults(fn=cmd_bench_kv)
    bp = bns.add_parser("placements", help="placements looked up (cached, uncached) and allocated "
                                           "under contention (16 threads) per second")
    bp.add_argument("--seconds", type=float, default=5.0)
    bp.add_argument("--json", action="store_true")
    bp.set_defaults(fn=cmd_bench_placements)
    bm = bns.add_parser("moves", help="a shard move's copy rate, puts' latency during a move against "
                                      "without, and the time to drain a node")
    bm.add_argument("--mb", type=_at_least_one("--mb"), default=64, help="MB loaded into the moved shard")
    bm.add_argument("--seconds", type=_positive("--seconds"), default=10.0,
                    help="the steady workload alone, before the move")
    bm.add_argument("--clients", type=_at_least_one("--clients"), default=4)
    bm.add_argument("--json", action="store_true")
    bm.set_defaults(fn=cmd_bench_moves)
    bs = bns.add_parser("spread", help="per storage node, records applied/s and bytes held with 3 nodes and "
                                      "with 6 at the same offered load; per log server, segments and bytes")
    bs.add_argument("--rate", type=_positive("--rate"), default=150.0, help="puts per second offered")
    bs.add_argument("--seconds", type=_positive("--seconds"), default=20.0)
    bs.add_argument("--value-bytes", type=_at_least_one("--value-bytes"), default=1000)
    bs.add_argument("--json", action="store_true")
    bs.set_defaults(fn=cmd_bench_spread)
    bi = bns.add_parser("ingest", help="exactly-once ingestion (bulk writes with event ids, 0.6%% repeats) "
                                       "against etcd, and through Spark plain vs exactly once")
    bi.add_argument("--seconds", type=float, default=10.0, help="per system and round")
    bi.add_argument("--rounds", type=_at_least_one("--rounds"), default=1,
                    help="rounds, the systems alternating; medians are printed")
    bi.add_argument("--clients", type=_at_least_one("--clients"), default=64, help="concurrent writers")
    bi.add_argument("--batch", type=_at_least_one("--batch"), default=500, help="events per bulk call")
    bi.add_argument("--spark", action=argparse.BooleanOptionalAction, default=True,
                    help="also measure Spark end to end (default: yes)")
    bi.add_argument("--spark-rows", type=_at_least_one("--spark-rows"), default=200_000)
    bi.add_argument("--layout", choices=LAYOUTS, default=LAYOUT_DEFAULT,
                    help="the Midtown cluster's process layout (see `cluster up --layout`)")
    bi.add_argument("--kv-logs", type=_at_least_one("--kv-logs"), default=registry.KV_LOGS_LOCAL_DEFAULT,
                    help="logs the key-value store spreads its shards over (see `cluster up --kv-logs`)")
    bi.add_argument("--etcd-api", choices=ETCD_APIS, default="grpc",
                    help="how etcd is called: its gRPC API (default) or its v3 JSON gateway over HTTP/1.1, "
                         "as this benchmark did before")
    bi.add_argument("--json", action="store_true")
    bi.set_defaults(fn=cmd_bench_ingest, starts_spark=True)


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as package_version

    try:
        return package_version("midtown")
    except PackageNotFoundError:
        return "unknown (not installed)"


# Exit codes, one per kind of outcome (docs/api.md, "The command line"): 3 and 4 are a
# get that found nothing and a check-and-set that did not succeed; 128 + N, signal N.
EXIT_REFUSED = 1  # the store refused the request (its gRPC status is printed)
EXIT_USAGE = 2  # a bad command line or argument
EXIT_UNREACHABLE = 5  # the cluster could not be reached, or did not answer in time

# Options that every command talking to a cluster takes, accepted before the command too
# (`midtown --zk HOST:PORT get ...`, as `etcdctl --endpoints ... get`): option -> takes a value.
COMMON_OPTIONS = {"--zk": True, "--dir": True, "--timeout": True, "--json": False, "--token": True,
                  "--coordinator": True, "--tls-ca": True, "--encoding": True}


def hoist_common(args: list[str]) -> list[str]:
    """`args` with the common options given before the command moved after it (before a
    `--`, if any), where the command's own parser takes them."""
    front: list[str] = []
    i = 0
    while i < len(args) and args[i].startswith("--") and args[i] != "--":
        name = args[i].split("=", 1)[0]
        if name not in COMMON_OPTIONS:
            break  # --version, --help, or a mistake the parser will name
        takes_value = COMMON_OPTIONS[name] and "=" not in args[i]
        front += args[i:i + 1 + takes_value]
        i += 1 + takes_value
    rest = args[i:]
    cut = rest.index("--") if "--" in rest else len(rest)
    return rest[:cut] + front + rest[cut:]


def _exit_now(code: int) -> None:
    """End the process without the interpreter's finalization. An interrupted command has
    stopped what it started (its `finally` blocks ran), but threads of its own may still be
    in gRPC calls (a benchmark's appenders); finalizing the interpreter under them crashed
    gRPC's core now and then (`bench log` ended by SIGSEGV, not 143, on SIGTERM)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = hoist_common(sys.argv[1:] if argv is None else argv)
    if not args:
        p.print_help()
        return 0
    a = p.parse_args(args)
    if getattr(a, "starts_spark", False):  # beside its gRPC clients (runtime/forking.py)
        restart_without_grpc_fork_handlers("midtown.cli", args)
    import logging

    logging.getLogger("kazoo").setLevel(logging.CRITICAL)  # reconnect chatter on exit
    from log.client import LogError
    from midtown.errors import MidtownError

    interrupt_on_stop_signals()  # what a command started, it stops on SIGTERM and SIGHUP too
    try:
        return int(a.fn(a))
    except Unreachable as e:
        print(f"midtown: {e}", file=sys.stderr)
        return EXIT_UNREACHABLE
    except CliError as e:
        print(f"midtown: {e}", file=sys.stderr)
        return EXIT_USAGE
    except (LogError, MidtownError) as e:
        print(f"midtown: {e.code.name}: {e.message}", file=sys.stderr)
        return EXIT_UNREACHABLE if e.code.name in ("UNAVAILABLE", "DEADLINE_EXCEEDED") else EXIT_REFUSED
    except KeyboardInterrupt as e:
        if argv is None:  # the command itself (not a caller in this process): end it now
            _exit_now(exit_code(e))
        return exit_code(e)
    except BrokenPipeError:
        return 0
    except Exception as e:  # never a traceback: one line, and where to look
        print(f"midtown: unexpected error: {type(e).__name__}: {e} (run with MIDTOWN_DEBUG=1 for "
              "the traceback)", file=sys.stderr)
        if os.environ.get("MIDTOWN_DEBUG"):
            raise
        return 1


if __name__ == "__main__":
    sys.exit(main())
