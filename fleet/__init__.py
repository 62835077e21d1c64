"""The machines the servers run on and how every process holds ZooKeeper: a session with
patience for a silent member (connect.py), the machines and roles recorded there
(machines.py) and the placement rule over their failure domains (failure_domains.py).
Below the log and the key-value catalog, which both place their copies by it."""
