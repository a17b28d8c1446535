"""Crashes: a worker killed with SIGKILL mid-operation, recovered by a fresh process.

Whatever the recovery decides, the provider never holds two effects.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from support import ARGS, OPERATION, capture_contract

from effectguard import EffectExecutor, EffectStatus, EventType, SQLiteEffectLedger
from effectguard.testkit import FakePaymentProvider, Lookup

CHILD = Path(__file__).parents[1] / "child_worker.py"


def _kill_child_at(tmp_path: Path, mode: str, *, guaranteed: bool) -> tuple[Path, Path]:
    """Run a worker until it reports reaching ``mode``'s point, then SIGKILL it."""
    ledger_path, provider_path = tmp_path / "ledger.db", tmp_path / "provider.db"
    command = [sys.executable, str(CHILD), mode, str(ledger_path), str(provider_path)]
    if guaranteed:
        command.append("--guaranteed")
    child = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        line = child.stdout.readline().strip()
        assert line == {"crash-after-claim": "claimed", "crash-after-commit": "committed"}[mode]
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(30)
    assert child.returncode == -signal.SIGKILL
    return ledger_path, provider_path


# (point of death, provider guarantee, probe) -> (final status, effects, attempts)
CASES = [
    ("crash-after-claim", False, True, EffectStatus.CONFIRMED, 1, 2),
    ("crash-after-claim", False, False, EffectStatus.QUARANTINED, 0, 1),
    ("crash-after-claim", True, False, EffectStatus.CONFIRMED, 1, 2),
    ("crash-after-commit", False, True, EffectStatus.CONFIRMED, 1, 1),
    ("crash-after-commit", False, False, EffectStatus.QUARANTINED, 1, 1),
    ("crash-after-commit", True, False, EffectStatus.CONFIRMED, 1, 2),
]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("mode", "guaranteed", "probe", "status", "effects", "attempts"),
    CASES,
    ids=[f"{c[0]}-{'key' if c[1] else 'nokey'}-{'probe' if c[2] else 'noprobe'}" for c in CASES],
)
def test_recovery_after_sigkill_never_duplicates(
    tmp_path, mode, guaranteed, probe, status, effects, attempts
):
    """The owner is provably gone: a fresh process recovers at once, and never twice."""
    ledger_path, provider_path = _kill_child_at(tmp_path, mode, guaranteed=guaranteed)
    provider = FakePaymentProvider(
        path=provider_path,
        idempotency_guaranteed=guaranteed,
        lookup=Lookup.STRONG if probe else Lookup.NONE,
    )
    with SQLiteEffectLedger(ledger_path) as ledger:
        assert ledger.get(OPERATION).status is EffectStatus.DISPATCHED
        assert ledger.get(OPERATION).lease_live  # no waiting for expiry: the owner is dead
        contract = capture_contract(provider, guaranteed=guaranteed, probe=probe)

        result = EffectExecutor(ledger).execute(contract, ARGS, provider.handler)

        assert result.status is status
        assert result.attempts == attempts
        assert provider.committed() == effects
        assert provider.duplicates() == 0
        expired = next(e for e in ledger.events(OPERATION) if e.type is EventType.OWNER_GONE)
        assert expired.evidence["owner_gone"] is True
        assert EventType.LEASE_EXPIRED not in {e.type for e in ledger.events(OPERATION)}
        assert not ledger.get(OPERATION).overlap_risk
        assert ledger.verify().ok
