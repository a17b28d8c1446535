"""Re-probing a DISPATCHED operation whose worker was SIGKILLed: asked, never resent.

The owner is provably gone, so nobody else will settle it until the next call;
a re-probe (or a recovery sweep) settles it now from the provider's answer.
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
from effectguard._decorator import FoundTool, ToolIndex
from effectguard.operator import Recoverer, ReprobeAction, reprobe
from effectguard.testkit import FakePaymentProvider, Lookup

CHILD = Path(__file__).parents[1] / "child_worker.py"


def _killed_at(tmp_path: Path, mode: str) -> tuple[Path, FakePaymentProvider]:
    ledger_path, provider_path = tmp_path / "ledger.db", tmp_path / "provider.db"
    child = subprocess.Popen(
        [sys.executable, str(CHILD), mode, str(ledger_path), str(provider_path)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() in {"claimed", "committed"}
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(30)
    provider = FakePaymentProvider(
        path=provider_path, idempotency_guaranteed=False, lookup=Lookup.STRONG
    )
    return ledger_path, provider


@pytest.mark.slow
def test_a_dead_workers_committed_capture_is_confirmed_by_a_reprobe(tmp_path: Path) -> None:
    """Committed before the kill: CONFIRMED from DISPATCHED, and the next call replays it."""
    ledger_path, provider = _killed_at(tmp_path, "crash-after-commit")
    contract = capture_contract(provider)
    with SQLiteEffectLedger(ledger_path) as ledger:
        record = ledger.get(OPERATION)
        assert record.status is EffectStatus.DISPATCHED
        assert record.lease_live  # live by the clock, but its owner is dead

        outcome = reprobe(ledger, record, contract, actor="test")

        assert (outcome.before, outcome.after) == (EffectStatus.DISPATCHED, EffectStatus.CONFIRMED)
        assert outcome.written
        replay = EffectExecutor(ledger).execute(contract, ARGS, provider.handler)
        assert replay.replayed
        assert ledger.verify().ok
    assert provider.committed() == 1


@pytest.mark.slow
def test_a_dead_workers_unsent_capture_is_left_for_one_send(tmp_path: Path) -> None:
    """Killed before it sent: a sweep finds it, the probe says not committed, PREPARED; one send."""
    ledger_path, provider = _killed_at(tmp_path, "crash-after-claim")
    contract = capture_contract(provider)
    tools = ToolIndex([FoundTool(contract, dict, "tests.capture")])
    with SQLiteEffectLedger(ledger_path) as ledger:
        report = Recoverer(ledger, tools).sweep()

        assert [(o.before, o.after, o.action) for o in report.probed] == [
            (EffectStatus.DISPATCHED, EffectStatus.PREPARED, ReprobeAction.RETRY_READY)
        ]
        assert provider.committed() == 0
        sent = EffectExecutor(ledger).execute(contract, ARGS, provider.handler)
        assert sent.status is EffectStatus.CONFIRMED
        assert not sent.replayed
        assert ledger.verify().ok
    assert provider.committed() == 1


def test_a_live_workers_operation_is_not_probed(tmp_path: Path) -> None:
    """An operation this process holds right now is not a sweep's to touch."""
    provider = FakePaymentProvider(idempotency_guaranteed=False)
    contract = capture_contract(provider)
    tools = ToolIndex([FoundTool(contract, dict, "tests.capture")])
    with SQLiteEffectLedger(tmp_path / "ledger.db") as ledger:
        seen = []

        def handler(arguments, *, idempotency_key):
            seen.append(Recoverer(ledger, tools).sweep())
            return provider.handler(arguments, idempotency_key=idempotency_key)

        result = EffectExecutor(ledger).execute(contract, ARGS, handler)

        assert result.status is EffectStatus.CONFIRMED
        assert seen[0].probed == ()
        assert seen[0].skipped == ()
        types = [event.type for event in ledger.events(OPERATION)]
        assert EventType.REPROBED not in types
    assert provider.committed() == 1


@pytest.mark.slow
def test_a_dead_workers_operation_the_probe_cannot_settle_is_marked_unknown(
    tmp_path: Path,
) -> None:
    """UNKNOWN from the probe: OUTCOME_UNKNOWN, an owner_gone event, no overlap, nothing sent."""
    ledger_path, provider = _killed_at(tmp_path, "crash-after-claim")
    blind = FakePaymentProvider(path=tmp_path / "provider.db", lookup=Lookup.NONE)
    contract = capture_contract(blind)
    with SQLiteEffectLedger(ledger_path) as ledger:
        outcome = reprobe(ledger, ledger.get(OPERATION), contract, actor="test")

        assert (outcome.after, outcome.action) == (
            EffectStatus.OUTCOME_UNKNOWN,
            ReprobeAction.MARKED_UNKNOWN,
        )
        record = ledger.get(OPERATION)
        assert record.status is EffectStatus.OUTCOME_UNKNOWN
        assert not record.overlap_risk  # its holder is dead: it can send nothing more
        last = ledger.events(OPERATION)[-1]
        assert last.type is EventType.OWNER_GONE
        assert last.evidence["owner_gone"] is True
        assert ledger.verify().ok
    assert provider.committed() == 0
