# Midtown developer targets. `make run` and `make test` install everything they need first.
PY := .venv/bin/python
PROTOS := $(wildcard proto/midtown_pb/*.proto)
DIR ?= run/local
SEED ?= 1
RUNS ?= 200
SERVERS ?= 3

.PHONY: install proto run test test-fast sim soak bench lint clean demo

install:
	@scripts/install.sh

# Generated protobuf code: produced here (and by the package build: setup.py), never
# edited by hand, not committed.
proto: install midtown_pb/.generated

midtown_pb/.generated: $(PROTOS) scripts/gen_proto.py
	$(PY) scripts/gen_proto.py .
	@touch $@

run: proto
	.venv/bin/midtown cluster up --dir $(DIR)

# TEST_WORKERS=2 runs the suite on two pytest-xdist workers: a module's tests in one worker,
# the Spark modules together in one (one Spark session), those first (tests/conftest.py).
# About 15% faster here (1,063 s against 1,247), but with a busy process per core beside it
# four tests' waits ran out (Spark's python workers, a bootstrap, a usage count), so the
# suite runs in one process by default.
TEST_WORKERS ?= 1
# Tests marked moved_to_sim run in `make soak` only: the seeded simulation checks their
# guarantee (tests/sim/test_writers.py, make sim ELECTIONS=1; tests/sim/test_nodes.py,
# make sim NODES=1).
test: proto
	$(PY) -m pytest -q -p no:cacheprovider --durations=25 -m "not moved_to_sim" \
		$(if $(filter-out 1,$(TEST_WORKERS)),-n $(TEST_WORKERS)) tests

test-fast: proto
	$(PY) -m pytest -q -p no:cacheprovider tests -m "not integration"

# Replay one simulation seed, or run many: make sim SEED=42 / make sim RUNS=5000
# (SERVERS=5: a pool of five log servers, each segment on three of them; MOVES=1: the
# shard move simulation's model, BROKEN=rebuild-behind; ENSEMBLE=off: no ensemble changes;
# WRITERS=1: the real
# writer driver on the seeded scheduler and simulated ZooKeeper, BROKEN=ends-at-lac;
# ELECTIONS=1: whole log servers (log/node.py), crashed and paused (SERVERS=5: ensemble changes,
# BROKEN=past-lac, no-fence, skip-fence, trust-cache, any-servers, record-first, ...: the
# list in tests/sim/writers.py; MACHINES=3 SERVERS=6: on three machines, BROKEN=by-load
# placing without them); WIPES=1: some restart on
# an empty disk, BROKEN=no-store-check starting on it all the same; NODES=1: real storage
# nodes and a coordinator beside whole log servers on two logs and three machines,
# BROKEN=no-hold, stale-position, no-digest, by-load, publish-unsynced, ...: the list in
# tests/sim/nodes.py)
sim: proto
	$(PY) -m tests.sim.run --seed $(SEED) --runs $(RUNS) --servers $(SERVERS) \
		$(if $(MOVES),--moves) $(if $(WRITERS),--writers) $(if $(NODES),--nodes) \
		$(if $(ELECTIONS),--writers --elections) $(if $(WIPES),--writers --elections --wipes) \
		$(if $(BROKEN),--broken $(BROKEN)) \
		$(if $(TAKEOVER),--takeover) \
		$(if $(ENSEMBLE),--ensemble-change $(ENSEMBLE)) \
		$(if $(MACHINES),--machines $(MACHINES)) \
		$(if $(LATE),--late-notices $(LATE)) \
		$(if $(LEASE),--lease $(LEASE) --steps 4000)

# A long run outside the suite: linearizability under many rounds of kills, and 20,000
# simulation seeds. make soak ROUNDS=30
ROUNDS ?= 20
soak: proto
	$(PY) -m tests.sim.run --seed 100000 --runs 20000
	$(PY) -m tests.sim.run --seed 200000 --runs 5000 --servers 5
	$(PY) -m tests.sim.run --seed 300000 --runs 5000 --moves
	$(PY) -m tests.sim.run --seed 400000 --runs 5000 --takeover
	$(PY) -m tests.sim.run --seed 600000 --runs 500 --writers
	$(PY) -m tests.sim.run --seed 700000 --runs 500 --writers --elections
	$(PY) -m tests.sim.run --seed 750000 --runs 500 --writers --elections --servers 5 --late-notices 1
	$(PY) -m tests.sim.run --seed 800000 --runs 500 --writers --wipes --servers 5
	$(PY) -m tests.sim.run --seed 900000 --runs 1000 --nodes
	MIDTOWN_SOAK_ROUNDS=$(ROUNDS) $(PY) -m pytest -q -p no:cacheprovider -s --timeout 0 \
		tests/integration/test_kv.py tests/integration/test_host_layout.py -k linearizable
	$(PY) -m pytest -q -p no:cacheprovider -m moved_to_sim tests \
		--deselect tests/integration/test_kv.py::test_linearizable_under_kills

# Four machines played by network namespaces (root): ROUNDS rounds of a machine killed whole
# and one cut off, under the linearizability checker, then one gone for good.
soak-machines: proto
	MIDTOWN_NETNS_ROUNDS=$(ROUNDS) $(PY) -m pytest -q -p no:cacheprovider -s --timeout 0 \
		tests/integration/test_netns.py

bench: proto
	.venv/bin/midtown bench log
	.venv/bin/midtown bench kv
	.venv/bin/midtown bench ingest
	.venv/bin/midtown bench failover
	.venv/bin/midtown bench machines

# Exactly-once ingestion through Spark, checked by eye (on the cluster in $(DIR), started if
# it does not run).
demo: proto
	$(PY) -m midtown.cli.demo --dir $(DIR)

lint: proto
	.venv/bin/ruff check midtown runtime record catalog log coordinator storage_node spark_connector tests
	.venv/bin/mypy midtown runtime record catalog log coordinator storage_node spark_connector

clean:
	rm -rf midtown_pb .venv run
