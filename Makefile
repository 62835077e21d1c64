# Midtown developer targets. `make run` and `make test` install everything they need first.
PY := .venv/bin/python
PROTOS := $(wildcard proto/midtown_pb/*.proto)
DIR ?= run/local
SEED ?= 1
RUNS ?= 20
SERVERS ?= 3

.PHONY: install proto run test test-fast sim soak bench lint clean demo quiet-machines

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

# Replay one simulation seed, or run many: make sim SEED=42 / make sim RUNS=5000. By default
# the whole cluster (tests/sim/nodes.py: real storage nodes, a coordinator, the mover and the
# SDK's clients beside whole log servers, on two logs and three machines; BROKEN=no-hold,
# stale-position, no-digest, by-load, publish-unsynced, ...: the list in tests/sim/nodes.py;
# SLOW=1: with slow disks and links now and then; PAUSES=1: with nodes paused (SIGSTOP) and
# their tails stalled now and then, SLOW=1 PAUSES=1 BROKEN=by-shard-behind; INGEST=1: with an
# ingestion pipeline writing events by id, BROKEN=no-event-ids).
# ELECTIONS=1: whole log servers alone (log/node.py), crashed and paused (SERVERS=5: ensemble
# changes, BROKEN=past-lac, no-fence, skip-fence, trust-cache, any-servers, record-first, ...:
# the list in tests/sim/writers.py; MACHINES=3 SERVERS=6: on three machines, BROKEN=by-load
# placing without them; LATE=1: ZooKeeper's notices up to a second late, BROKEN=no-fencing;
# BRIDGES=1: servers cut off from one another in pairs, each still reaching the rest, and
# followers taking the log over from a writer that still runs, BRIDGES=1 LATE=1
# BROKEN=no-wait); WIPES=1: some restart on an empty disk, BROKEN=no-store-check starting
# on it all the same; HANDOFFS=1 (the whole cluster): shards handed between the logs, their
# drivers killed mid-way, BROKEN=open-early, unsealed; SEALS=1: appends name shards, which a hand-off's driver seals in the log
# and opens again, BROKEN=takeover-unseals, any-generation; WRITERS=1: the writer driver alone, BROKEN=ends-at-lac.
sim: proto
	$(PY) -m tests.sim.run --seed $(SEED) --runs $(RUNS) --servers $(SERVERS) \
		$(if $(WRITERS),--writers) $(if $(NODES),--nodes) \
		$(if $(ELECTIONS),--writers --elections) $(if $(WIPES),--writers --elections --wipes) \
		$(if $(BROKEN),--broken $(BROKEN)) \
		$(if $(MACHINES),--machines $(MACHINES)) \
		$(if $(LATE),--late-notices $(LATE)) \
		$(if $(BRIDGES),--bridges) $(if $(SEALS),--writers --elections --seals) \
		$(if $(SLOW),--slow) $(if $(PAUSES),--pauses) $(if $(INGEST),--ingest) \
		$(if $(HANDOFFS),--handoffs)

# A long run outside the suite: linearizability under many rounds of kills, and 6,500
# simulation seeds. make soak ROUNDS=30
ROUNDS ?= 20
soak: proto
	$(PY) -m tests.sim.run --seed 600000 --runs 500 --writers
	$(PY) -m tests.sim.run --seed 700000 --runs 1000 --writers --elections
	$(PY) -m tests.sim.run --seed 750000 --runs 500 --writers --elections --servers 5 --late-notices 1
	$(PY) -m tests.sim.run --seed 760000 --runs 500 --writers --elections --bridges --late-notices 1
	$(PY) -m tests.sim.run --seed 770000 --runs 500 --writers --elections --seals
	$(PY) -m tests.sim.run --seed 800000 --runs 500 --writers --wipes --servers 5
	$(PY) -m tests.sim.run --seed 900000 --runs 1500
	$(PY) -m tests.sim.run --seed 950000 --runs 500 --slow
	$(PY) -m tests.sim.run --seed 970000 --runs 500 --slow --pauses
	$(PY) -m tests.sim.run --seed 980000 --runs 500 --ingest --pauses
	$(PY) -m tests.sim.run --seed 990000 --runs 500 --handoffs
	MIDTOWN_SOAK_ROUNDS=$(ROUNDS) $(PY) -m pytest -q -p no:cacheprovider -s --timeout 0 \
		tests/integration/test_kv.py tests/integration/test_host_layout.py -k linearizable
	$(PY) -m pytest -q -p no:cacheprovider -m moved_to_sim tests \
		--deselect tests/integration/test_kv.py::test_linearizable_under_kills

# Four machines played by network namespaces (root): ROUNDS rounds of a machine killed whole
# and one cut off, under the linearizability checker, then one gone for good.
soak-machines: proto
	MIDTOWN_NETNS_ROUNDS=$(ROUNDS) $(PY) -m pytest -q -p no:cacheprovider -s --timeout 0 \
		tests/integration/test_netns.py

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
