"""A local cluster on this machine (cluster/runner.py): ZooKeeper, log servers,
storage nodes and coordinators as real processes, their supervisor, certificates for
`--tls`, and the one-process host layout. Used by the command line, the benchmarks and
the tests; no server imports it."""

from cluster.runner import LAYOUT_DEFAULT, LAYOUTS, Cluster, ClusterError, pid_alive

__all__ = ["LAYOUT_DEFAULT", "LAYOUTS", "Cluster", "ClusterError", "pid_alive"]
