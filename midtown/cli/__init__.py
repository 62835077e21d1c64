"""The `midtown` command (midtown/cli/main.py): data, datasets, users, nodes, logs, the
local cluster and the benchmarks, as tables or JSON. Nothing below the command line
imports this package."""

from midtown.cli.main import main

__all__ = ["main"]
