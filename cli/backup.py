"""`midtown backup DIR` and `midtown restore DIR`: a cluster's data written out shard by
shard, and read back into another cluster.

A backup takes each shard's copy from one of its replicas the way a shard move does
(Storage.Snapshot of one shard: one checkpoint, at one position of the shard's log), so
each shard is consistent: exactly the effects of its log up to that position. Shards are
taken one after another, each at its own position: a backup is not one cut across shards
(a batch over two shards may be in one shard's copy and not in the other's).

Files: DIR/shard-NNNNN.pb (the chunks as the replica sent them, each after its length in
4 bytes), and DIR/manifest.json, written last (a backup without one did not finish):
the datasets' definitions and, per shard, the position, log time, keys and bytes.

A restore writes the values again through the store of the target cluster (a new one:
the datasets must not exist there), so it works whatever that cluster's shard count:
every value with its remaining time to live as of the backup. New versions come with the
new writes, and the ids seen (request and event ids, for exactly once) are not restored.
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from catalog import datasets, registry
from cli.connect import CliError, kv_client
from cli.output import emit
from cli.shards import check_rate, topology
from runtime import membership

FORMAT = 1
MANIFEST = "manifest.json"
_LEN = struct.Struct(">I")
WRITE_BATCH_ITEMS = 200
WRITE_BATCH_BYTES = 2 * 1024 * 1024


def add_parser(sub: Any, common: Callable[..., None], zk_of: Callable[[argparse.Namespace], Any]) -> None:
    bk = sub.add_parser("backup", help="write every shard's data at one position of its log to DIR")
    # Its own name: --dir (the common option) names the cluster's directory.
    bk.add_argument("backup_dir", metavar="DIR", help="a directory that does not exist yet, or is empty")
    bk.add_argument("--rate", type=float, default=0.0,
                    help="read at most this many MB/s per shard (0: no limit)")
    rs = sub.add_parser("restore", help="write a backup's values into a cluster whose datasets are new")
    rs.add_argument("backup_dir", metavar="DIR", help="a backup's directory (midtown backup DIR)")
    rs.add_argument("--coordinator", help="coordinator HOST:PORT (default: discover)")
    rs.add_argument("--token", help="a user's token (default: $MIDTOWN_TOKEN)")
    rs.add_argument("--tls-ca", help="call over TLS, trusting this CA's PEM file")
    common(bk, timeout_s=600.0)
    common(rs, timeout_s=600.0)
    bk.set_defaults(fn=lambda a: backup(a, zk_of))
    rs.set_defaults(fn=lambda a: restore(a, zk_of))


def _say(a: argparse.Namespace) -> Callable[[str], None]:
    return (lambda m: None) if a.json else (lambda m: print(m, file=sys.stderr, flush=True))


# ---------------------------------------------------------------- backup
def backup(a: argparse.Namespace, zk_of: Callable[[argparse.Namespace], Any]) -> int:
    import grpc

    from midtown_pb import kv_pb2 as pb
    from midtown_pb import kv_pb2_grpc
    from runtime import transport

    out = Path(a.backup_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise CliError(f"DIR: {out} exists and is not an empty directory")
    check_rate(a.rate)
    say = _say(a)
    zk = zk_of(a)
    try:
        kv, sets = topology(zk)
        log_map = registry.read_log_map(zk, kv)
        defs = {}
        for name in datasets.names(zk):
            d = datasets.get(zk, name)
            if d is not None:
                raw, _ = zk.get(f"{datasets.ROOT}/{name}")
                defs[d.id] = {"name": name, "definition": json.loads(raw)}
        out.mkdir(parents=True, exist_ok=True)
        shards: list[dict[str, Any]] = []
        t0, total = time.monotonic(), 0
        for shard in range(kv.shards):
            live = membership.members(zk, registry.STORAGE_NODES)
            errors = []
            for node in [n for n in sets.of(shard) if n in live]:
                path = out / f"shard-{shard:05d}.pb"
                try:
                    with transport.channel(live[node]) as channel, open(path, "wb") as f:
                        got = _take(kv_pb2_grpc.StorageStub(channel).Snapshot(
                            pb.SnapshotRequest(one_shard=True, shard=shard, rate_mb_s=a.rate),
                            timeout=a.timeout), f)
                    shards.append({"shard": shard, "node": node, **got, "log": log_map.log_of(shard)})
                    total += got["bytes"]
                    break
                except (grpc.RpcError, CliError) as e:
                    errors.append(f"node {node}: {e.details() if isinstance(e, grpc.RpcError) else e}")
            else:
                why = "; ".join(errors) or "none is up"
                raise CliError(f"shard {shard}: no replica gave a copy ({why}); "
                               f"the backup in {out} is not whole (it has no {MANIFEST})")
            say(f"shard {shard + 1} of {kv.shards}: {shards[-1]['keys']} keys, {shards[-1]['bytes']} bytes "
                f"at position {shards[-1]['position']} of log {shards[-1]['log']}")
        manifest = {"format": FORMAT, "taken_at_ms": int(time.time() * 1000), "shards": kv.shards,
                    "kv_logs": kv.logs, "datasets": defs, "shard_copies": shards}
        tmp = out / (MANIFEST + ".tmp")
        tmp.write_text(json.dumps(manifest, indent=1))
        os.replace(tmp, out / MANIFEST)
        emit({"dir": str(out), "shards": kv.shards, "datasets": sorted(d["name"] for d in defs.values()),
              "bytes": total, "seconds": round(time.monotonic() - t0, 3)}, a.json)
        return 0
    finally:
        zk.stop()
        zk.close()


def _take(chunks: Iterator[Any], f: Any) -> dict[str, Any]:
    """Write a shard's chunks to `f`; what the last one says."""
    keys = size = 0
    for chunk in chunks:
        raw = chunk.SerializeToString()
        f.write(_LEN.pack(len(raw)) + raw)
        keys += len(chunk.keys)
        size += sum(len(k) + len(v) for k, v in zip(chunk.keys, chunk.values))
        if chunk.last:
            if chunk.count != keys:
                raise CliError(f"{keys} keys received, the replica sent {chunk.count}")
            return {"position": chunk.position, "log_time_ms": chunk.log_time_ms, "keys": keys, "bytes": size}
    raise CliError("the copy ended before its last chunk")


