"""recipes/operator_runbook.py: the 3 a.m. path runs end to end with exactly one capture."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from effectguard.testkit import FakePaymentProvider

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "operator_runbook.py"


def test_the_runbook_resumes_the_run_with_one_capture(tmp_path: Path) -> None:
    """Quarantined, re-probed, a bad output refused, confirmed, resumed: one capture."""
    env = {k: v for k, v in os.environ.items() if k not in {"RUNBOOK_DIR", "EFFECTGUARD_TOOLS"}}
    done = subprocess.run(
        [sys.executable, str(RECIPE), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=env,
    )

    assert done.returncode == 0, done.stdout + done.stderr
    assert "QUARANTINED -> QUARANTINED (unchanged; probe UNKNOWN" in done.stdout
    assert "Error: the output does not match" in done.stdout
    assert "QUARANTINED -> CONFIRMED" in done.stdout
    assert "run pay-INV-7 COMPLETED - captures at the provider: 1" in done.stdout
    provider = FakePaymentProvider(path=tmp_path / "provider.db")
    assert provider.committed() == 1


def test_a_missing_directory_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """DIRECTORY that does not exist: one line naming it and the next step, nothing created."""
    env = {k: v for k, v in os.environ.items() if k not in {"RUNBOOK_DIR", "EFFECTGUARD_TOOLS"}}
    missing = tmp_path / "not-there"
    done = subprocess.run(
        [sys.executable, str(RECIPE), str(missing)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )

    assert done.returncode == 2, done.stdout + done.stderr
    expected = (
        f"operator_runbook.py: {str(missing)!r} is not a directory: create it first, or run"
        " without an argument for a fresh temporary one"
    )
    assert done.stderr.splitlines() == [expected]
    assert not missing.exists()
