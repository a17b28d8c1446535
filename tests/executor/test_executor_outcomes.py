"""How the executor settles each kind of outcome; every test counts the provider's commits."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support import ARGS, KEY, OPERATION, capture_contract, dead_owner

from effectguard import (
    EffectExecutor,
    EffectRejected,
    EffectStatus,
    EventType,
    OperationConflictError,
    UnknownOutcomePolicy,
)
from effectguard.ledger import Lease, NewOperation
from effectguard.testkit import FakePaymentProvider, Fault, FaultPlan, Lookup


def test_lost_acknowledgement_is_confirmed_by_the_probe_without_a_second_dispatch(ledger):
    """The provider commits, the ack is lost: the probe finds it, CONFIRMED, one request."""
    provider = FakePaymentProvider(idempotency_guaranteed=False, faults=FaultPlan([Fault.LOSE_ACK]))
    result = EffectExecutor(ledger).execute(capture_contract(provider), ARGS, provider.handler)

    assert result.status is EffectStatus.CONFIRMED
    assert result.output["id"] == "cap_000001"
    assert result.provider_operation_id == "cap_000001"
    assert result.attempts == 1
    assert provider.requests == 1
    assert provider.committed() == 1


def test_failure_before_commit_allows_one_retry_on_authoritative_not_committed(ledger):
    """An error before commit plus a strong NOT_COMMITTED: one retry, one effect."""
    provider = FakePaymentProvider(
        idempotency_guaranteed=False, faults=FaultPlan([Fault.FAIL_BEFORE_COMMIT])
    )
    result = EffectExecutor(ledger).execute(capture_contract(provider), ARGS, provider.handler)

    assert result.status is EffectStatus.CONFIRMED
    assert result.attempts == 2
    assert provider.requests == 2
    assert provider.committed() == 1
    types = [event.type for event in ledger.events(OPERATION)]
    assert types.count(EventType.RETRY) == 1


def test_unknown_outcome_without_probe_or_guarantee_is_quarantined_and_never_resent(ledger):
    """A lost ack with no probe and no idempotency guarantee: QUARANTINED, sent once, ever."""
    provider = FakePaymentProvider(idempotency_guaranteed=False, faults=FaultPlan([Fault.LOSE_ACK]))
    executor = EffectExecutor(ledger)
    contract = capture_contract(provider, probe=False)

    first = executor.execute(contract, ARGS, provider.handler)
    second = executor.execute(contract, ARGS, provider.handler)

    assert first.status is EffectStatus.QUARANTINED
    assert "does not guarantee idempotency" in (first.reason or "")
    assert second.status is EffectStatus.QUARANTINED
    assert provider.requests == 1
    assert provider.committed() == 1


def test_keep_unknown_policy_leaves_the_operation_unknown(ledger):
    """With KEEP_UNKNOWN, an unsettled outcome stays OUTCOME_UNKNOWN, still without a resend."""
    provider = FakePaymentProvider(idempotency_guaranteed=False, faults=FaultPlan([Fault.LOSE_ACK]))
    contract = capture_contract(
        provider, probe=False, unknown_outcome=UnknownOutcomePolicy.KEEP_UNKNOWN
    )
    executor = EffectExecutor(ledger)

    assert executor.execute(contract, ARGS, provider.handler).status is EffectStatus.OUTCOME_UNKNOWN
    assert executor.execute(contract, ARGS, provider.handler).status is EffectStatus.OUTCOME_UNKNOWN
    assert provider.requests == 1
    assert provider.committed() == 1


def test_same_operation_with_different_arguments_conflicts_before_any_dispatch(ledger):
    """Reusing an operation id for another request raises before anything is sent."""
    provider = FakePaymentProvider()
    executor = EffectExecutor(ledger)
    contract = capture_contract(provider)
    executor.execute(contract, ARGS, provider.handler)

    with pytest.raises(OperationConflictError, match="different request"):
        executor.execute(contract, {**ARGS, "amount_cents": 1}, provider.handler)
    assert provider.requests == 1
    assert provider.committed() == 1


def test_confirmed_operation_is_replayed_by_a_new_process_after_reopening(tmp_path: Path):
    """A new process reopening the ledger file replays the stored result and never dispatches."""
    ledger_path = tmp_path / "ledger.db"
    provider_path = tmp_path / "provider.db"
    provider = FakePaymentProvider(path=provider_path)
    from effectguard import SQLiteEffectLedger  # noqa: PLC0415 - used by this test only

    with SQLiteEffectLedger(ledger_path) as ledger:
        first = EffectExecutor(ledger).execute(capture_contract(provider), ARGS, provider.handler)
    assert first.status is EffectStatus.CONFIRMED

    script = textwrap.dedent(
        f"""
        import json, sys
        sys.path.insert(0, {str(Path(__file__).parents[1])!r})
        from support import ARGS, capture_contract
        from effectguard import EffectExecutor, SQLiteEffectLedger
        from effectguard.testkit import FakePaymentProvider
        provider = FakePaymentProvider(path={str(provider_path)!r})
        with SQLiteEffectLedger({str(ledger_path)!r}) as ledger:
            result = EffectExecutor(ledger).execute(
                capture_contract(provider), ARGS, provider.handler)
        print(json.dumps({{"status": result.status.value, "replayed": result.replayed,
                          "output": result.output, "requests": provider.requests}}))
        """
    )
    child = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    report = json.loads(child.stdout)

    assert report == {
        "status": "CONFIRMED",
        "replayed": True,
        "output": first.output,
        "requests": 0,
    }
    assert provider.committed() == 1


def test_pending_provider_keeps_the_operation_unknown_and_never_resends(ledger):
    """With deadline=0 a PENDING probe leaves OUTCOME_UNKNOWN; later calls re-probe, no resend."""
    provider = FakePaymentProvider(
        idempotency_guaranteed=False, faults=FaultPlan([Fault.PENDING], pending_probes=2)
    )
    executor = EffectExecutor(ledger, deadline=0)
    contract = capture_contract(provider)

    first = executor.execute(contract, ARGS, provider.handler)
    second = executor.execute(contract, ARGS, provider.handler)
    assert (first.status, second.status) == (EffectStatus.OUTCOME_UNKNOWN,) * 2
    assert provider.committed() == 0

    third = executor.execute(contract, ARGS, provider.handler)
    assert third.status is EffectStatus.CONFIRMED
    assert provider.requests == 1
    assert provider.committed() == 1


def test_rejected_is_terminal_and_replayed(ledger):
    """A handler's EffectRejected is REJECTED, replayed later without a dispatch."""
    calls = []

    def decline(arguments, *, idempotency_key):
        calls.append(idempotency_key)
        raise EffectRejected("card declined", evidence={"code": "card_declined"})

    executor = EffectExecutor(ledger)
    contract = capture_contract(None, probe=False)
    first = executor.execute(contract, ARGS, decline)
    second = executor.execute(contract, ARGS, decline)

    assert first.status is EffectStatus.REJECTED
    assert first.reason == "card declined"
    assert first.evidence == {"code": "card_declined"}
    assert second.status is EffectStatus.REJECTED
    assert second.replayed
    assert calls == [KEY]


