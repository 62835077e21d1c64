"""Which replica store a log server runs on, checked against ZooKeeper before it serves
(after BookKeeper's cookies). A log server that lost its disk and starts again under its
id with an empty store would answer fences and recoveries as if it had never held the
entries it acknowledged: with one other copy gone, a recovery seals the segment short and
acknowledged appends are lost (the whole-server simulation, tests/sim/writers.py, finds
that in a few seeds of `make sim BROKEN=no-store-check SIM_ARGS="--elections --wipes"`).

So each store carries a random identity, written into it (durably) on the server's first
start and then recorded in ZooKeeper under the server's id. At every start the two must
agree. An empty store where ZooKeeper records one refuses to start (StoreLost): the
operator decommissions the id (`midtown log-server decommission ID`: its segments are
copied to other servers) and adds it back (`log-server add ID`, which removes the record
of a server out of the pool; a server added back while it still runs records its store
again, log/node.py keep_store_recorded).
The rule is pure; log/node.py reads and writes both sides."""

from __future__ import annotations

from runtime.process import StartRefused


class StoreLost(StartRefused):
    """This server's store is not the one ZooKeeper records for its id."""


def check(server_id: int, stored: str | None, recorded: str | None) -> None:
    """StoreLost unless the store's identity `stored` may serve as server `server_id`, whose
    identity in ZooKeeper is `recorded` (None: none yet). A store with an identity that
    ZooKeeper has not recorded yet (a first start that stopped between the two writes)
    may: it is recorded then."""
    if recorded is None or stored == recorded:
        return
    if stored is None:
        raise StoreLost(
            f"log server {server_id}: its replica store is empty, but ZooKeeper records that server "
            f"{server_id} ran on store {recorded}: its disk was lost (or --data names another "
            f"directory). Its copies of the logs are gone; serving under this id could lose "
            f"acknowledged entries. Run `midtown log-server decommission {server_id}` (its segments "
            f"are copied from the other servers), then `midtown log-server add {server_id}` and start it.")
    raise StoreLost(
        f"log server {server_id}: its replica store is {stored}, but ZooKeeper records store "
        f"{recorded} for server {server_id}: --data names another server's store, or an old copy. "
        f"Start it with its own data directory, or decommission {server_id} and add it back.")
