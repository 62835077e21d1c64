"""A log entry: position, epoch (of the writer that created it), timestamp and payload."""

from __future__ import annotations

from dataclasses import dataclass

from log import limits
from runtime.refusals import BadRequest


@dataclass(frozen=True, slots=True)
class Entry:
    position: int
    epoch: int
    timestamp_ms: int
    payload: bytes

    def __post_init__(self) -> None:
        if not 0 <= self.position <= limits.POSITION_MAX:
            raise BadRequest(f"position must be in 0..{limits.POSITION_MAX}, got {self.position}")
        if not 1 <= self.epoch <= limits.EPOCH_MAX:
            raise BadRequest(f"epoch must be in 1..{limits.EPOCH_MAX}, got {self.epoch}")
        if self.timestamp_ms < 0:
            raise BadRequest(f"timestamp_ms must be >= 0, got {self.timestamp_ms}")
        if not isinstance(self.payload, bytes):
            raise TypeError("payload must be bytes")
        if len(self.payload) > limits.PAYLOAD_BYTES_MAX:
            raise BadRequest(
                f"payload is {len(self.payload)} bytes, the limit is {limits.PAYLOAD_BYTES_MAX}"
            )


def validate_batch(payloads: list[bytes]) -> None:
    """Raise BadRequest naming the problem when an append batch breaks a limit."""
    if not payloads:
        raise BadRequest("payloads: an append needs at least one payload")
    if len(payloads) > limits.BATCH_ENTRIES_MAX:
        raise BadRequest(
            f"payloads: {len(payloads)} entries in one append, the limit is "
            f"{limits.BATCH_ENTRIES_MAX}"
        )
    total = 0
    for i, p in enumerate(payloads):
        if len(p) > limits.PAYLOAD_BYTES_MAX:
            raise BadRequest(
                f"payloads[{i}]: {len(p)} bytes, the limit is {limits.PAYLOAD_BYTES_MAX}"
            )
        total += len(p)
    if total > limits.BATCH_BYTES_MAX:
        raise BadRequest(
            f"payloads: {total} bytes in one append, the limit is {limits.BATCH_BYTES_MAX}"
        )
