"""FakeEmailProvider: every accepted send is delivered, the sent log is searchable by Message-ID."""

from __future__ import annotations

import pytest

from effectguard import (
    EffectContract,
    EffectExecutor,
    EffectStatus,
    ProbeStatus,
    SQLiteEffectLedger,
)
from effectguard.testkit import (
    FakeEmailProvider,
    Fault,
    FaultPlan,
    Lookup,
    ProviderTimeout,
    ProviderUnavailable,
)


def _mail_contract(provider: FakeEmailProvider) -> EffectContract:
    def operation(arguments):
        return f"welcome:{arguments['to']}"

    return EffectContract(
        name="send_welcome",
        operation_id=operation,
        provider_idempotency_key=lambda a: FakeEmailProvider.message_id_for(operation(a)),
        outcome_probe=provider.probe,
    )


ARGUMENTS = {"to": "ada@example.test", "subject": "Welcome", "body": "Hello Ada"}


def test_message_id_for_is_deterministic_and_well_formed():
    """The same operation id always gives the same Message-ID, in angle brackets with a domain."""
    first = FakeEmailProvider.message_id_for("welcome:ada")
    assert first == FakeEmailProvider.message_id_for("welcome:ada")
    assert first != FakeEmailProvider.message_id_for("welcome:bob")
    assert first.startswith("<")
    assert first.endswith("@effectguard.invalid>")


def test_resending_the_same_message_id_delivers_twice():
    """No idempotency: two sends with one Message-ID are two committed messages."""
    provider = FakeEmailProvider()
    message_id = FakeEmailProvider.message_id_for("op")
    provider.send("a@example.test", "Hi", "x", message_id=message_id)
    provider.send("a@example.test", "Hi", "x", message_id=message_id)
    assert provider.committed(message_id) == 2
    assert provider.duplicates() == 1


def test_lost_ack_is_found_in_the_sent_log_by_message_id():
    """After a lost acknowledgement the probe finds the message by its Message-ID."""
    provider = FakeEmailProvider(faults=FaultPlan({1: Fault.LOSE_ACK}))
    message_id = FakeEmailProvider.message_id_for("op")
    with pytest.raises(ProviderTimeout):
        provider.send("a@example.test", "Hi", "x", message_id=message_id)
    found = provider.probe({}, idempotency_key=message_id)
    assert found.status is ProbeStatus.COMMITTED
    assert found.output["message_id"] == message_id
    assert provider.find_message(message_id) == found.output


def test_probe_without_a_message_id_cannot_tell():
    """Without a Message-ID to search by, the probe answers UNKNOWN, never NOT_COMMITTED."""
    provider = FakeEmailProvider()
    assert provider.probe(ARGUMENTS, idempotency_key=None).status is ProbeStatus.UNKNOWN


def test_eventual_lookup_proves_nothing_until_visible():
    """An eventually consistent sent log answers UNKNOWN until the message becomes visible."""
    provider = FakeEmailProvider(lookup=Lookup.EVENTUAL, visible_after_reads=1)
    message_id = provider.send("a@example.test", "Hi", "x", message_id="<m@x>")["message_id"]
    assert provider.probe({}, idempotency_key=message_id).status is ProbeStatus.UNKNOWN
    assert provider.probe({}, idempotency_key=message_id).status is ProbeStatus.COMMITTED


def test_executor_recovers_a_lost_send_without_sending_twice(tmp_path):
    """The deterministic Message-ID lets the executor confirm a lost send instead of resending."""
    provider = FakeEmailProvider(faults=FaultPlan({1: Fault.LOSE_ACK}))
    contract = _mail_contract(provider)
    with SQLiteEffectLedger(tmp_path / "ledger.db") as ledger:
        result = EffectExecutor(ledger).execute(contract, ARGUMENTS, provider.handler)
    assert result.status is EffectStatus.CONFIRMED
    assert provider.committed() == 1
    assert provider.requests == 1


def test_failure_before_commit_is_retried_on_an_authoritative_not_found(tmp_path):
    """A send that failed before the provider accepted it is resent once the log says not found."""
    provider = FakeEmailProvider(faults=FaultPlan({1: Fault.FAIL_BEFORE_COMMIT}))
    with SQLiteEffectLedger(tmp_path / "ledger.db") as ledger:
        result = EffectExecutor(ledger).execute(
            _mail_contract(provider), ARGUMENTS, provider.handler
        )
    assert result.status is EffectStatus.CONFIRMED
    assert result.attempts == 2
    assert provider.committed() == 1


def test_send_without_message_id_gets_one_assigned():
    """A send without a Message-ID is delivered under one the provider assigns."""
    provider = FakeEmailProvider(faults=FaultPlan({1: Fault.FAIL_BEFORE_COMMIT}))
    with pytest.raises(ProviderUnavailable):
        provider.send("a@example.test", "Hi", "x")
    sent = provider.send("a@example.test", "Hi", "x")
    assert sent["message_id"].startswith("<msg-")
    assert provider.committed() == 1
