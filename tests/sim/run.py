"""Replay simulation seeds: the whole cluster (tests/sim/nodes.py: real storage nodes, a
coordinator, the mover, hand-off drivers and the SDK's clients beside whole log servers),
every fault drawn per seed:

  python -m tests.sim.run --seed 42 [--runs 1000] [--broken VARIANT] [--until-caught]
      [--faults drawn | none | slow,pauses,ingest,handoffs,log_wipes,...] [--trace]

--broken names a rule of the real code swapped for a broken one: the whole cluster's
(variants.py BROKEN: no-hold, no-digest, by-load, open-early, ...) or the log servers'
(writers.py BROKEN: past-lac, no-fence, trust-cache, ...); --until-caught stops at the
first seed that fails and says how many it took.

The log alone (tests/sim/writers.py, quicker, for work on the log): --writers, the writer
driver alone; with --elections, whole log servers [--servers 5] [--wipes] [--machines 3]
[--late-notices 1] [--bridges] [--seals]."""

from __future__ import annotations

import argparse
import functools
import logging
import multiprocessing
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

from tests.sim import faults, nodes, variants, writers

T = TypeVar("T")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=1,
                    help="seeds run at once, each in a process of its own (0: one per core); the "
                         "results are read in the seeds' order, so the output is the same")
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
    ap.add_argument("--late-notices", type=float, default=0.0, metavar="SECONDS",
                    help="with --elections: ZooKeeper's notices reach every process up to this late")
    ap.add_argument("--bridges", action="store_true",
                    help="with --elections: servers cut off from one another in pairs, each still reaching "
                         "the rest, in longer runs with one crash (tests/sim/writers.py BRIDGES)")
    ap.add_argument("--seals", action="store_true",
                    help="with --elections: appends name shards, which a hand-off's driver seals in the "
                         "log and opens again (tests/sim/writers.py hand_offs)")
    ap.add_argument("--faults", default="drawn",
                    help="the whole cluster's faults beyond every run's: drawn per seed (the default), "
                         "none, or a list of tests/sim/faults.py Faults' names (slow,pauses,...)")
    ap.add_argument("--every-broken", action="store_true",
                    help="each broken variant in turn, from --seed until caught (of --runs seeds): a "
                         "table of the seeds each took; fails if one is not caught")
    ap.add_argument("--until-caught", action="store_true",
                    help="stop at the first seed that fails (with --broken: the seeds it took to catch it)")
    ap.add_argument("--broken", default="",
                    help="a broken variant: of the whole cluster's rules (variants.py BROKEN) or the log "
                         "servers' (writers.py BROKEN)")
    a = ap.parse_args(argv)
    _check(ap, a)
    if not a.trace:  # a broken variant's replicas diverge: the coordinator's Answers says so at length
        logging.disable(logging.CRITICAL)
    try:
        if a.writers or a.elections or a.wipes:
            return _writers(a)
        if a.every_broken:
            return _every_broken(a)
        return _nodes(a)
    finally:  # (called in a test's process too: its later tests log again)
        logging.disable(logging.NOTSET)


def _check(ap: argparse.ArgumentParser, a: argparse.Namespace) -> None:
    """Flags that the chosen simulation does not take end the command (exit 2), naming the flag."""
    alone = a.writers or a.elections or a.wipes
    known = writers.BROKEN if alone else variants.BROKEN + writers.BROKEN
    if a.broken and a.broken not in known:
        where = "log alone" if alone else "whole cluster"
        ap.error(f"--broken: {a.broken!r} is not a broken variant of the {where} "
                 f"(one of: {', '.join(dict.fromkeys(known))})")
    whole_servers = a.elections or a.wipes
    for flag, given in (("--bridges", a.bridges), ("--late-notices", a.late_notices),
                        ("--servers", a.servers != 3), ("--seals", a.seals), ("--machines", a.machines)):
        if given and not whole_servers:
            ap.error(f"{flag}: only with --elections (whole log servers, the log alone)")
    if alone and a.faults != "drawn":
        ap.error("--faults: only for the whole cluster (no --writers or --elections)")
    if not alone:
        try:
            a.faults_given = _faults(a.faults)
        except ValueError as e:
            ap.error(f"--faults: {e}")
    if a.jobs < 0:
        ap.error("--jobs: must be 0 (one per core) or more")
    if a.late_notices < 0 or a.runs < 1:
        ap.error("--late-notices: must be 0 or more" if a.late_notices < 0 else "--runs: must be 1 or more")


