"""Midtown: the Python SDK and the `midtown` command.

    from midtown import Client, AsyncClient
"""

from midtown.aio import AsyncClient
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

__all__ = [
    "AsyncClient", "BatchResult", "CasResult", "Client", "Item", "Op", "OpOutcome", "ScanPage",
    "ShardItem", "ShardPage", "ShardSplit", "ShardSplits", "Value", "Write", "WriteOutcome",
    "DeadlineExceeded", "FailedPrecondition",
    "InvalidArgument", "MidtownError", "NotFound", "OutOfRange", "PermissionDenied", "QuotaExceeded",
    "ResourceExhausted", "Unauthenticated", "Unavailable",
]
