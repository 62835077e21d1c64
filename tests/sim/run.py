"""Replay simulation seeds.
The whole cluster (tests/sim/nodes.py: real storage nodes, a coordinator, the mover and the
SDK's clients beside whole log servers): python -m tests.sim.run --seed 42 [--runs 1000]
  [--slow] [--pauses] [--ingest] [--handoffs] [--broken VARIANT] (nodes.py's BROKEN: no-hold,
  no-digest, by-load, publish-unsynced, truncate-ahead, read-anywhere, by-shard-behind (--slow
  --pauses), open-early and unsealed (--handoffs), ...)
Whole log servers alone (tests/sim/writers.py): python -m tests.sim.run --writers --elections
  --seed 42 [--servers 5] [--wipes] [--machines 3] [--late-notices 1] [--bridges] [--seals]
  [--broken VARIANT] (writers.py's BROKEN: ends-at-lac, past-lac, no-fence, skip-fence,
  trust-cache, any-servers, record-first, no-wait (--bridges --late-notices 1), by-load
  (--machines 3 --servers 6), ...); without --elections, the writer driver alone, its
  writers claimed by the simulation."""

from __future__ import annotations

import argparse
import logging
import sys
import time

from tests.sim import nodes, writers


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--servers", type=int, default=3,
                    help="with --elections: log servers in the pool; each segment opens on 3 of them")
    ap.add_argument("--trace", action="store_true", help="each run's figures (and the servers' logs)")
    ap.add_argument("--machines", type=int, default=0,
                    help="with --elections: the servers on this many machines: no segment has two "
                         "copies on one")
    ap.add_argument("--writers", action="store_true",
                    help="the log's writers alone (tests/sim/writers.py), the driver on the seeded scheduler")
    ap.add_argument("--elections", action="store_true",
                    help="whole log servers (log/node.py: the real election), crashed and paused")
    ap.add_argument("--wipes", action="store_true",
                    help="with --elections: a crashed server restarts on an empty store half the time")
    ap.add_argument("--nodes", action="store_true", help="the whole cluster (the default)")
    ap.add_argument("--late-notices", type=float, default=0.0, metavar="SECONDS",
                    help="with --elections: ZooKeeper's notices reach every process up to this late")
    ap.add_argument("--bridges", action="store_true",
                    help="with --elections: servers cut off from one another in pairs, each still reaching "
                         "the rest, in longer runs with one crash (tests/sim/writers.py BRIDGES)")
    ap.add_argument("--seals", action="store_true",
                    help="with --elections: appends name shards, which a hand-off's driver seals in the "
                         "log and opens again (tests/sim/writers.py hand_offs)")
    ap.add_argument("--slow", action="store_true",
                    help="the whole cluster with slow disks and links now and then (tests/sim/nodes.py)")
    ap.add_argument("--pauses", action="store_true",
                    help="the whole cluster with nodes paused (SIGSTOP) and their tails stalled now and "
                         "then, a peer paused before a node loses its disk (tests/sim/nodes.py)")
    ap.add_argument("--ingest", action="store_true",
                    help="the whole cluster with an ingestion pipeline writing events by id, its tasks "
                         "run again under new request ids (tests/sim/nodes.py ingester)")
    ap.add_argument("--handoffs", action="store_true",
                    help="the whole cluster with shards handed between its two logs now and then, the "
                         "drivers killed mid-way (tests/sim/nodes.py hand_offs)")
    ap.add_argument("--broken", default="", help="a broken variant of the simulation run (its BROKEN list)")
    a = ap.parse_args(argv)
    _check(ap, a)
    if not a.trace:  # a broken variant's replicas diverge: the coordinator's Answers says so at length
        logging.disable(logging.CRITICAL)
    if a.writers or a.elections or a.wipes:
        return _writers(a)
    return _nodes(a)


def _check(ap: argparse.ArgumentParser, a: argparse.Namespace) -> None:
    """Flags that the chosen simulation does not take end the command (exit 2), naming the flag."""
    whole_servers = a.elections or a.wipes
    sim = "writers" if a.writers or whole_servers else "nodes"
    variants = {"writers": writers.BROKEN, "nodes": nodes.BROKEN}[sim]
    if a.broken and a.broken not in variants:
        ap.error(f"--broken: {a.broken!r} is not a broken variant of the {sim} simulation "
                 f"(one of: {', '.join(variants)})")
    for flag, given in (("--bridges", a.bridges), ("--late-notices", a.late_notices),
                        ("--servers", a.servers != 3), ("--seals", a.seals)):
        if given and not whole_servers:
            ap.error(f"{flag}: only with --elections (whole log servers)")
    if a.machines and not whole_servers:
        ap.error("--machines: only with --elections (the whole cluster's nodes are on three)")
    for flag, given in (("--slow", a.slow), ("--pauses", a.pauses), ("--ingest", a.ingest),
                        ("--handoffs", a.handoffs)):
        if given and sim != "nodes":
            ap.error(f"{flag}: only for the whole cluster (no --writers or --elections)")
    if a.late_notices < 0 or a.runs < 1:
        ap.error("--late-notices: must be 0 or more" if a.late_notices < 0 else "--runs: must be 1 or more")



def _failed(seed: int, r: writers.Result) -> bool:
    """Whether a run failed (a check's violation, or an error in a task): said if so."""
    if r.violations or r.failures:
        print(f"seed {seed}: {len(r.violations)} violations, {len(r.failures)} failures, first: "
              f"{(r.violations + r.failures)[0]}")
    return bool(r.violations or r.failures)


def _writers(a: argparse.Namespace) -> int:
    """Runs of tests/sim/writers.py; with --trace, each run's figures."""
    t0 = time.monotonic()
    bad = acked = calls = carried = takeovers = live = wiped = refused = changes = failed = rounds = 0
    followed = leased = sealed = hand_offs = 0
    simulated = 0.0
    fired: dict[str, int] = {}
    for seed in range(a.seed, a.seed + a.runs):
        cfg = writers.Config(broken=a.broken, elections=a.elections or a.wipes, wipes=a.wipes,
                             servers=a.servers if a.elections or a.wipes else 3, machines=a.machines,
                             late_notices_s=a.late_notices, seals=a.seals,
                             **(writers.BRIDGES if a.bridges else {}))
        r = writers.run(seed, cfg)
        acked += r.acked
        calls += r.replicate_calls
        carried += r.replicated
        takeovers += r.takeovers
        live += r.live_takeovers
        changes += r.ensemble_changes
        wiped += r.wiped
        refused += r.refused
        failed += r.appends_failed
        rounds += r.read_indexes
        followed += r.followed
        leased += r.lease_reads
        sealed += r.sealed_refusals
        hand_offs += r.hand_offs
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
          + (f"; {takeovers} takeovers while the old writer's server was registered (and {live} of a "
             f"writer still running), {changes} ensemble "
             f"changes; the log client: {failed} appends failed, {rounds} ReadIndex rounds answered, "
             f"{followed} positions followed, {leased} strong reads by a lease"
             if a.elections or a.wipes else "")
          + (f"; {wiped} restarts on an empty store, {refused} refused" if a.wipes else "")
          + (f"; {hand_offs} shards sealed or opened again, {sealed} appends refused whole (their shard "
             "sealed)" if a.seals else ""))
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
        r, c = nodes.run(seed, broken=a.broken, slow=a.slow, pauses=a.pauses, ingest=a.ingest,
                         handoffs=a.handoffs)
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
