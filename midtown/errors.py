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


# What a retry may cure (the client retries these, with backoff, under the call's deadline):
# a coordinator or log unavailable, no answer in time, a rate limit. A quota refusal is
# RESOURCE_EXHAUSTED too, but it is never retried (QuotaExceeded).
RETRYABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
             grpc.StatusCode.RESOURCE_EXHAUSTED)


# Trailing metadata a coordinator sends with a quota refusal (coordinator/quotas.py).
QUOTA_TRAILER = refusals.QUOTA_TRAILER


def refused_for_quota(e: grpc.RpcError) -> bool:
    trailers = getattr(e, "trailing_metadata", lambda: None)() or ()
    return e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and QUOTA_TRAILER in tuple(trailers)


def from_rpc(e: grpc.RpcError, note: str = "") -> MidtownError:
    return _error(e.code(), (e.details() or e.code().name) + note, refused_for_quota(e))


_CODES = {c.value[0]: c for c in grpc.StatusCode}


def from_answer(code: int, message: str, refused: str) -> MidtownError:
    """The error of one item of a coalesced call (KV.Many's ManyAnswer), as its own call's
    status would have made it."""
    status = _CODES.get(code, grpc.StatusCode.UNKNOWN)
    quota = status == grpc.StatusCode.RESOURCE_EXHAUSTED and (refusals.REFUSED, refused) == QUOTA_TRAILER
    return _error(status, message or status.name, quota)


def _error(code: grpc.StatusCode, message: str, quota: bool) -> MidtownError:
    err = (QuotaExceeded if quota else _BY_CODE.get(code, MidtownError))(message)
    err.code = code
    return err
