"""One exception class per kind of error a Midtown call can end with."""

from __future__ import annotations

import grpc

from runtime import refusals


class MidtownError(Exception):
    code: grpc.StatusCode = grpc.StatusCode.UNKNOWN

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidArgument(MidtownError):
    code = grpc.StatusCode.INVALID_ARGUMENT


class NotFound(MidtownError):
    code = grpc.StatusCode.NOT_FOUND


class FailedPrecondition(MidtownError):
    code = grpc.StatusCode.FAILED_PRECONDITION


class OutOfRange(MidtownError):
    code = grpc.StatusCode.OUT_OF_RANGE


class ResourceExhausted(MidtownError):
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class QuotaExceeded(ResourceExhausted):
    """The dataset holds as much as its storage quota allows: the write was refused and is
    not retried. Deletes are still taken."""


class Unavailable(MidtownError):
    code = grpc.StatusCode.UNAVAILABLE


class DeadlineExceeded(MidtownError):
    code = grpc.StatusCode.DEADLINE_EXCEEDED


class PermissionDenied(MidtownError):
    code = grpc.StatusCode.PERMISSION_DENIED


class Unauthenticated(MidtownError):
    code = grpc.StatusCode.UNAUTHENTICATED


_BY_CODE = {c.code: c for c in (InvalidArgument, NotFound, FailedPrecondition, OutOfRange,
                                 ResourceExhausted, Unavailable, DeadlineExceeded,
                                 PermissionDenied, Unauthenticated)}


# Trailing metadata a coordinator sends with a quota refusal (coordinator/quotas.py).
QUOTA_TRAILER = refusals.QUOTA_TRAILER


def refused_for_quota(e: grpc.RpcError) -> bool:
    trailers = getattr(e, "trailing_metadata", lambda: None)() or ()
    return e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and QUOTA_TRAILER in tuple(trailers)


def from_rpc(e: grpc.RpcError, note: str = "") -> MidtownError:
    cls = QuotaExceeded if refused_for_quota(e) else _BY_CODE.get(e.code(), MidtownError)
    err = cls((e.details() or e.code().name) + note)
    err.code = e.code()
    return err