def test_false_postcondition_is_never_confirmed(ledger):
    """Handler and probe outputs both failing the postcondition: quarantined, not confirmed."""
    provider = FakePaymentProvider(idempotency_guaranteed=False)
    contract = capture_contract(provider, postcondition=lambda out: out["status"] == "refunded")

    result = EffectExecutor(ledger).execute(contract, ARGS, provider.handler)

    assert result.status is EffectStatus.QUARANTINED
    assert "postcondition" in (result.reason or "")
    assert ledger.get(OPERATION).output_json is None
    assert provider.requests == 1
    assert provider.committed() == 1


def test_a_probe_that_raises_counts_as_unknown_with_the_error_as_evidence(ledger):
    """A probe exception is UNKNOWN evidence; without a guarantee the operation is quarantined."""
    provider = FakePaymentProvider(idempotency_guaranteed=False, faults=FaultPlan([Fault.LOSE_ACK]))

    def broken_probe(arguments, *, idempotency_key):
        raise ConnectionError("lookup service down")

    result = EffectExecutor(ledger).execute(
        capture_contract(provider, probe=broken_probe), ARGS, provider.handler
    )

    assert result.status is EffectStatus.QUARANTINED
    assert result.evidence["probe"] == "UNKNOWN"
    assert "lookup service down" in result.evidence["probe_evidence"]["probe_error"]
    assert provider.requests == 1
    assert provider.committed() == 1


def test_a_probe_returning_the_wrong_type_counts_as_unknown(ledger):
    """A probe that returns something other than OutcomeProbeResult cannot confirm anything."""
    provider = FakePaymentProvider(idempotency_guaranteed=False, faults=FaultPlan([Fault.LOSE_ACK]))
    result = EffectExecutor(ledger).execute(
        capture_contract(provider, probe=lambda arguments, *, idempotency_key: True),
        ARGS,
        provider.handler,
    )
    assert result.status is EffectStatus.QUARANTINED
    assert "not OutcomeProbeResult" in result.evidence["probe_evidence"]["error"]
    assert provider.committed() == 1


def test_max_attempts_bounds_retries_even_on_authoritative_not_committed(ledger):
    """Every attempt fails before commit: exactly max_attempts requests, then quarantine."""
    provider = FakePaymentProvider(
        idempotency_guaranteed=False, faults=FaultPlan([Fault.FAIL_BEFORE_COMMIT] * 5)
    )
    executor = EffectExecutor(ledger)
    contract = capture_contract(provider, max_attempts=3)

    result = executor.execute(contract, ARGS, provider.handler)
    again = executor.execute(contract, ARGS, provider.handler)

    assert result.status is EffectStatus.QUARANTINED
    assert result.attempts == 3
    assert "no attempts are left" in (result.reason or "")
    assert again.status is EffectStatus.QUARANTINED
    assert provider.requests == 3
    assert provider.committed() == 0


