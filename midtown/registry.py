"""ZooKeeper layout shared by coordinators, storage nodes and clients (the log's own is in
log/zk.py):

  /midtown/kv                      {"shards": S, "storage_nodes": [ids]}   persistent
  /midtown/storage_nodes/<id>      {"addr": "host:port"}                   ephemeral
  /midtown/coordinators/<id>       {"addr": "host:port"}                   ephemeral
  /midtown/datasets/<name>         dataset definition (coordinator/datasets.py)"""

from __future__ import annotations

import json
from dataclasses import dataclass

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

KV = "/midtown/kv"
STORAGE_NODES = "/midtown/storage_nodes"
COORDINATORS = "/midtown/coordinators"
SHARDS_DEFAULT = 64
SHARDS_MAX = 65536


@dataclass(frozen=True)
class KvTopology:
    shards: int
    storage_nodes: tuple[int, ...]


def create_kv(zk: KazooClient, shards: int, storage_nodes: list[int]) -> KvTopology:
    if not 1 <= shards <= SHARDS_MAX:
        raise ValueError(f"shards: must be between 1 and {SHARDS_MAX}")
    zk.ensure_path(STORAGE_NODES)
    zk.ensure_path(COORDINATORS)
    try:
        zk.create(KV, json.dumps({"shards": shards, "storage_nodes": storage_nodes}).encode(),
                  makepath=True)
    except NodeExistsError:
        pass
    t = read_kv(zk)
    assert t is not None
    return t


def read_kv(zk: KazooClient) -> KvTopology | None:
    try:
        data, _ = zk.get(KV)
    except NoNodeError:
        return None
    d = json.loads(data)
    return KvTopology(d["shards"], tuple(d["storage_nodes"]))


def register(zk: KazooClient, parent: str, member_id: int, addr: str) -> None:
    path = f"{parent}/{member_id}"
    data = json.dumps({"addr": addr}).encode()
    try:
        zk.create(path, data, ephemeral=True, makepath=True)
    except NodeExistsError:
        zk.delete(path)
        zk.create(path, data, ephemeral=True, makepath=True)


def members(zk: KazooClient, parent: str) -> dict[int, str]:
    out: dict[int, str] = {}
    try:
        children = zk.get_children(parent)
    except NoNodeError:
        return out
    for c in children:
        try:
            data, _ = zk.get(f"{parent}/{c}")
        except NoNodeError:
            continue
        out[int(c)] = json.loads(data)["addr"]
    return out
