"""Commands that start processes stop them on SIGTERM and SIGHUP as on SIGINT (Ctrl-C):
the signal becomes a KeyboardInterrupt in the main thread, so the same `finally` blocks
stop the clusters, etcd and Spark a command started and remove its temporary directories.
Once one has arrived, further SIGTERM and SIGHUP are ignored, so that the clean-up itself
is not cut short (SIGKILL still ends the command at once).

SIGINT is taken too when the command started with it ignored (a shell starts background
jobs so, and Python then leaves it ignored): `kill -INT` stops a command run with `&` as
it stops one in the foreground, as Go's signal.Notify does for etcd.

A stop signal that lands while a process is being started and recorded
(runtime/children.py) waits until that is done, so no process starts without its record:
whatever the command started, it stops."""

from __future__ import annotations

import signal
from types import FrameType

from runtime import children

STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class Interrupted(KeyboardInterrupt):
    """A stop signal other than SIGINT arrived; `signum` says which."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"signal {signal.Signals(signum).name}")
        self.signum = signum


_received: list[int] = []  # the stop signals that arrived


def _raise(signum: int, frame: FrameType | None) -> None:
    if children.hold(signum):
        return  # sent again once the process being started is recorded
    _received.append(signum)
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    for s in STOP_SIGNALS:
        signal.signal(s, signal.SIG_IGN)
    raise Interrupted(signum)


def stop_signal() -> int | None:
    """The first stop signal that arrived, if one did. A command that then fails otherwise
    (its clean-up stopped a cluster under a call of its, whose error took the place of the
    interrupt) ends as the signal says: 128 + its number."""
    return _received[0] if _received else None


def interrupt_on_stop_signals() -> None:
    """From now on SIGINT, SIGTERM and SIGHUP interrupt the main thread, whatever the
    command inherited."""
    for s in (signal.SIGINT, *STOP_SIGNALS):
        signal.signal(s, _raise)


def exit_code(e: KeyboardInterrupt) -> int:
    """The shell's code for a command ended by a signal: 128 + the signal's number."""
    return 128 + (e.signum if isinstance(e, Interrupted) else signal.SIGINT)
