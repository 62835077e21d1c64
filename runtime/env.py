"""Settings read from the environment, checked: a bad value is refused naming its variable."""

from __future__ import annotations

from collections.abc import Mapping


def seconds(env: Mapping[str, str], name: str, default: float, maximum: float) -> float:
    """`name` from `env` as seconds from 0 to `maximum`, or `default` when unset; a
    ValueError naming the variable when it is not a number in that range."""
    raw = env.get(name)
    if raw is None:
        return default
    try:
        v = float(raw)
    except ValueError:
        raise ValueError(f"{name}: {raw!r} is not a number of seconds") from None
    if not 0 <= v <= maximum:  # (a NaN fails this too)
        raise ValueError(f"{name}: {raw} is out of range (0 to {maximum:g} s)")
    return v
