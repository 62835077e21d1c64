"""log/follow.py, a follow of a log (LogClient.follow), with the log client and the log
server of the process as fakes, read through the in-process link (log/local.py
ProcessLog): the entries come in order from the position its user keeps, a truncated
position is handed to the user's `behind`, a follow in process stops reading when its
server stops writing the log, and a stream from a server that is no longer the writer is
cancelled when the watch names another."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from log import reading
from log.follow import Follow
from log.local import ProcessLog


@dataclass(frozen=True)
class E:
    position: int
    timestamp_ms: int = 0
    payload: bytes = b"x"


class Remote:
    def read(self, *a: Any) -> Any:
        raise AssertionError("a writer in this process is read without a stream")


class Client:
    def __init__(self, addr: str, server: Any = None) -> None:
        self.addr = addr
        self.watchers: list[Callable[[str | None], None]] = []
        self.link = ProcessLog(server, Remote())  # type: ignore[arg-type]

    def writer_addr(self, log_id: int, refresh: bool = False) -> str | None:
        return self.addr

    def on_writer_change(self, log_id: int, fn: Callable[[str | None], None]) -> None:
        self.watchers.append(fn)


class Server:
    """The log server of the process: it writes the log while entries are left, holds
    positions `first`..`last`."""

    addr = "a:1"

    def __init__(self, first: int, last: int, stop: threading.Event) -> None:
        self.first, self.last, self.stop = first, last, stop
        self.reads = 0

    def writes(self, log_id: int) -> bool:
        return True

    def read_from(self, log_id: int, position: int, wait_s: float) -> Sequence[E]:
        self.reads += 1
        if position < self.first:
            raise reading.Truncated(position, self.first)
        if position > self.last:
            self.stop.set()  # all read: end the follow
            return []
        return [E(p) for p in range(position, min(self.last, position + 2) + 1)]

    def tail_hurrying(self, log_id: int) -> Any: ...
    def lease_index(self, log_id: int) -> int | None: ...


def follow(first: int, last: int, start: int) -> tuple[list[int], list[str], Follow]:
    stop = threading.Event()
    got: list[int] = []
    behind: list[str] = []
    at = [start]

    def deliver(entries: Sequence[Any]) -> None:
        assert entries[0].position == at[0]  # in order, from the position kept
        got.extend(e.position for e in entries)
        at[0] = entries[-1].position + 1

    def truncated(why: str) -> None:
        behind.append(why)
        at[0] = first  # as a node holding none of the log's shards goes on

    server = Server(first, last, stop)
    f = Follow(Client("a:1", server), 7, lambda: at[0], deliver, truncated, stop, 5_000)
    f.run()
    return got, behind, f


def test_entries_come_in_order_from_the_users_position() -> None:
    got, behind, f = follow(0, 9, 3)
    assert got == list(range(3, 10)) and behind == [] and not f.in_process  # over: no longer reading
    assert f.linger_ms == 1_000  # a linger is bounded by what a Read may ask


def test_a_truncated_position_goes_to_behind_and_the_follow_goes_on_from_where_it_says() -> None:
    got, behind, _ = follow(5, 8, 2)
    assert len(behind) == 1 and "position 2 was truncated" in behind[0]
    assert got == [5, 6, 7, 8]


class Stream:
    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


def test_a_stream_from_a_server_that_is_not_the_writer_any_more_is_cancelled() -> None:
    c = Client("a:1")
    f = Follow(c, 7, lambda: 0, lambda e: None, lambda w: None, threading.Event(), 0)
    [watch] = c.watchers  # the follow watches the log's writer
    s = Stream()
    f._stream = ("a:1", s)  # type: ignore[assignment]
    watch("a:1")
    watch(None)  # no writer named: nothing to follow yet
    assert not s.cancelled
    watch("b:2")
    assert s.cancelled and f._moved  # the follow reads from the new writer at once
