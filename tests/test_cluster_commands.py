"""The local cluster's process commands (cluster/runner.py), read without starting
anything: the coordinators' client rate limit is passed on when the cluster sets one (the
benchmarks set none, 0) and survives cluster.json."""

from __future__ import annotations

from pathlib import Path

import pytest

from cluster import Cluster


def flag(cmd: list[str]) -> str | None:
    return cmd[cmd.index("--client-rate-limit") + 1] if "--client-rate-limit" in cmd else None


@pytest.mark.parametrize("layout,kind", [("split", "coordinator"), ("host", "host")])
def test_the_client_rate_limit_reaches_every_coordinator(tmp_path: Path, layout: str, kind: str) -> None:
    for limit, want in [(None, None), (0, "0"), (250.5, "250.5")]:
        c = Cluster(tmp_path / f"{layout}-{limit}", layout=layout, client_rate_limit=limit)
        c.plan()
        names = [p.name for p in c.of_kind(kind)]
        assert names
        assert [flag(c._command(n)) for n in names] == [want] * len(names)
        again = Cluster.load(c.dir)  # the supervisor restarts processes from cluster.json
        assert [flag(again._command(n)) for n in names] == [want] * len(names)
        for other in ("log-server", "storage-node"):
            assert all(flag(c._command(p.name)) is None for p in c.of_kind(other))