def test_guaranteed_idempotency_resends_an_unknown_outcome_with_the_same_key(ledger):
    """No probe, but a documented key guarantee: the resend reuses the key; one effect."""
    provider = FakePaymentProvider(idempotency_guaranteed=True, faults=FaultPlan([Fault.LOSE_ACK]))
    keys = []

    def handler(arguments, *, idempotency_key):
        keys.append(idempotency_key)
        return provider.handler(arguments, idempotency_key=idempotency_key)

    result = EffectExecutor(ledger).execute(
        capture_contract(provider, guaranteed=True, probe=False), ARGS, handler
    )

    assert result.status is EffectStatus.CONFIRMED
    assert keys == [KEY, KEY]
    assert result.output["id"] == "cap_000001"
    assert provider.committed() == 1


def _abandoned_claim(ledger, clock) -> None:
    """Leave the ledger as a process killed right after its claim would: DISPATCHED, owner gone."""
    operation = NewOperation(
        operation_id=OPERATION,
        contract="payments.capture",
        contract_version=1,
        fingerprint=EffectExecutor(ledger)
        ._prepare(capture_contract(None, guaranteed=True, probe=False), ARGS, print, 0.0)
        .fingerprint,
        provider_key=KEY,
        arguments=ARGS,
        attempt_budget=3,
        lease=Lease("dead-token", dead_owner(), 30.0),
    )
    ledger.claim(operation, now=clock())


@pytest.mark.parametrize(
    ("elapsed", "expected", "requests"),
    [(60.0, EffectStatus.CONFIRMED, 1), (7200.0, EffectStatus.QUARANTINED, 0)],
    ids=["within-retention", "past-retention"],
)
def test_key_retention_limits_the_idempotency_guarantee(ledger, clock, elapsed, expected, requests):
    """A resend is covered only while the provider still remembers the key."""
    provider = FakePaymentProvider(idempotency_guaranteed=True, lookup=Lookup.NONE)
    _abandoned_claim(ledger, clock)
    clock.advance(elapsed)
    contract = capture_contract(
        provider, guaranteed=True, probe=False, provider_key_retention_seconds=3600
    )

    result = EffectExecutor(ledger, clock=clock).execute(contract, ARGS, provider.handler)

    assert result.status is expected
    assert provider.requests == requests
    assert provider.committed() == requests


def test_non_json_arguments_are_a_type_error_before_anything_is_recorded(ledger):
    """Arguments that are not JSON-encodable raise TypeError and leave the ledger empty."""
    provider = FakePaymentProvider()
    with pytest.raises(TypeError, match="not JSON-encodable"):
        EffectExecutor(ledger).execute(
            capture_contract(provider), {**ARGS, "amount_cents": {1, 2}}, provider.handler
        )
    assert ledger.list_operations() == []
    assert provider.requests == 0


def test_probe_committed_output_is_what_every_caller_receives(ledger):
    """The output confirmed by the probe is returned now and replayed identically later."""
    provider = FakePaymentProvider(idempotency_guaranteed=False, faults=FaultPlan([Fault.LOSE_ACK]))
    executor = EffectExecutor(ledger)
    contract = capture_contract(provider)
    fresh = executor.execute(contract, ARGS, provider.handler)
    replay = executor.execute(contract, ARGS, provider.handler)
    assert fresh.output == replay.output == provider.effects()[0]["response"]
    assert replay.replayed
    assert not fresh.replayed


class _AsyncProvider:
    """An async handler as a bound method, to refuse like a plain ``async def``."""

    def __init__(self, provider: FakePaymentProvider) -> None:
        self.provider = provider

    async def handler(self, arguments, *, idempotency_key):
        return self.provider.handler(arguments, idempotency_key=idempotency_key)


def test_execute_refuses_every_kind_of_async_handler_before_recording_anything(ledger):
    """A plain, bound or partial async handler is a TypeError from execute(); nothing is sent."""
    provider = FakePaymentProvider()

    async def plain(arguments, *, idempotency_key):
        return provider.handler(arguments, idempotency_key=idempotency_key)

    async def keyed(extra, arguments, *, idempotency_key):
        del extra
        return provider.handler(arguments, idempotency_key=idempotency_key)

    contract = capture_contract(provider)
    for handler in (plain, _AsyncProvider(provider).handler, functools.partial(keyed, 1)):
        with pytest.raises(TypeError, match="coroutine function; use execute_async"):
            EffectExecutor(ledger).execute(contract, ARGS, handler)
    assert ledger.get(OPERATION) is None
    assert provider.requests == 0
    assert provider.committed() == 0
    # A sync handler of the same call still runs: the refusal recorded nothing.
    result = EffectExecutor(ledger).execute(contract, ARGS, provider.handler)
    assert result.status is EffectStatus.CONFIRMED
    assert provider.committed() == 1
