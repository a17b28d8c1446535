"""Scenarios of one uncertain dispatch, settled by a probe, a retry or an operator."""

from __future__ import annotations

from effectguard._contract import UnknownOutcomePolicy
from effectguard._model import EffectStatus
from effectguard.testkit.fakes.base import Lookup
from effectguard.testkit.faults import Fault, FaultPlan
from effectguard.testkit.scenarios._base import ScenarioEnv, scenario
from effectguard.testkit.scenarios._report import ScenarioReport

__all__: list[str] = []

#: Lookups the pending scenario takes: two PENDING answers, then COMMITTED.
_LOOKUPS = 3


@scenario("after-commit-before-ack")
def after_commit_before_ack(env: ScenarioEnv) -> ScenarioReport:
    """The provider commits the capture, then the acknowledgement is lost.

    The provider has no idempotency, so a blind resend would charge twice; its
    lookup is read-your-writes, so the probe can settle the outcome.

    Invariant: the probe finds the capture and the operation is CONFIRMED after
    one attempt, with the provider's own capture as its output; the provider
    holds exactly one capture; a second call replays it without a request.
    """
    provider, contract, arguments = env.payments(
        guaranteed=False, lookup=Lookup.STRONG, faults=FaultPlan({1: Fault.LOSE_ACK})
    )
    ledger = env.open_ledger()
    operation_id = contract.identity(arguments)[0]
    env.require_fresh(ledger, operation_id)
    executor = env.executor(ledger)
    first = executor.execute(contract, arguments, provider.handler)
    requests = provider.requests
    again = executor.execute(contract, arguments, provider.handler)
    effects = provider.effects()
    captured = effects[0]["response"]["id"] if effects else None
    output_id = first.output.get("id") if isinstance(first.output, dict) else None
    return env.report(
        ledger=ledger,
        provider=provider,
        operation_id=operation_id,
        checks=[
            ("the operation is CONFIRMED", first.status is EffectStatus.CONFIRMED),
            ("it took one attempt (nothing was resent)", first.attempts == 1),
            ("the provider holds exactly one capture", provider.committed() == 1),
            ("the confirmed output is the provider's capture", output_id == captured),
            (
                "a second call replays without a request",
                again.replayed and provider.requests == requests,
            ),
        ],
        details={"capture_id": captured, "provider_requests": provider.requests},
    )


@scenario("before-commit")
def before_commit(env: ScenarioEnv) -> ScenarioReport:
    """The request fails before the provider commits anything.

    The client sees an error, which by itself proves nothing; the provider's
    read-your-writes lookup answers "not committed", which does.

    Invariant: the authoritative NOT_COMMITTED lets the executor resend with the
    same key, the operation is CONFIRMED after two attempts, and the provider
    holds exactly one capture.
    """
    provider, contract, arguments = env.payments(
        guaranteed=False,
        lookup=Lookup.STRONG,
        faults=FaultPlan({1: Fault.FAIL_BEFORE_COMMIT}),
    )
    ledger = env.open_ledger()
    operation_id = contract.identity(arguments)[0]
    env.require_fresh(ledger, operation_id)
    result = env.executor(ledger).execute(contract, arguments, provider.handler)
    events = [event.type.value for event in ledger.events(operation_id)]
    return env.report(
        ledger=ledger,
        provider=provider,
        operation_id=operation_id,
        checks=[
            ("the operation is CONFIRMED", result.status is EffectStatus.CONFIRMED),
            ("it was retried once, on the probe's evidence", result.attempts == 2),  # noqa: PLR2004 - the scenario's expected attempt count
            ("the ledger records the retry", "retry" in events),
            ("the provider holds exactly one capture", provider.committed() == 1),
        ],
        details={"provider_requests": provider.requests},
    )


