"""gRPC's fork handlers off, in a process that will start Spark.

pyspark starts its JVM through a fork() (it passes a `preexec_fn`) from a process whose
gRPC threads are live by then. With gRPC's fork handlers on, some of those children die of
SIGABRT before they exec, and the Spark session fails with JAVA_GATEWAY_EXITED (a scratch
test here, grpcio 1.85.1: 23 of 400 forks; with the handlers off, 0 of 400). Midtown's
processes start their children with fork+exec only, so nothing of ours needs them.

gRPC reads the variable when it is imported: set later, even before the first channel,
5 of 200 forks still died. So a command that starts Spark, and is itself a module of the
`midtown` package (whose SDK imports grpc), starts again with the variable set."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

VARIABLE = "GRPC_ENABLE_FORK_SUPPORT"


def without_grpc_fork_handlers() -> None:
    """Before `import grpc`: the handlers off, unless the user chose."""
    os.environ.setdefault(VARIABLE, "0")


def restart_without_grpc_fork_handlers(module: str, args: list[str],
                                       execve: Callable[..., object] = os.execve) -> None:
    """Unless the variable is set (by the user, or by this), replace this process by
    `python -m module args` with the handlers off; returns only when it is set."""
    if VARIABLE in os.environ:
        return
    execve(sys.executable, [sys.executable, "-m", module, *args], {**os.environ, VARIABLE: "0"})
