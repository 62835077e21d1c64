"""The `midtown` command (cli/main.py): data, datasets, users, nodes, logs, the local
cluster and machines, as tables or JSON. Each group of commands has its parser and
handlers in a module of its own (cluster.py, logs.py, datasets.py, users.py, data.py,
nodes.py, placement.py, shards.py, log_servers.py, backup.py, watch.py); arguments.py and
connect.py hold what they share, output.py how it prints. Nothing below the command line
imports this package; the benchmarks (bench/) use its parsing, output and `run`."""

from cli.main import main

__all__ = ["main"]
