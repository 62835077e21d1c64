"""What ZooKeeper holds for the key-value store and its clients: the topology (shards,
storage nodes, logs), the members (coordinators and storage nodes, registered while they
live). Below the storage nodes, the coordinators and the SDK, which all read it."""
