"""What every Midtown server process shares below the log, the storage nodes and the
coordinators: staying registered in ZooKeeper across sessions, background loops that
survive their failures, and how a process starts and stops."""
