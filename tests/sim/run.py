"""Replay simulation seeds: python -m tests.sim.run --seed 42 [--runs 1000] [--servers 5] [--trace]
  [--takeover]: followers take the log over (log/takeover.py)
  [--ensemble-change rule|off]: writers move segments off lost copies
  [--lease rule|no-wait]: writers answer strong reads by a read lease (log/lease.py)
Shard moves (tests/sim/moves.py): python -m tests.sim.run --moves --seed 42 [--broken rebuild-behind]
  [--machines 3]
The real writer driver on the seeded scheduler and simulated ZooKeeper (tests/sim/writers.py):
  python -m tests.sim.run --writers --seed 42 [--elections [--wipes] [--machines 3] [--late-notices 1]]
  [--broken VARIANT]
  (VARIANT: one of tests/sim/writers.py's BROKEN: ends-at-lac, past-lac, no-fence, skip-fence,
  trust-cache, any-servers, record-first, by-load (--machines 3 --servers 6), ...)
Real storage nodes and a coordinator beside whole log servers (tests/sim/nodes.py):
  python -m tests.sim.run --nodes --seed 42 [--broken VARIANT] (tests/sim/nodes.py's BROKEN: no-hold,
  stale-position, no-digest, by-load, publish-unsynced, truncate-ahead, read-anywhere, ...)"""

from __future__ import annotations

import argparse
import logging
import sys
import time

from tests.sim import moves, nodes, writers
from tests.sim.harness import Config, Sim


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--servers", type=int, default=3,
                    help="log servers in the pool; each segment opens on 3 of them")
    ap.add_argument("--trace", action="store_true")
    ap.add_argument("--takeover", action="store_true",
                    help="followers take the log over from writers they lost; writers pause")
    ap.add_argument("--ensemble-change", default="rule", choices=("rule", "off"),
                    help="writers move open segments off lost copies (log/ensemble_change.py)")
    ap.add_argument("--machines", type=int, default=0,
                    help="with --writers or --moves: the servers (nodes) on this many machines: no "
                         "segment (shard) has two copies on one")
    ap.add_argument("--lease", default="off", choices=("off", "rule", "no-wait"),
                    help="writers answer strong reads by their read lease (log/lease.py); no-wait "
                         "is a broken variant")
    ap.add_argument("--moves", action="store_true", help="the shard move simulation instead of the log's")
    ap.add_argument("--writers", action="store_true",
                    help="the real writer driver on the seeded scheduler (tests/sim/writers.py)")
    ap.add_argument("--wipes", action="store_true",
                    help="with --elections: a crashed server restarts on an empty store half the time")
    ap.add_argument("--elections", action="store_true",
                    help="with --writers: the servers' real election (log/election.py), whole servers "
                         "crashed")
    ap.add_argument("--nodes", action="store_true",
                    help="real storage nodes and a coordinator beside whole log servers (tests/sim/nodes.py)")
    ap.add_argument("--late-notices", type=float, default=0.0, metavar="SECONDS",
                    help="with --writers: ZooKeeper's notices reach every process up to this late")
    ap.add_argument("--broken", default="",
                    help="with --moves, --writers or --nodes: a broken variant "
                         "(tests/sim/moves.py, writers.py, nodes.py)")
    a = ap.parse_args()
    if not a.trace:  # a broken variant's replicas diverge: the coordinator's Answers says so at length
        logging.disable(logging.CRITICAL)
    t0 = time.monotonic()
    bad = 0
    counts: dict[str, int] = {}
    if a.writers:
        return _writers(a)
    if a.nodes:
        return _nodes(a)
    for seed in range(a.seed, a.seed + a.runs):
        cfg = Config(steps=a.steps, servers=a.servers, takeover=a.takeover, ensemble_change=a.ensemble_change,
                     lease=a.lease)
        sim: Sim | moves.MoveSim = (moves.MoveSim(seed, moves.Config(broken=a.broken, machines=a.machines,
                                                                     nodes=max(5, 2 * a.machines)))
                                    if a.moves
                                    else Sim(seed, cfg))
        v = sim.run()
        if isinstance(sim, moves.MoveSim):
            for k, n in sim.counts.items():
                counts[k] = counts.get(k, 0) + n
        if a.trace:
            print("\n".join(sim.trace))
        if v:
            bad += 1
            print(f"seed {seed}: {len(v)} violations, first: {v[0]}")
    dt = time.monotonic() - t0
    print(f"{a.runs} runs from seed {a.seed}: {bad} failed ({dt:.1f}s)"
          + (f"; moves: {counts}" if counts else ""))
    return 1 if bad else 0


