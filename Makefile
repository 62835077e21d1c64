# Midtown developer targets. `make run` and `make test` install everything they need first.
PY := .venv/bin/python
PROTOS := $(wildcard proto/midtown_pb/*.proto)
DIR ?= run/local
SEED ?= 1

.PHONY: install proto run test test-fast sim soak soak-datacenters bench lint clean demo quiet-machines

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

# The suite runs on two pytest-xdist workers, a module at a time each (tests/conftest.py):
# first the modules that start real processes (mostly waiting: elections, sessions,
# restarts), then the seeded simulations and unit tests. TEST_WORKERS=1 runs it in one process.
TEST_WORKERS ?= 2
# Tests marked moved_to_sim run in `make soak` only: the seeded simulation checks their
# guarantee in every seed (tests/sim/test_nodes.py and test_writers.py; make sim); those
# marked soak too (too long for the suite's budget; a shorter test checks it in part).
test: proto
	$(PY) -m pytest -q -p no:cacheprovider --durations=25 -m "not moved_to_sim and not soak" \
		$(if $(filter-out 1,$(TEST_WORKERS)),-n $(TEST_WORKERS)) tests

test-fast: proto
	$(PY) -m pytest -q -p no:cacheprovider tests -m "not integration"

# The simulation (tests/sim/nodes.py): the whole cluster (storage nodes, a coordinator, the
# shard mover, hand-off drivers, applications on the SDK and whole log servers on their real
# store, every call answered by the callee's gRPC services) with every fault it knows, each
# drawn per seed (faults.py drawn: slow disks and links, pauses, crashes, power loss, lost
# disks, ZooKeeper's notices late, bridges, hand-offs, ingestion, data centers cut off).
# make sim runs RUNS seeds from SEED (SEED=42 RUNS=1 replays one); BROKEN=name swaps a rule
# of the real code for a broken one (variants.py or writers.py BROKEN) and stops at the first
# seed that catches it (of RUNS: 500 by default then). SIM_ARGS passes more to
# tests/sim/run.py: --faults none|slow,pauses,..., --trace; --elections [--bridges ...]:
# the log alone (tests/sim/writers.py, quicker). JOBS seeds run at once (0: one per core).
RUNS ?= $(if $(BROKEN),500,20)
JOBS ?= 0
sim: proto
	$(PY) -m tests.sim.run --seed $(SEED) --runs $(RUNS) --jobs $(JOBS) \
		$(if $(BROKEN),--broken $(BROKEN) --until-caught) $(SIM_ARGS)

# A long run outside the suite: 2,000 seeds of the simulation, every fault drawn per seed,
# and 1,000 of the log alone (whole log servers, five, ZooKeeper's notices late); every
# broken variant caught within 500 seeds (the table of the seeds each took); then
# linearizability under many rounds of kills. make soak ROUNDS=30
ROUNDS ?= 20
soak: proto
	$(PY) -m tests.sim.run --seed 100000 --runs 2000 --jobs $(JOBS)
	$(PY) -m tests.sim.run --seed 700000 --runs 1000 --jobs $(JOBS) --elections --servers 5 --late-notices 1 --wipes
	$(PY) -m tests.sim.run --every-broken --seed 1 --runs 500 --jobs $(JOBS)
	MIDTOWN_SOAK_ROUNDS=$(ROUNDS) $(PY) -m pytest -q -p no:cacheprovider -s --timeout 0 \
		tests/integration/test_kv.py tests/integration/test_host_layout.py -k linearizable
	$(PY) -m pytest -q -p no:cacheprovider -m "moved_to_sim or soak" tests \
		--deselect tests/integration/test_kv.py::test_linearizable_under_kills

# Four machines played by network namespaces (root): ROUNDS rounds of a machine killed whole
# and one cut off, under the linearizability checker, then one gone for good.
soak-machines: proto
	MIDTOWN_NETNS_ROUNDS=$(ROUNDS) $(PY) -m pytest -q -p no:cacheprovider -s --timeout 0 \
		tests/integration/test_netns.py

# Three data centers of namespace-machines (root), 20 ms held each way between them: one cut
# off and brought back, then a home lost, its scope failed over and the home brought back,
# under the linearizability checker (tests/integration/test_datacenters.py; make soak runs it too).
soak-datacenters: proto
	$(PY) -m pytest -q -p no:cacheprovider -s --timeout 0 tests/integration/test_datacenters.py

# How long a log's writes stop when its writer's machine is paused or cut off whole, over
# four namespace-machines (issue 68): make quiet-machines QUIET_ROUNDS=5 [ETCD=0]. Needs root.
QUIET_ROUNDS ?= 5
quiet-machines: proto
	ROUNDS=$(QUIET_ROUNDS) $(PY) -m tests.integration.quiet_machines

bench: proto
	.venv/bin/midtown-bench log
	.venv/bin/midtown-bench kv
	.venv/bin/midtown-bench ingest
	.venv/bin/midtown-bench failover
	.venv/bin/midtown-bench machines

# Exactly-once ingestion through Spark, checked by eye (on the cluster in $(DIR), started if
# it does not run).
demo: proto
	$(PY) -m cli.demo --dir $(DIR)

lint: proto
	.venv/bin/ruff check midtown runtime record fleet catalog log coordinator storage_node drivers spark_connector cluster cli bench tests
	.venv/bin/mypy midtown runtime record fleet catalog log coordinator storage_node drivers spark_connector cluster cli bench

clean:
	rm -rf midtown_pb .venv run
