"""Which positions a reader may see: committed entries only.

Sealed segments are readable up to their recorded end; the open segment up to the last
add confirmed (LAC) that its writer has pushed. Positions below the truncation point are
gone, and asking for them is an error naming the first available position."""

from __future__ import annotations

from log import limits
from log.metadata import LogMetadata


class Truncated(Exception):
    def __init__(self, position: int, first_available: int) -> None:
        super().__init__(
            f"position {position} was truncated; the first available position is "
            f"{first_available}: bootstrap from a snapshot"
        )
        self.position = position
        self.first_available = first_available


def committed_end(meta: LogMetadata, open_lac: int) -> int:
    """The last committed position, given the LAC known for the open segment."""
    seg = meta.last_segment
    if seg is None:
        return limits.FIRST_POSITION - 1
    if seg.end is not None:
        return seg.end
    return max(seg.first - 1, open_lac)


def check_position(position: int, first_available: int) -> None:
    if position < first_available:
        raise Truncated(position, first_available)
