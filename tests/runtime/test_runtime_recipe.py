"""The effect-assurance recipe runs as a program and proves its own invariant."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

RECIPE = Path(__file__).parents[2] / "recipes" / "effect_assurance_demo.py"

pytestmark = pytest.mark.slow


def test_the_demo_waits_resumes_and_leaves_one_payment():
    """The demo exits 0: WAITING, then COMPLETED with one committed payment."""
    done = subprocess.run(
        [sys.executable, str(RECIPE)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "WAITING on invoice:INV-1042:capture" in done.stdout
    assert "COMPLETED with final answer 'payment done'" in done.stdout
    assert "The provider holds 1 committed payment(s)." in done.stdout


def test_the_demo_fails_when_the_invariant_breaks(tmp_path):
    """The recipe's check is real: two committed payments make it exit non-zero."""
    script = f"""
import sys
sys.path.insert(0, {str(RECIPE.parent)!r})
import effect_assurance_demo as demo
from effectguard.testkit import FakePaymentProvider
from pathlib import Path
workdir = Path({str(tmp_path)!r})
FakePaymentProvider(path=workdir / "provider.db").capture("INV-0001", 1)
sys.exit(demo.main(workdir))
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "holds 2 committed payment(s)" in done.stdout
