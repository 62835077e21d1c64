"""Broken variants of the simulations: rules of the real code swapped for broken ones for
one run, to show that the simulation's checks catch what they are for."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

_INHERITED = object()
Swap = tuple[Any, str, Any]  # (owner: a module or a class, attribute name, the broken rule)


@contextmanager
def swapped(swaps: Iterable[Swap]) -> Iterator[None]:
    """Each (owner, name, rule) set for the run, and the right rules put back after it."""
    # (A class's own attribute as it stands, a staticmethod or property unwrapped by
    # nothing; one it inherits is deleted again after the run.)
    saved = [(owner, name, vars(owner).get(name, _INHERITED), rule) for owner, name, rule in swaps]
    for owner, name, _, rule in saved:
        setattr(owner, name, rule)
    try:
        yield
    finally:
        for owner, name, right, _ in reversed(saved):
            if right is _INHERITED:
                delattr(owner, name)
            else:
                setattr(owner, name, right)
