"""tests/sim/run.py, the command behind `make sim`: a flag the chosen simulation does not
take ends it with a message naming the flag (exit 2), before anything runs."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.sim import faults, run


@pytest.mark.parametrize("argv,names", [
    (["--broken", "nope"], "--broken: 'nope' is not a broken variant of the whole cluster"),
    (["--elections", "--broken", "stale-position"], "not a broken variant of the log alone"),
    (["--bridges"], "--bridges: only with --elections"),
    (["--late-notices", "1"], "--late-notices: only with --elections"),
    (["--servers", "5"], "--servers: only with --elections"),
    (["--machines", "3"], "--machines: only with --elections"),
    (["--elections", "--faults", "slow"], "--faults: only for the whole cluster"),
    (["--faults", "slow,bogus"], "--faults: bogus: not a fault"),
    (["--faults", ""], "--faults: '': not a fault"),
    (["--elections", "--late-notices", "-1"], "--late-notices: must be 0 or more"),
    (["--runs", "0"], "--runs: must be 1 or more"),
    (["--jobs", "-1"], "--jobs: must be 0 (one per core) or more"),
])
def test_a_flag_the_simulation_does_not_take_is_named(argv: list[str], names: str,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        run.main(argv)
    assert e.value.code == 2
    assert names in capsys.readouterr().err


def test_faults_are_drawn_per_seed_or_named() -> None:
    """Every fault is drawn on in some of the first seeds, several together in most, and a
    seed draws the same faults each time; with a broken rule of the log servers', five of
    them in every seed and read leases off in some; --faults names them instead."""
    draws = [faults.drawn(seed) for seed in range(40)]
    assert draws == [faults.drawn(seed) for seed in range(40)]
    for name, f in faults.Faults.__dataclass_fields__.items():
        if name != "leases":  # (on in every run but a log variant's)
            assert any(getattr(d, name) != f.default for d in draws), name
    assert sum(d != faults.NO_FAULTS for d in draws) > 30
    log_variant = [faults.drawn(seed, "no-fence") for seed in range(40)]
    assert all(d.log_servers == 5 for d in log_variant)
    assert 10 < sum(not d.leases for d in log_variant) < 30
    assert all(replace(d, log_servers=5, leases=True) == replace(faults.drawn(seed, "no-hold"), log_servers=5)
               for seed, d in enumerate(log_variant))  # the rest drawn as for any other run
    # the faults a rule needs to be reached in the whole cluster drawn for it, the rest as
    # for any log rule (faults.REACHED_WITH): a lease and bridges for no-wait, hand-offs for
    # any-generation, a data center lost for a fail-over's rules
    for seed, d in enumerate(log_variant):
        assert faults.drawn(seed, "no-wait") == replace(d, leases=True, link_cuts=4)
        assert faults.drawn(seed, "any-generation") == replace(d, handoffs=True)
        lost = replace(faults.drawn(seed), data_centers=True, failover=True)
        assert faults.drawn(seed, "cut-unheld") == lost
    assert run._faults("drawn") is None and run._faults("none") == faults.NO_FAULTS
    assert run._faults("slow,late_notices_s=0.5,log_servers,leases=0") == faults.Faults(
        slow=True, late_notices_s=0.5, log_servers=5, leases=False)


def test_flags_of_the_chosen_simulation_are_taken(capsys: pytest.CaptureFixture[str]) -> None:
    """One short run each of the whole cluster, its faults drawn and named, and of whole log
    servers with their flags; a broken variant of the log servers' rules runs in the whole
    cluster, where --until-caught stops at the seed that catches it (and then succeeds)."""
    assert run.main(["--runs", "1"]) == 0
    assert run.main(["--faults", "slow,pauses", "--runs", "1"]) == 0
    assert run.main(["--elections", "--servers", "5", "--late-notices", "0.5", "--runs", "1"]) == 0
    capsys.readouterr()
    assert run.main(["--broken", "no-digest", "--seed", "1", "--runs", "3", "--until-caught",
                     "--jobs", "2"]) == 0
    out = capsys.readouterr().out
    assert "caught at seed" in out and "seeds run from 1" in out


def test_seeds_run_at_once_come_back_in_order() -> None:
    assert list(run._seeds(abs, range(-5, 5), 3)) == [(s, abs(s)) for s in range(-5, 5)]
    assert list(run._seeds(abs, range(-5, 5), 1)) == [(s, abs(s)) for s in range(-5, 5)]