def _failed(seed: int, r: writers.Result) -> bool:
    """Whether a run failed (a check's violation, or an error in a task): said if so."""
    if r.violations or r.failures:
        print(f"seed {seed}: {len(r.violations)} violations, {len(r.failures)} failures, first: "
              f"{(r.violations + r.failures)[0]}")
    return bool(r.violations or r.failures)


def _writers(a: argparse.Namespace) -> int:
    """Runs of tests/sim/writers.py; with --trace, each run's figures."""
    t0 = time.monotonic()
    bad = acked = calls = carried = takeovers = wiped = refused = changes = failed = rounds = 0
    followed = leased = 0
    simulated = 0.0
    fired: dict[str, int] = {}
    for seed in range(a.seed, a.seed + a.runs):
        cfg = writers.Config(broken=a.broken, elections=a.elections or a.wipes, wipes=a.wipes,
                             servers=a.servers if a.elections or a.wipes else 3, machines=a.machines,
                             late_notices_s=a.late_notices)
        r = writers.run(seed, cfg)
        acked += r.acked
        calls += r.replicate_calls
        carried += r.replicated
        takeovers += r.takeovers
        changes += r.ensemble_changes
        wiped += r.wiped
        refused += r.refused
        failed += r.appends_failed
        rounds += r.read_indexes
        followed += r.followed
        leased += r.lease_reads
        for point, n in r.buggified.items():
            fired[point] = fired.get(point, 0) + n
        simulated += r.simulated_s
        if a.trace:
            print(f"seed {seed}: {r.acked} appends acknowledged, {r.writers} writers, "
                  f"{r.switches} task switches, {r.simulated_s:.1f} simulated s")
        bad += _failed(seed, r)
    dt = time.monotonic() - t0
    print(f"{a.runs} runs from seed {a.seed}: {bad} failed ({dt:.1f}s); writers: {acked} appends "
          f"acknowledged, {acked / dt:.0f} per wall second, {simulated / dt:.1f} simulated s per wall "
          f"second; the outlets' {calls} calls to peers carried {carried} appends"
          + (f"; {takeovers} takeovers while the old writer's server was registered, {changes} ensemble "
             f"changes; the log client: {failed} appends failed, {rounds} ReadIndex rounds answered, "
             f"{followed} positions followed, {leased} strong reads by a lease"
             if a.elections or a.wipes else "")
          + (f"; {wiped} restarts on an empty store, {refused} refused" if a.wipes else ""))
    print("fault points fired (world.buggify): "
          + (", ".join(f"{p} {n}" for p, n in sorted(fired.items())) or "none reached"))
    return 1 if bad else 0


def _nodes(a: argparse.Namespace) -> int:
    """Runs of tests/sim/nodes.py: failures, and what the runs did (summed)."""
    t0 = time.monotonic()
    bad = 0
    simulated = 0.0
    counts: dict[str, int] = {}
    for seed in range(a.seed, a.seed + a.runs):
        r, c = nodes.run(seed, broken=a.broken)
        simulated += r.simulated_s
        for k, n in c.items():
            if k != "results crc":
                counts[k] = counts.get(k, 0) + n
        if a.trace:
            print(f"seed {seed}: {c}, {r.switches} task switches, {r.simulated_s:.1f} simulated s")
        bad += _failed(seed, r)
    dt = time.monotonic() - t0
    print(f"{a.runs} runs from seed {a.seed}: {bad} failed ({dt:.1f}s); {counts['writes']} writes through "
          f"the coordinator, {counts['writes'] / dt:.0f} per wall second, {simulated / dt:.1f} simulated s "
          f"per wall second; " + ", ".join(f"{n} {k}" for k, n in counts.items() if k != "writes"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
