"""The benchmarks (`midtown-bench kv|log|ingest|failover|...`, bench/main.py): Midtown
against etcd and a floor on this machine, a program of its own beside the `midtown`
command (cli/) and the local cluster runner (cluster/) it starts its clusters with."""
