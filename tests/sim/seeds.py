"""Seeds found, not fixed. A test of a rare scenario (a race only some seeds reach, a
broken variant only some seeds catch) used to name the one seed that reached it, and any
change to what the servers do when (one more ZooKeeper read, a replica asked in another
order) moved the scenario to another seed and failed the test while nothing was wrong.
Such a test now searches: from the seed that reached the scenario when it was written, on
through TRIES seeds, and runs its checks on the first that reaches it. While the servers'
scheduling stays, the search stops at its first seed and costs what one seed did."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

# How many seeds a search runs at most (a seed of the whole cluster takes 2-8 s);
# MIDTOWN_SIM_SEED_TRIES=500 searches further, to find where a scenario moved (run the
# test with -s: a search that passed its first seed says where it stopped).
TRIES = int(os.environ.get("MIDTOWN_SIM_SEED_TRIES", "30"))


def first(reaching: Callable[[int], T | None], start: int, what: str,
          tries: int | None = None) -> tuple[int, T]:
    """The first seed from `start` (and what `reaching` returned for it) whose run reaches
    the scenario: `reaching(seed)` runs the seed and returns None if it did not. Fails
    naming the seeds tried if none of `tries` does."""
    tries = TRIES if tries is None else tries
    for seed in range(start, start + tries):
        got = reaching(seed)
        if got is not None:
            if seed != start:
                print(f"seed search: {what} reached at seed {seed}, not {start}: start there",
                      file=sys.stderr)
            return seed, got
    raise AssertionError(f"none of seeds {start}-{start + tries - 1} reaches {what}: search further "
                         f"(tests/sim/seeds.py) and start this test's search there")
