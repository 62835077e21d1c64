"""The replicated log: a pure protocol core (fencing, quorum, recovery, writer, replica)
and thin shells around it (gRPC server, rocksdict storage, ZooKeeper election).

See docs/log.md for the guarantees and the tests that prove them."""
