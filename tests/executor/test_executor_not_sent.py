"""Attempts that provably never left: retried with a backoff, never quarantined, id kept.

Every test counts what the fake provider committed; the destination is made
unreachable by the fault plan (``Fault.UNREACHABLE`` refuses the connection).
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest
from support import ARGS, OPERATION, capture_contract

from effectguard import (
    ConfigurationError,
    EffectContract,
    EffectExecutor,
    EffectNotConfirmed,
    EffectNotSent,
    EffectStatus,
    EventType,
    effect,
)
from effectguard.testkit import (
    FakeEmailProvider,
    FakePaymentProvider,
    Fault,
    FaultPlan,
    Lookup,
    ManualClock,
    seeded_jitter,
)

MAIL = {"to": "ada@example.test", "subject": "Receipt", "body": "Thank you."}


def mail_contract(**overrides: Any) -> EffectContract:
    """An email with no idempotency and no sent log: an unknown outcome can only quarantine."""
    options: dict[str, Any] = {
        "name": "mail.receipt",
        "operation_id": lambda a: f"receipt:{a['to']}",
        "provider_idempotency_key": lambda a: FakeEmailProvider.message_id_for(a["to"]),
        "not_sent_on": (ConnectionRefusedError,),
    }
    options.update(overrides)
    return EffectContract(**options)


@pytest.fixture
def manual() -> ManualClock:
    """A clock that only the executor's waits move."""
    return ManualClock(1_800_000_000.0)


@pytest.fixture
def executor(ledger, manual) -> EffectExecutor:
    """An executor whose waits advance ``manual`` and whose jitter is seeded."""
    return EffectExecutor(ledger, clock=manual, jitter=seeded_jitter(13))


def test_refused_connection_is_retried_after_a_wait_and_sent_once(executor, manual):
    """Two refused connections, then the server is back: CONFIRMED, one email, no quarantine."""
    mail = FakeEmailProvider(lookup=Lookup.NONE, faults=FaultPlan([Fault.UNREACHABLE] * 2))
    started = manual()

    result = executor.execute(mail_contract(), MAIL, mail.handler)

    assert result.status is EffectStatus.CONFIRMED
    assert result.attempts == 3
    assert mail.committed() == 1
    assert manual() > started  # it waited between attempts
    kinds = [event.type for event in executor.ledger.events("receipt:ada@example.test")]
    assert kinds.count(EventType.NOT_SENT) == 2
    assert EventType.QUARANTINED not in kinds


def test_effect_not_sent_raised_by_the_handler_is_retried(executor):
    """A handler raising EffectNotSent itself is retried like a not_sent_on error."""
    mail = FakeEmailProvider(lookup=Lookup.NONE)
    refusals = [1]

    def send(arguments: Any, *, idempotency_key: str | None) -> Any:
        if refusals:
            refusals.pop()
            raise EffectNotSent("the SMTP server refused the connection")
        return mail.handler(arguments, idempotency_key=idempotency_key)

    result = executor.execute(mail_contract(not_sent_on=()), MAIL, send)

    assert result.status is EffectStatus.CONFIRMED
    assert mail.committed() == 1


def test_spent_budget_leaves_it_prepared_and_the_next_call_sends_it(executor):
    """Unreachable for every attempt: PREPARED with a fresh budget, then sent exactly once."""
    mail = FakeEmailProvider(lookup=Lookup.NONE, faults=FaultPlan([Fault.UNREACHABLE] * 3))
    contract = mail_contract()

    first = executor.execute(contract, MAIL, mail.handler)
    record = executor.ledger.get(first.operation_id)

    assert first.status is EffectStatus.PREPARED
    assert "not sent" in (first.reason or "")
    assert mail.committed() == 0
    assert record is not None
    assert (record.attempts, record.attempt_budget) == (3, 6)

    second = executor.execute(contract, MAIL, mail.handler)
    assert second.status is EffectStatus.CONFIRMED
    assert second.attempts == 4
    assert mail.committed() == 1
    assert executor.ledger.verify().ok


def test_decorated_tool_raises_a_retryable_effect_not_sent(executor):
    """The decorator raises EffectNotSent (an EffectNotConfirmed) carrying the PREPARED result."""
    mail = FakeEmailProvider(lookup=Lookup.NONE, faults=FaultPlan([Fault.UNREACHABLE] * 3))

    @effect(operation_id="receipt:{to}", executor=executor, not_sent_on=ConnectionRefusedError)
    def send_receipt(to: str, subject: str, body: str, *, idempotency_key: str = "") -> Any:
        return mail.send(to, subject, body, message_id=idempotency_key)

    with pytest.raises(EffectNotSent) as info:
        send_receipt(**MAIL)
    assert isinstance(info.value, EffectNotConfirmed)
    assert info.value.retryable is True
    assert info.value.result is not None
    assert info.value.result.status is EffectStatus.PREPARED
    assert "receipt:ada@example.test" in str(info.value)
    assert mail.committed() == 0

    assert send_receipt(**MAIL)["status"] == "sent"
    assert mail.committed() == 1


def test_async_refused_connection_is_retried_and_sent_once(executor):
    """The async driver retries a not-sent attempt too, awaiting its waits: one email."""
    mail = FakeEmailProvider(lookup=Lookup.NONE, faults=FaultPlan([Fault.UNREACHABLE] * 4))

    async def send(arguments: Any, *, idempotency_key: str | None) -> Any:
        await asyncio.sleep(0)
        return mail.handler(arguments, idempotency_key=idempotency_key)

    contract = mail_contract()
    first = asyncio.run(executor.execute_async(contract, MAIL, send))
    second = asyncio.run(executor.execute_async(contract, MAIL, send))

    assert (first.status, second.status) == (EffectStatus.PREPARED, EffectStatus.CONFIRMED)
    assert mail.committed() == 1


def test_not_sent_after_an_unknown_attempt_stays_unknown_never_prepared(executor):
    """A refused resend proves nothing about an earlier lost ack: unknown, not quarantined."""
    provider = FakePaymentProvider(
        lookup=Lookup.NONE,
        faults=FaultPlan([Fault.LOSE_ACK, Fault.UNREACHABLE, Fault.UNREACHABLE]),
    )
    contract = capture_contract(
        provider, guaranteed=True, probe=False, not_sent_on=(ConnectionRefusedError,)
    )

    first = executor.execute(contract, ARGS, provider.handler)
    assert first.status is EffectStatus.OUTCOME_UNKNOWN  # the lost ack may have committed
    assert provider.committed() == 1

    second = executor.execute(contract, ARGS, provider.handler)
    assert second.status is EffectStatus.CONFIRMED
    assert provider.committed() == 1  # the provider's key deduplicated the resend
    kinds = [event.type for event in executor.ledger.events(OPERATION)]
    assert EventType.QUARANTINED not in kinds


@pytest.mark.parametrize(
    "kind", [OSError, ConnectionError, ConnectionResetError, TimeoutError, socket.timeout]
)
def test_not_sent_on_refuses_errors_raised_after_sending(kind):
    """Types that also cover errors after the request left cannot be declared not-sent."""
    with pytest.raises(ConfigurationError, match="not_sent_on cannot name"):
        mail_contract(not_sent_on=(kind,))
