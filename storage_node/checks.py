"""What every Storage request is checked for at the edge, before any of it reaches a key
layout: a field the node would fail on deep inside (a dataset id longer than a key keeps,
storage_node/keys.py) is refused as INVALID_ARGUMENT naming it, never an internal error.
The methods' own checks (shards, pages, cursors) stay with them."""

from __future__ import annotations

from typing import Any

import grpc

from runtime.refusals import BadRequest, Refusal
from storage_node.limits import DATASET_ID_BYTES_MAX


def dataset_id(value: str, field: str) -> None:
    n = len(value.encode())
    if n > DATASET_ID_BYTES_MAX:
        raise BadRequest(f"{field}: {n} bytes, the limit is {DATASET_ID_BYTES_MAX}")


def request(req: Any) -> Any:
    """`req` if its dataset ids fit (the request's own, and each of a ReadMany's); else
    BadRequest naming the field."""
    fields = req.DESCRIPTOR.fields_by_name
    if "dataset" in fields:
        dataset_id(req.dataset, "dataset")
    if "requests" in fields:
        for i, r in enumerate(req.requests):
            if "dataset" in r.DESCRIPTOR.fields_by_name:
                dataset_id(r.dataset, f"requests[{i}].dataset")
    return req


def placed_in(here: int, shard: int, asked: int, field: str = "") -> None:
    """Refused (UNAVAILABLE) unless this replica takes `shard`'s records from log `asked`,
    the log a read's position is of (`here`: the log it takes them from): handed over
    (docs/log.md step 5), or not yet here (this node's map, or its state, older than the
    asker's), the index of the log the asker's map names says nothing of the shard here."""
    if here != asked:
        raise Refusal(grpc.StatusCode.UNAVAILABLE, f"{field}shard {shard}'s records come from log {here} "
                      f"here, not {asked}; read the shard -> log map again, or another replica")