def _faults(text: str) -> faults.Faults | None:
    """--faults: None (drawn per seed), no faults beyond every run's, or the ones named."""
    if text == "drawn":
        return None
    if text == "none":
        return faults.NO_FAULTS
    names = [n.strip() for n in text.split(",") if n.strip()]
    fields = faults.Faults.__dataclass_fields__
    unknown = [n for n in names if n.split("=")[0] not in fields]
    if unknown or not names:
        raise ValueError(f"{', '.join(unknown) or repr(text)}: not a fault (drawn, none, or of: "
                         f"{', '.join(fields)})")
    on: dict[str, object] = {}
    for n in names:
        k, _, v = n.partition("=")
        default = fields[k].default
        if isinstance(default, bool):  # named: on (leases=0: off)
            on[k] = v.lower() not in ("0", "no", "false", "off")
        else:
            on[k] = type(default)(v) if v else {"late_notices_s": 1.0, "link_cuts": 4, "log_servers": 5}[k]
    return faults.Faults(**on)  # type: ignore[arg-type]


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
    cfg = writers.Config(broken=a.broken, elections=a.elections or a.wipes, wipes=a.wipes,
                         servers=a.servers if a.elections or a.wipes else 3, machines=a.machines,
                         late_notices_s=a.late_notices, seals=a.seals,
                         **(writers.BRIDGES if a.bridges else {}))
    for seed, r in _seeds(functools.partial(writers.run, cfg=cfg), range(a.seed, a.seed + a.runs), a.jobs):
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


def _every_broken(a: argparse.Namespace) -> int:
    """Each broken variant of the whole cluster's and the log servers' rules, run from
    --seed with the faults drawn per seed until a seed catches it: the seeds it took. A
    seed that fails as built too catches nothing (said, and the search goes on)."""
    missed = 0
    t0 = time.monotonic()
    print("variant\tcaught at seed\tseeds run\twall s\tits faults\tfirst finding")
    for v in dict.fromkeys(variants.BROKEN + writers.BROKEN):
        t = time.monotonic()
        for seed, (r, _) in _seeds(functools.partial(nodes.run, broken=v, faults=a.faults_given),
                                   range(a.seed, a.seed + a.runs), a.jobs):
            found = r.violations or r.failures
            if found and _failed(seed, nodes.run(seed, faults=a.faults_given or faults.drawn(seed, v))[0]):
                print(f"{v}\tseed {seed} fails as built too: searching on", flush=True)
            elif found:
                print(f"{v}\t{seed}\t{seed - a.seed + 1}\t{time.monotonic() - t:.0f}\t"
                      f"{a.faults_given or faults.drawn(seed, v)}\t{found[0][:100]}", flush=True)
                break
        else:
            missed += 1
            print(f"{v}\tnone\t{a.runs}\t{time.monotonic() - t:.0f}\t\tnot caught", flush=True)
    print(f"{missed} of {len(dict.fromkeys(variants.BROKEN + writers.BROKEN))} variants not caught within "
          f"{a.runs} seeds ({time.monotonic() - t0:.0f} s)")
    return 1 if missed else 0


def _nodes(a: argparse.Namespace) -> int:
    """Runs of tests/sim/nodes.py: failures, and what the runs did (summed)."""
    t0 = time.monotonic()
    bad = 0
    simulated = 0.0
    counts: dict[str, int] = {}
    ran = 0
    for seed, (r, c) in _seeds(functools.partial(nodes.run, broken=a.broken, faults=a.faults_given),
                               range(a.seed, a.seed + a.runs), a.jobs):
        ran += 1
        simulated += r.simulated_s
        for k, n in c.items():
            if k != "results crc":
                counts[k] = counts.get(k, 0) + n
        if a.trace:
            print(f"seed {seed} ({r.switches} task switches, {r.simulated_s:.1f} simulated s; faults: "
                  f"{a.faults_given or faults.drawn(seed, a.broken)}): {c}")
        failed = _failed(seed, r)
        bad += failed
        if failed and a.until_caught:
            print(f"caught at seed {seed} ({ran} seeds run from {a.seed}); its faults: "
                  f"{a.faults_given or faults.drawn(seed, a.broken)}")
            break
    dt = time.monotonic() - t0
    print(f"{ran} runs from seed {a.seed}: {bad} failed ({dt:.1f}s); {counts['writes']} writes through "
          f"the coordinator, {counts['writes'] / dt:.0f} per wall second, {simulated / dt:.1f} simulated s "
          f"per wall second; " + ", ".join(f"{n} {k}" for k, n in counts.items() if k != "writes"))
    if a.broken and a.until_caught:  # looking for a seed that catches it: found is success
        if not bad:
            print(f"{a.broken}: not caught in {ran} seeds from {a.seed}")
        return 0 if bad else 1
    return 1 if bad else 0


def _seeds(run: Callable[[int], T], seeds: Iterable[int], jobs: int) -> Iterator[tuple[int, T]]:
    """(seed, run(seed)) for each seed, in order; with `jobs` > 1, that many run at once in
    processes of their own (a caller that stops early, as --until-caught does, ends them).
    A seed replays the same in a process of its own: a run depends on its seed alone. The
    processes are spawned, not forked: a fork of a process with threads (pytest's, a test's)
    can copy a lock held by a thread the child does not have, and wait on it for ever."""
    jobs = jobs or os.cpu_count() or 1
    seeds = list(seeds)
    if jobs == 1 or len(seeds) < 2:
        for seed in seeds:
            yield seed, run(seed)
        return
    pool = multiprocessing.get_context("spawn").Pool(min(jobs, len(seeds)), initializer=logging.disable,
                                                     initargs=(logging.root.manager.disable,))
    try:
        yield from zip(seeds, pool.imap(run, seeds))
    finally:
        pool.terminate()
        pool.join()


if __name__ == "__main__":
    sys.exit(main())