# ---------------------------------------------------------------- restore
def _chunks(path: Path) -> Iterator[Any]:
    from midtown_pb import kv_pb2 as pb

    with open(path, "rb") as f:
        while True:
            head = f.read(_LEN.size)
            if not head:
                return
            if len(head) < _LEN.size:
                raise CliError(f"DIR: {path.name} ends in the middle of a chunk")
            raw = f.read(_LEN.unpack(head)[0])
            yield pb.SnapshotChunk.FromString(raw)


def _wait_usable(db: Any, name: str, timeout_s: float = 30.0) -> None:
    """Until the coordinators know a dataset just created (they cache the list)."""
    from midtown.errors import NotFound

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            db.shards(name)
            return
        except NotFound:
            if time.monotonic() > deadline:
                raise CliError(f"dataset {name!r} was created, but the coordinators do not know it") from None
            time.sleep(0.2)


def restore(a: argparse.Namespace, zk_of: Callable[[argparse.Namespace], Any]) -> int:
    from midtown.client import Write
    from storage_node import keys, lww

    src = Path(a.backup_dir)
    say = _say(a)
    zk = zk_of(a)
    try:
        try:
            manifest = json.loads((src / MANIFEST).read_text())
        except (OSError, ValueError) as e:
            raise CliError(f"DIR: {src} holds no whole backup ({MANIFEST}: {e})") from None
        if manifest.get("format") != FORMAT:
            raise CliError(f"DIR: backup format {manifest.get('format')!r}, this midtown reads {FORMAT}")
        names = {i: d["name"] for i, d in manifest["datasets"].items()}
        for d in manifest["datasets"].values():
            if datasets.get(zk, d["name"]) is not None:
                raise CliError(f"DIR: dataset {d['name']!r} exists in this cluster already: restore into a "
                               "cluster without it")
        for d in manifest["datasets"].values():
            b = d["definition"]
            datasets.create(zk, d["name"], b["consistency"], b["replication"], b["ttl_ms"],
                            b.get("rate_limit", 0), b.get("acl") or None, b.get("quota_bytes", 0),
                            b.get("dedup_window_ms", 0), b.get("dedup_max_ids", 0),
                            b.get("dedup_warn_below_ms", 0), b.get("scope", "global"))
    finally:
        zk.stop()
        zk.close()
    counts = {"values": 0, "expired": 0, "deleted": 0}
    t0 = time.monotonic()
    with kv_client(a) as db:
        for name in names.values():
            _wait_usable(db, name)
        for n, copy in enumerate(manifest["shard_copies"]):
            batch: dict[str, list[Any]] = {}
            size = 0

            def flush() -> None:
                nonlocal size
                for name, writes in batch.items():
                    if writes:
                        db.write_many(name, writes)
                batch.clear()
                size = 0
            for chunk in _chunks(src / f"shard-{copy['shard']:05d}.pb"):
                for k, v in zip(chunk.keys, chunk.values):
                    if k[:1] not in (b"K", b"E"):
                        continue  # digests, ids seen, indexes: not restored
                    name = names.get(keys.dataset_of(k))
                    if name is None:
                        continue  # a dataset dropped before the backup's manifest was read
                    pkey, lkey = keys.split_value_key(k, 6 + len(keys.dataset_of(k).encode()))
                    if k[:1] == b"K":
                        s = keys.decode_stored(v)
                        left = s.expires_at_ms - chunk.log_time_ms if s.expires_at_ms else 0
                        if s.expires_at_ms and left <= 0:
                            counts["expired"] += 1
                            continue
                        batch.setdefault(name, []).append(Write.put(pkey, lkey, s.value, ttl_ms=left))
                        size += len(s.value) + len(pkey) + len(lkey)
                    else:
                        ev = lww.decode(v)
                        left = ev.expires_at_ms - manifest["taken_at_ms"] if ev.expires_at_ms else 0
                        if ev.deleted or (ev.expires_at_ms and left <= 0):
                            counts["deleted" if ev.deleted else "expired"] += 1
                            continue
                        db.put(name, pkey, lkey, ev.value, ttl_ms=left)  # eventual: no bulk writes
                    counts["values"] += 1
                    if sum(len(w) for w in batch.values()) >= WRITE_BATCH_ITEMS or size >= WRITE_BATCH_BYTES:
                        flush()
            flush()
            say(f"shard {n + 1} of {len(manifest['shard_copies'])}: {counts['values']} values written so far")
    emit({"dir": str(src), "datasets": sorted(names.values()), **counts,
          "seconds": round(time.monotonic() - t0, 3)}, a.json)
    return 0
