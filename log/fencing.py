"""The fencing rule, in one place.

Every replica remembers the highest writer epoch it has seen for each log (durably, before
it answers). A request carrying a lower epoch is rejected: a writer that has been replaced
can no longer get anything stored, so it can never again gather an ack quorum once a new
writer has fenced `fence_quorum` replicas."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Admission:
    admitted: bool
    fenced_epoch: int  # the replica's fenced epoch after the request


def admit(request_epoch: int, fenced_epoch: int) -> Admission:
    """Admit a request from a writer of `request_epoch` at a replica fenced at `fenced_epoch`.
    A higher epoch raises the fence (the caller must persist it before replying)."""
    assert request_epoch >= 1, "writer epochs start at 1"
    if request_epoch < fenced_epoch:
        return Admission(False, fenced_epoch)
    return Admission(True, request_epoch)
