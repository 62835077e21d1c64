"""Loaded first, before the test process creates any gRPC channel or server."""

from runtime.forking import without_grpc_fork_handlers

# The test run starts one Spark session in a process with live gRPC calls (runtime/forking.py).
without_grpc_fork_handlers()
