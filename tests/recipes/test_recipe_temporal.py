"""recipes/temporal_payments.py: a lost acknowledgement, Temporal's retry, a reset; one capture."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from extras_support import import_extra

import_extra("temporalio", "temporal")

SCRIPT = Path(__file__).resolve().parents[2] / "recipes" / "temporal_payments.py"


def test_the_temporal_recipe_retries_without_resending_and_replays_after_a_reset() -> None:
    """The recipe's own check passes (exit 0); attempt 1 is retryable, attempt 2 captures."""
    done = subprocess.run(
        [sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=120, check=False
    )

    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "attempt 1: EffectOutcomeUnknown, Temporal retries in" in out
    assert "attempt 2: captured cap_000001" in out
    assert "after a reset (run-2): cap_000001, replayed from the ledger" in out
    assert "the provider holds 1 capture(s); it received 1 request(s)" in out
