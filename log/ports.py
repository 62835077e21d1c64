"""The log's ports for its users (their protocols, no implementation): the log server of
this process as a coordinator or a storage node beside it reaches it, a follow under way,
and the entries a follow delivers. log/client.py names them for its users; log/node.py
and log/follow.py implement them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from log import read_index as ri


class FollowedEntry(Protocol):
    """An entry as a follow delivers it (a Read stream's message, or the log server's own
    entry when it runs in this process: log/follow.py)."""
    @property
    def position(self) -> int: ...
    @property
    def epoch(self) -> int: ...  # of the writer that wrote it
    @property
    def timestamp_ms(self) -> int: ...
    @property
    def payload(self) -> bytes: ...


class Following(Protocol):
    """A follow of a log under way (LogClient.follow; log/follow.py Follow)."""
    in_process: bool  # reading straight from the writer of this process now

    def restart(self) -> None: ...


class LocalLog(Protocol):
    """The log server of this process (coordinator/host.py binds one; log/node.py Node):
    asked in place of its Tail call in a ReadIndex round, for its writers' read leases, and
    read straight from by a follow of a log it writes. The port, not the server."""
    def tail_hurrying(self, log_id: int) -> ri.TailReply: ...
    def lease_index(self, log_id: int) -> int | None: ...
    def writes(self, log_id: int) -> bool: ...
    def read_from(self, log_id: int, position: int, wait_s: float) -> Sequence[FollowedEntry]: ...
