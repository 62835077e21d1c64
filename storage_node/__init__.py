"""Storage nodes: apply the logs in order to RocksDB, each record's effects and the log's
new position in one atomic write batch. See docs/storage.md."""
