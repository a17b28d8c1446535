"""Fixtures for the agent-effect-ops tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from ops_helpers import Run, file_state, protocol_snapshot, quarantine

from effectguard import EffectLedger
from effectguard.testkit import FakePaymentProvider


@pytest.fixture
def run(ledger_target: str) -> Run:
    """agent-effect-ops against this test's ledger, on the backend under test."""
    return Run(ledger_target)


@pytest.fixture
def quarantined(make_ledger: Callable[..., EffectLedger]) -> FakePaymentProvider:
    """This test's ledger holds OP QUARANTINED; its provider committed it and lost the ack."""
    ledger = make_ledger()
    provider = quarantine(ledger)
    ledger.close()
    return provider


@pytest.fixture
def state(
    make_ledger: Callable[..., EffectLedger], backend: str, ledger_target: str
) -> Callable[[], Any]:
    """Capture the ledger's whole contents (for SQLite also its file bytes) to compare later."""

    def capture() -> Any:
        handle = make_ledger()
        contents = protocol_snapshot(handle)
        handle.close()
        files = file_state(Path(ledger_target)) if backend == "sqlite" else None
        return contents, files

    return capture
