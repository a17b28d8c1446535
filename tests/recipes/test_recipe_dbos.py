"""recipes/dbos_payments.py runs offline: a worker killed mid-step, then a quarantined wait."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from extras_support import import_extra

dbos = import_extra("dbos", "dbos")

pytestmark = pytest.mark.slow

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "dbos_payments.py"


def test_the_dbos_recipe_recovers_the_killed_worker_and_waits_for_the_operator():
    """It prints each story's steps and exits 0: each provider holds exactly one payment."""
    done = subprocess.run(
        [sys.executable, str(RECIPE)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    lines = done.stdout.splitlines()
    assert lines[0].endswith(": the provider committed; killed before the checkpoint")
    assert lines[1] == "first worker exited with -9 (SIGKILL is -9)"
    assert "workflow pay-INV-1042 returned {" in lines[2]
    assert "'id': 'cap_000001'" in lines[2]
    assert lines[3] == "story 1: payments the provider holds: 1"
    assert lines[4].startswith("waiting (PENDING): charge (tool call 1) waits on operation")
    assert "'capture:dbos:pay-INV-2001:1', QUARANTINED" in lines[4]
    assert lines[5] == "operator: confirmed capture:dbos:pay-INV-2001:1 as cap_000001"
    assert lines[6].startswith("workflow pay-INV-2001 returned {")
    assert lines[7] == "story 2: payments the provider holds: 1"
