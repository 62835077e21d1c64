"""`make quiet-machines` refuses a bad setting, naming it, before it makes any namespace."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


@pytest.mark.parametrize("env, named", [({"ROUNDS": "x"}, "ROUNDS='x'"), ({"ROUNDS": "0"}, "ROUNDS='0'"),
                                        ({"ETCD": "no"}, "ETCD='no'")])
def test_a_bad_setting_is_refused_naming_it(env: dict[str, str], named: str) -> None:
    p = subprocess.run([sys.executable, "-m", "tests.integration.quiet_machines"], capture_output=True,
                       text=True, env={**os.environ, **env}, timeout=60)
    assert p.returncode == 1 and named in p.stderr and "Traceback" not in p.stderr, p.stderr
