"""A resolution lands on the state its operator decided on, or nowhere: on every backend.

The state is the event count and chain head the operator saw (``Seen``). A
decision on a state that has moved on is refused, and so is one that loses a
race to another write between its own read and its write: it is never
re-applied to what the other write left.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest
from test_resolution import ARGS, AUDIT, OP, contract, quarantine, snapshot

from effectguard import EffectExecutor, EffectLedger, EffectStatus, EventType
from effectguard.errors import InvalidRequestError, OperationChangedError
from effectguard.ledger import Changes, EventDraft, Expect, Seen
from effectguard.operator import resolve
from effectguard.testkit import FakePaymentProvider, Fault, FaultPlan, Lookup
from effectguard.testkit._ledgers import DelegatingLedger


def _decide(ledger: EffectLedger, action: str, expected: Seen | None) -> Any:
    if action == "confirm":
        return ledger.confirm(
            OP, output={"id": "cap_1"}, provider_operation_id="cap_1", expected=expected, **AUDIT
        )
    return getattr(ledger, action)(OP, expected=expected, **AUDIT)


@pytest.mark.parametrize("action", ["confirm", "reject", "authorize_retry"])
def test_a_decision_on_the_state_seen_lands(ledger: EffectLedger, action: str) -> None:
    quarantine(ledger)
    looked = ledger.get(OP)
    assert looked is not None
    # A prefix of the head, as an operator copies it from show, is as good as the whole.
    seen = Seen(looked.event_count, looked.event_head.hex()[:16].upper())
    after = _decide(ledger, action, seen)
    assert after.event_count == looked.event_count + 1
    assert after.status is not EffectStatus.QUARANTINED
    assert ledger.verify().ok


@pytest.mark.parametrize("action", ["confirm", "reject", "authorize_retry"])
@pytest.mark.parametrize("by", ["events", "head", "both"])
def test_a_decision_on_a_state_that_moved_on_is_refused_and_writes_nothing(
    ledger: EffectLedger, action: str, by: str
) -> None:
    # Attempt 1 is quarantined; the operator looks at it.
    provider = FakePaymentProvider(
        idempotency_guaranteed=False,
        lookup=Lookup.NONE,
        faults=FaultPlan([Fault.LOSE_ACK, Fault.LOSE_ACK]),
    )
    executor = EffectExecutor(ledger)
    assert executor.execute(contract(), ARGS, provider.handler).status is EffectStatus.QUARANTINED
    looked = ledger.get(OP)
    assert looked is not None
    head = looked.event_head.hex()
    seen = {
        "events": Seen(event_count=looked.event_count),
        "head": Seen(event_head=head[:16]),
        "both": Seen(looked.event_count, head),
    }[by]
    # Another operator authorizes a retry; attempt 2 commits and is quarantined again.
    ledger.authorize_retry(OP, actor="bob", reason="r", evidence_reference="e")
    assert executor.execute(contract(), ARGS, provider.handler).status is EffectStatus.QUARANTINED
    assert provider.committed() == 2
    before = snapshot(ledger)
    with pytest.raises(OperationChangedError) as refused:
        _decide(ledger, action, seen)
    message = str(refused.value)
    assert "changed since you looked: reload" in message
    assert "it is now QUARANTINED" in message
    assert refused.value.operation_id == OP
    assert "\n" not in message
    assert snapshot(ledger) == before
    assert provider.committed() == 2


def test_the_operator_api_refuses_a_stale_decision_before_checking_the_output(
    ledger: EffectLedger,
) -> None:
    quarantine(ledger)
    stale = Seen(event_count=1)
    before = snapshot(ledger)
    with pytest.raises(OperationChangedError):
        resolve(ledger, OP, "reject", expected=stale, **AUDIT)
    with pytest.raises(OperationChangedError):
        resolve(ledger, OP, "confirm", output={"id": "x"}, expected=stale, dry_run=True, **AUDIT)
    assert snapshot(ledger) == before


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"event_count": 0}, "at least 1"),
        ({"event_count": -3}, "at least 1"),
        ({"event_count": True}, "at least 1"),
        ({"event_head": "abc"}, "16 to 64 hex digits"),
        ({"event_head": "z" * 16}, "16 to 64 hex digits"),
        ({"event_head": "a" * 65}, "16 to 64 hex digits"),
    ],
)
def test_a_malformed_expectation_is_an_invalid_request(fields: dict[str, Any], says: str) -> None:
    with pytest.raises(InvalidRequestError, match=says):
        Seen(**fields)


class _Interleaved(DelegatingLedger):
    """A ledger where another operator's write lands between this resolution's read and write."""

    def __init__(self, inner: EffectLedger, other: Callable[[], Any]) -> None:
        super().__init__(inner)
        self.other: Callable[[], Any] | None = other

    def transition(
        self,
        operation_id: str,
        expect: Expect,
        changes: Changes,
        events: Sequence[EventDraft],
        *,
        now: float | None = None,
        known: Any = None,
    ) -> Any:
        if self.other is not None:
            other, self.other = self.other, None
            other()
        return self.inner.transition(operation_id, expect, changes, events, now=now, known=known)


@pytest.mark.parametrize("with_expectation", [False, True])
def test_a_resolution_that_loses_the_race_is_refused_not_applied_to_the_winners_state(
    ledger: EffectLedger, make_ledger: Callable[..., EffectLedger], with_expectation: bool
) -> None:
    # Confirm reads QUARANTINED; before its write, authorize-retry (another handle) wins.
    provider, _ = quarantine(ledger, Fault.LOSE_ACK)
    winner = make_ledger()
    raced = _Interleaved(
        ledger,
        lambda: winner.authorize_retry(OP, actor="bob", reason="r", evidence_reference="e"),
    )
    expected = Seen.of(ledger.get(OP)) if with_expectation else None  # type: ignore[arg-type]
    with pytest.raises(OperationChangedError, match="changed since you looked"):
        resolve(raced, OP, "confirm", output={"id": "cap_1"}, expected=expected, **AUDIT)
    events = ledger.events(OP)
    operator = [event for event in events if event.type.value.startswith("operator")]
    assert [event.type for event in operator] == [EventType.OPERATOR_RETRY_AUTHORIZED]
    record = ledger.get(OP)
    assert record is not None
    assert record.status is EffectStatus.PREPARED
    assert provider.committed() == 1
    assert ledger.verify().ok
