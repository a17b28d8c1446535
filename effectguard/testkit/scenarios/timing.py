"""Scenarios where time passes: a handler past its deadline, a lease past its expiry."""

from __future__ import annotations

import threading
from typing import Any

from effectguard._contract import UnknownOutcomePolicy
from effectguard._model import EffectResult, EffectStatus
from effectguard.testkit.fakes.base import Lookup
from effectguard.testkit.faults import Fault, FaultPlan
from effectguard.testkit.scenarios._base import WAIT_SECONDS, ScenarioEnv, scenario, wait_for
from effectguard.testkit.scenarios._report import ScenarioReport

__all__: list[str] = []

#: Long enough for a fast probe on a loaded machine, short enough to keep the scenario quick.
_HANDLER_TIMEOUT = 0.2
_LEASE_SECONDS = 30.0


@scenario("late-commit-after-timeout")
def late_commit_after_timeout(env: ScenarioEnv) -> ScenarioReport:
    """The handler passes its deadline while its request is still in flight, then commits.

    A local deadline is not cancellation: the abandoned handler may still
    send. The provider has no idempotency, and its lookup cannot yet see the
    capture, so "not found" is true now but may not stay true.

    Invariant: while the late handler may still send (overlap risk) the
    operation is not confirmed and is never resent, even though the probe says
    NOT_COMMITTED; the late return confirms it with the handler's own output;
    the provider holds exactly one capture.
    """
    provider, contract, arguments = env.payments(
        guaranteed=False,
        lookup=Lookup.STRONG,
        faults=FaultPlan({1: Fault.LATE_COMMIT}),
        handler_timeout=_HANDLER_TIMEOUT,
        unknown_outcome=UnknownOutcomePolicy.KEEP_UNKNOWN,
    )
    ledger = env.open_ledger()
    operation_id = contract.identity(arguments)[0]
    env.require_fresh(ledger, operation_id)
    executor = env.executor(ledger)
    first = executor.execute(contract, arguments, provider.handler)
    second = executor.execute(contract, arguments, provider.handler)
    requests_while_late = provider.requests
    still_held = provider.held == 1
    provider.release_late()

    def confirmed() -> bool:
        record = ledger.get(operation_id)
        return record is not None and record.status is EffectStatus.CONFIRMED

    late_confirmed = wait_for(confirmed)
    later = executor.execute(contract, arguments, provider.handler)
    effects = provider.effects()
    captured = effects[0]["response"] if effects else None
    events = [event.type.value for event in ledger.events(operation_id)]
    return env.report(
        ledger=ledger,
        provider=provider,
        operation_id=operation_id,
        checks=[
            ("the handler was still in flight after two calls", still_held),
            (
                "neither call confirmed or resent it",
                not first.confirmed and not second.confirmed and requests_while_late == 1,
            ),
            ("the late return confirmed it", late_confirmed and "late_result" in events),
            ("a later call replays the late handler's output", later.output == captured),
            ("the provider holds exactly one capture", provider.committed() == 1),
        ],
        details={
            "statuses_while_late": [first.status.value, second.status.value],
            "reason_while_late": second.reason,
        },
    )


@scenario("lease-expiry")
def lease_expiry(env: ScenarioEnv) -> ScenarioReport:
    """A worker stalls inside the provider until its lease expires; another worker arrives.

    The clock is moved by hand past the lease, so nothing sleeps. The first
    worker is alive (it may still send), so its expiry proves nothing about its
    request, and the provider has no idempotency.

    Invariant: the second worker takes the operation over only after the lease
    expired, records the overlap risk and does not resend; when the stalled
    worker's request commits, its late return confirms the operation; the
    provider holds exactly one capture.
    """
    provider, contract, arguments = env.payments(
        guaranteed=False,
        lookup=Lookup.STRONG,
        faults=FaultPlan({1: Fault.LATE_COMMIT}),
        lease_seconds=_LEASE_SECONDS,
    )
    ledger = env.open_ledger()
    operation_id = contract.identity(arguments)[0]
    env.require_fresh(ledger, operation_id)
    executor = env.executor(ledger)
    stalled: list[EffectResult[Any]] = []
    worker = threading.Thread(
        target=lambda: stalled.append(executor.execute(contract, arguments, provider.handler))
    )
    worker.start()
    in_flight = provider.wait_until_held(1, WAIT_SECONDS)
    before_expiry = executor.execute(contract, arguments, provider.handler)
    env.clock.advance(_LEASE_SECONDS + 1)
    takeover = executor.execute(contract, arguments, provider.handler)
    requests_after_takeover = provider.requests
    provider.release_late()
    worker.join(WAIT_SECONDS)
    later = executor.execute(contract, arguments, provider.handler)
    events = ledger.events(operation_id)
    expired = [event for event in events if event.type.value == "lease_expired"]
    overlap_recorded = bool(expired) and expired[0].evidence.get("overlap_risk") is True
    return env.report(
        ledger=ledger,
        provider=provider,
        operation_id=operation_id,
        checks=[
            ("the first worker was inside the provider", in_flight),
            (
                "before expiry another caller is told it is in progress",
                before_expiry.status is EffectStatus.DISPATCHED,
            ),
            ("after expiry the takeover records the overlap risk", overlap_recorded),
            (
                "the takeover did not resend",
                not takeover.confirmed and requests_after_takeover == 1,
            ),
            (
                "the stalled worker's late return confirmed it",
                not worker.is_alive() and bool(stalled) and stalled[0].confirmed,
            ),
            ("a later call replays it", later.replayed and later.confirmed),
            ("the provider holds exactly one capture", provider.committed() == 1),
        ],
        details={"takeover_status": takeover.status.value, "takeover_reason": takeover.reason},
    )
