"""Protocol drivers: the programs that carry a multi-step change of the cluster through
ZooKeeper and the logs, each step a versioned write or an append that can be made again,
so a driver killed at any step is taken up by the next one (hand-offs of a shard between
key-value logs: `handoffs.py`; moves of a shard's copy between storage nodes: `moves.py`).
The `midtown` command runs them (`shard hand-off`, `cluster rebalance`, `shard move`); the
SDK does not import them."""
