"""Set before anything imports grpc (this file is loaded first)."""

import os

# pyspark starts its JVM with a preexec_fn, so Python fork()s this process, whose gRPC
# threads are live by then. With gRPC's fork handlers on, about 1 fork in 20 children died
# of SIGABRT here (a scratch test: 23 of 400), and a Spark session failed with
# JAVA_GATEWAY_EXITED. Off, 0 of 400. It only takes effect if set before `import grpc`.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")
