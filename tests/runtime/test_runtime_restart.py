"""A run left WAITING (or killed mid-dispatch) in one process completes in another, once."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from runtime_child import build
from runtime_support import OPERATION, RUN

from effectguard import EffectStatus
from effectguard.runtime import RunState
from effectguard.runtime.state import CallPhase
from effectguard.testkit import FakePaymentProvider

CHILD = Path(__file__).with_name("runtime_child.py")

pytestmark = pytest.mark.slow


def child(command: str, workdir: Path, fault: str) -> subprocess.CompletedProcess[str]:
    """Run the child process to its end."""
    return subprocess.run(
        [sys.executable, str(CHILD), command, str(workdir), "--fault", fault],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def sent(workdir: Path) -> int:
    """How many capture requests reached the provider, from its own durable count."""
    with sqlite3.connect(workdir / "provider.db") as conn:
        return int(conn.execute("SELECT sum(count) FROM attempts").fetchone()[0])


def report(done: subprocess.CompletedProcess[str]) -> dict:
    """The child's RunResult, or a failure showing its stderr."""
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_waiting_run_is_resumed_in_a_new_process_with_one_effect(tmp_path):
    """Started in one process (WAITING), resumed in another: COMPLETED with one payment."""
    first = report(child("start", tmp_path, "pending"))
    assert first["state"] == "WAITING"
    assert first["waiting_on"] == [OPERATION]
    assert first["final"] is None

    second = report(child("resume", tmp_path, "pending"))
    assert second["state"] == "COMPLETED"
    assert second["final"] == "payment done"
    assert second["effects"] == {OPERATION: "CONFIRMED"}
    assert second["steps"] == 2

    provider = FakePaymentProvider(path=tmp_path / "provider.db")
    assert provider.committed() == 1
    assert provider.duplicates() == 0
    assert sent(tmp_path) == 1
    audit = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    actions = [entry["action"] for entry in audit]
    assert actions.count("dispatched") == 2  # sent once, re-issued once (and reconciled)
    assert actions[-1] == "run_completed"
    assert (tmp_path / "audit.jsonl").stat().st_mode & 0o777 == 0o600


def test_a_run_killed_after_the_provider_committed_resumes_to_one_effect(tmp_path):
    """SIGKILL after the commit, before the acknowledgement: a resume here reconciles it."""
    crashed = child("start", tmp_path, "crash-after-commit")
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr

    runtime = build(tmp_path, "none")
    record = runtime.checkpoints.load(RUN)
    assert record.state is RunState.RUNNING
    assert [p.phase for p in record.pending] == [CallPhase.DISPATCHING]
    assert runtime.effect_executor.ledger.get(OPERATION).status is EffectStatus.DISPATCHED

    result = runtime.resume(RUN)
    assert result.state is RunState.COMPLETED
    assert result.effects == {OPERATION: "CONFIRMED"}
    provider = FakePaymentProvider(path=tmp_path / "provider.db")
    assert provider.committed() == 1
    assert provider.duplicates() == 0
    assert sent(tmp_path) == 1  # reconciled by the probe, never sent again
    runtime.checkpoints.close()
    runtime.effect_executor.ledger.close()
