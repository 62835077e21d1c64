"""A storage node's tunable intervals: a dataclass the process shell builds (from the
environment, `Settings.from_env`, in storage_node/server.py and the one-process host) and
passes to StorageNode; nothing inside the node reads the environment."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from log.limits import LINGER_MS_MAX

# Upper bounds of the settings that have one, in seconds.
_MAX_S = {"read_linger_s": LINGER_MS_MAX / 1000}  # what a Read may ask for


@dataclass(frozen=True)
class Settings:
    # How often a node syncs and publishes its positions, and truncates the logs
    # (MIDTOWN_POSITION_INTERVAL_S): the logs keep at most about this much more than needed.
    position_interval_s: float = 10.0
    # How often a node pulls newer eventual values from a peer (MIDTOWN_ANTI_ENTROPY_S).
    anti_entropy_s: float = 60.0
    # How long after a dataset is dropped its keys are deleted (MIDTOWN_DROP_DELAY_S), so
    # that requests already under way come first.
    drop_delay_s: float = 60.0
    # How often a node counts and publishes what each dataset stores, for the quota checks
    # (MIDTOWN_USAGE_INTERVAL_S).
    usage_interval_s: float = 10.0
    # How long an eventual dataset's tombstone is kept (MIDTOWN_TOMBSTONE_GRACE_S): a
    # replica down for longer bootstraps rather than bring a deleted value back.
    tombstone_grace_s: float = 24 * 3600.0
    # In the host layout, how long the log's writer may hold committed entries for this
    # node's Read stream to send them together (MIDTOWN_READ_LINGER_S, at most 1 s): records
    # are answered beside the writer, and entries someone waits for go at once (log/linger.py).
    read_linger_s: float = 0.1
    # How long (in log time) a node keeps the changes of strong datasets for watchers
    # (MIDTOWN_CHANGE_RETENTION_S): a watch from an older position is refused, naming the
    # first position still held (storage_node/changes.py, docs/api.md "Watch").
    change_retention_s: float = 3600.0

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> Settings:
        """The defaults, each overridden by MIDTOWN_<FIELD> when set; a value that is not a
        positive number (of seconds, or a whole number of rows) is refused naming the
        variable."""
        out: dict[str, Any] = {}
        for f in fields(cls):
            name = "MIDTOWN_" + f.name.upper()
            if name in env:
                whole = f.type == "int"
                try:
                    v: float | int = int(env[name]) if whole else float(env[name])
                except ValueError:
                    v = -1
                if not v > 0:
                    raise ValueError(f"{name}: {env[name]!r} is not a positive "
                                     + ("whole number" if whole else "number of seconds"))
                if v > _MAX_S.get(f.name, v):
                    raise ValueError(f"{name}: {env[name]!r} is more than {_MAX_S[f.name]} s")
                out[f.name] = v
        return cls(**out)