@scenario("timeout-no-probe")
def timeout_no_probe(env: ScenarioEnv) -> ScenarioReport:
    """The acknowledgement is lost and nothing can tell whether the capture happened.

    The provider has no idempotency and no lookup, and the contract declares no
    probe: a resend could charge twice, giving up could leave it uncharged.

    Invariant: the operation is QUARANTINED after one attempt, never resent; a
    later call returns the quarantine without contacting the provider, which
    holds the one capture the first attempt made.
    """
    provider, contract, arguments = env.payments(
        guaranteed=False, lookup=Lookup.NONE, faults=FaultPlan({1: Fault.LOSE_ACK})
    )
    ledger = env.open_ledger()
    operation_id = contract.identity(arguments)[0]
    env.require_fresh(ledger, operation_id)
    executor = env.executor(ledger)
    first = executor.execute(contract, arguments, provider.handler)
    again = executor.execute(contract, arguments, provider.handler)
    return env.report(
        ledger=ledger,
        provider=provider,
        operation_id=operation_id,
        checks=[
            ("the operation is QUARANTINED", first.status is EffectStatus.QUARANTINED),
            ("it was never resent", first.attempts == 1 and provider.requests == 1),
            ("a later call stays QUARANTINED", again.status is EffectStatus.QUARANTINED),
            ("the provider holds the one capture", provider.committed() == 1),
        ],
        details={"reason": first.reason, "provider_requests": provider.requests},
    )


@scenario("pending")
def pending(env: ScenarioEnv) -> ScenarioReport:
    """The provider accepts the capture but reports it pending for two lookups.

    Invariant: while the probe says PENDING the operation is never resent; the
    call probes again after a backoff, without using an attempt, and confirms it
    once the provider has finished; the provider holds exactly one capture.
    """
    provider, contract, arguments = env.payments(
        guaranteed=False,
        lookup=Lookup.STRONG,
        faults=FaultPlan({1: Fault.PENDING}, pending_probes=2),
    )
    ledger = env.open_ledger()
    operation_id = contract.identity(arguments)[0]
    env.require_fresh(ledger, operation_id)
    executor = env.executor(ledger)
    result = executor.execute(contract, arguments, provider.handler)
    return env.report(
        ledger=ledger,
        provider=provider,
        operation_id=operation_id,
        checks=[
            ("the call re-probed until it could confirm", result.confirmed),
            ("the provider was looked up three times", provider.lookups == _LOOKUPS),
            ("it was never resent while pending", provider.requests == 1),
            ("no attempt was used by re-probing", result.attempts == 1),
            ("the provider holds exactly one capture", provider.committed() == 1),
        ],
        details={"statuses": [result.status.value], "lookups": provider.lookups},
    )


@scenario("eventual-read")
def eventual_read(env: ScenarioEnv) -> ScenarioReport:
    """The acknowledgement is lost and the lookup is eventually consistent.

    The capture becomes visible only on the third read, so the first lookups
    answer "not found", which proves nothing. The contract keeps such outcomes
    unknown rather than quarantining them.

    Invariant: an eventually consistent "not found" never causes a resend; the
    operation stays OUTCOME_UNKNOWN until the capture is visible, then is
    CONFIRMED; the provider holds exactly one capture.
    """
    provider, contract, arguments = env.payments(
        guaranteed=False,
        lookup=Lookup.EVENTUAL,
        faults=FaultPlan({1: Fault.LOSE_ACK}),
        unknown_outcome=UnknownOutcomePolicy.KEEP_UNKNOWN,
    )
    provider.visible_after_reads = 2
    ledger = env.open_ledger()
    operation_id = contract.identity(arguments)[0]
    env.require_fresh(ledger, operation_id)
    executor = env.executor(ledger)
    statuses = [executor.execute(contract, arguments, provider.handler).status for _ in range(3)]
    unknown = EffectStatus.OUTCOME_UNKNOWN
    return env.report(
        ledger=ledger,
        provider=provider,
        operation_id=operation_id,
        checks=[
            ("the calls before visibility leave it OUTCOME_UNKNOWN", statuses[:2] == [unknown] * 2),
            ("the call after visibility confirms it", statuses[2] is EffectStatus.CONFIRMED),
            ("it was never resent on a 'not found'", provider.requests == 1),
            ("the provider holds exactly one capture", provider.committed() == 1),
        ],
        details={"statuses": [status.value for status in statuses]},
    )
