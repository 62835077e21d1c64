"""tests/sim/run.py, the command behind `make sim`: a flag the chosen simulation does not
take ends it with a message naming the flag (exit 2), before anything runs."""

from __future__ import annotations

import pytest

from tests.sim import run


@pytest.mark.parametrize("argv,names", [
    (["--broken", "nope"], "--broken: 'nope' is not a broken variant of the nodes simulation"),
    (["--elections", "--broken", "stale-position"], "not a broken variant of the writers simulation"),
    (["--broken", "no-wait"], "not a broken variant of the nodes simulation"),
    (["--bridges"], "--bridges: only with --elections"),
    (["--late-notices", "1"], "--late-notices: only with --elections"),
    (["--servers", "5"], "--servers: only with --elections"),
    (["--machines", "3"], "--machines: only with --elections"),
    (["--elections", "--slow"], "--slow: only for the whole cluster"),
    (["--writers", "--pauses"], "--pauses: only for the whole cluster"),
    (["--elections", "--ingest"], "--ingest: only for the whole cluster"),
    (["--elections", "--late-notices", "-1"], "--late-notices: must be 0 or more"),
    (["--runs", "0"], "--runs: must be 1 or more"),
])
def test_a_flag_the_simulation_does_not_take_is_named(argv: list[str], names: str,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        run.main(argv)
    assert e.value.code == 2
    assert names in capsys.readouterr().err


def test_flags_of_the_chosen_simulation_are_taken() -> None:
    """One short run each of whole log servers and of the whole cluster with their flags."""
    assert run.main(["--slow", "--pauses", "--runs", "1"]) == 0
    assert run.main(["--elections", "--servers", "5", "--late-notices", "0.5", "--runs", "1"]) == 0
