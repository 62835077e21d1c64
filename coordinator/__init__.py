"""Coordinators: stateless gRPC front ends that route key-value operations to shards and
append them to the shards' logs. See docs/api.md."""
