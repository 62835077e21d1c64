"""What every Storage request is checked for at the edge, before any of it reaches a key
layout: a field the node would fail on deep inside (a dataset id longer than a key keeps,
storage_node/keys.py) is refused as INVALID_ARGUMENT naming it, never an internal error.
The methods' own checks (shards, pages, cursors) stay with them."""

from __future__ import annotations

from typing import Any

from runtime.refusals import BadRequest
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
