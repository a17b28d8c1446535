"""Reading an operation's event commitments without decoding its events (issue 15).

A replay checks the stored output against what the confirmation committed to
(``check_replayable``). The built-in ledgers read just the commitments; any
other ledger is read through its events; both must give the same answer.
"""

from __future__ import annotations

from typing import Any

import pytest
from support import ARGS, OPERATION, capture_contract

from effectguard import EffectExecutor, EffectLedger, EffectStatus, InvalidRequestError
from effectguard._model import EffectEvent
from effectguard.ledger._protocol import read_commitments
from effectguard.testkit import FakePaymentProvider, Fault, FaultPlan
from effectguard.testkit._ledgers import DelegatingLedger


class EventsOnly:
    """A ledger that offers events but no ``commitments`` of its own."""

    def __init__(self, inner: EffectLedger) -> None:
        self.inner = inner

    def events(self, operation_id: str) -> list[EffectEvent]:
        """The inner ledger's events."""
        return self.inner.events(operation_id)


@pytest.fixture
def settled(ledger: EffectLedger) -> EffectLedger:
    """``ledger`` holding OPERATION: its acknowledgement lost, then settled by the probe."""
    provider = FakePaymentProvider(idempotency_guaranteed=False, faults=FaultPlan([Fault.LOSE_ACK]))
    result = EffectExecutor(ledger).execute(capture_contract(provider), ARGS, provider.handler)
    assert result.status is EffectStatus.CONFIRMED
    assert provider.committed() == 1
    return ledger


def _from_events(ledger: EffectLedger, operation_id: str) -> list[Any]:
    return [event.commits for event in ledger.events(operation_id) if event.commits]


def test_the_commitments_read_are_the_events_commitments_in_order(settled: EffectLedger):
    """Each backend's own read gives every non-empty ``commits``, oldest first, and only those."""
    expected = _from_events(settled, OPERATION)
    assert len(expected) >= 2  # the claim's, and the confirmation's
    assert len(expected) < len(settled.events(OPERATION))  # some events commit to nothing
    assert "output" in expected[-1]

    assert settled.commitments(OPERATION) == expected  # type: ignore[attr-defined]
    assert read_commitments(settled, OPERATION) == expected


def test_a_ledger_without_its_own_read_gives_the_same_commitments(settled: EffectLedger):
    """The fallback decodes the events: same answer, through a wrapper and without one."""
    expected = _from_events(settled, OPERATION)
    assert read_commitments(EventsOnly(settled), OPERATION) == expected  # type: ignore[arg-type]
    assert DelegatingLedger(settled).commitments(OPERATION) == expected


def test_an_unknown_operation_has_no_commitments_and_a_bad_id_is_refused(ledger: EffectLedger):
    """Nothing stored reads as empty; an id no operation can have is a clear error."""
    assert ledger.commitments("never:claimed") == []  # type: ignore[attr-defined]
    with pytest.raises(InvalidRequestError, match="operation id"):
        ledger.commitments("")  # type: ignore[attr-defined]
