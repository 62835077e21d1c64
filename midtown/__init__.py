"""Midtown: the Python SDK and the `midtown` command.

    from midtown import Client, AsyncClient
"""

from midtown.aio import AsyncClient, AsyncWatcher
from midtown.client import (
    BatchResult,
    CasResult,
    Client,
    Item,
    Op,
    OpOutcome,
    ScanPage,
    ShardItem,
    ShardPage,
    ShardSplit,
    ShardSplits,
    Value,
    Watcher,
    Write,
    WriteOutcome,
)
from midtown.errors import (
    DeadlineExceeded,
    FailedPrecondition,
    InvalidArgument,
    MidtownError,
    NotFound,
    OutOfRange,
    PermissionDenied,
    QuotaExceeded,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
)
from midtown.watch import Change

__all__ = [
    "AsyncClient", "AsyncWatcher", "BatchResult", "Change", "CasResult", "Client", "Item", "Op",
    "OpOutcome", "ScanPage",
    "ShardItem", "ShardPage", "ShardSplit", "ShardSplits", "Value", "Watcher", "Write", "WriteOutcome",
    "DeadlineExceeded", "FailedPrecondition",
    "InvalidArgument", "MidtownError", "NotFound", "OutOfRange", "PermissionDenied", "QuotaExceeded",
    "ResourceExhausted", "Unauthenticated", "Unavailable",
]
