"""Server processes collect garbage less often (runtime/process.py: tune_runtime); the
benchmark showed ~13% more puts/s with it. MIDTOWN_GC_TUNE=0 turns it off."""

from __future__ import annotations

import os
import subprocess
import sys

CODE = "import gc; from runtime.process import tune_runtime; tune_runtime(); print(gc.get_threshold()[0])"


def _threshold(**env: str) -> int:
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, check=True,
                         env={**os.environ, **env}, timeout=60)
    return int(out.stdout)


def test_servers_raise_the_collection_threshold() -> None:
    assert _threshold() >= 50_000


def test_the_tuning_can_be_turned_off() -> None:
    assert _threshold(MIDTOWN_GC_TUNE="0") < 50_000


LOGS = """
import logging
from runtime.process import log_to_stderr
log_to_stderr("host-9")
logging.getLogger("midtown.log.driver").debug("a failover step")
logging.getLogger("midtown.log.follow").debug("not asked for")
logging.getLogger("kazoo.client").info("kazoo chatter")
logging.getLogger("midtown.x").info("a routine line")
"""


def test_midtown_debug_turns_on_debug_for_the_loggers_it_names_only() -> None:
    """MIDTOWN_DEBUG names loggers whose DEBUG lines a server writes (a failover's steps),
    and nothing else changes: kazoo stays at WARNING, the rest at INFO."""
    out = subprocess.run([sys.executable, "-c", LOGS], capture_output=True, text=True, check=True,
                         env={**os.environ, "MIDTOWN_DEBUG": " midtown.log.driver,,other "}, timeout=60)
    lines = out.stderr.splitlines()
    assert any("host-9 midtown.log.driver DEBUG a failover step" in s for s in lines), lines
    assert any("host-9 midtown.x INFO a routine line" in s for s in lines), lines
    assert not any("not asked for" in s or "kazoo chatter" in s for s in lines), lines
