"""Benchmarks (`midtown bench kv|ingest|log|placements`): Midtown against etcd and a
floor, on this machine, with a load generator shared by all of them."""
