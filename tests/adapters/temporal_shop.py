"""The Temporal adapter's test world: a payment provider, ``@effect`` captures, activities.

Shared by the tests and by the child process that runs one attempt of an
activity (:mod:`temporal_child`), so both compute the same contracts and
operation ids. Attempts run under ``temporalio.testing.ActivityEnvironment``,
whose ``Info`` the test sets: the attempt number, the workflow id, its run id
and the activity id, as the server would send them.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from effectguard import (
    INJECTED,
    EffectExecutor,
    UnknownOutcomePolicy,
    call_scoped,
    effect,
    open_ledger,
)
from effectguard.adapters.temporal import effect_activity
from effectguard.testkit import FakePaymentProvider, FaultPlan, Lookup


def attempt(
    fn: Callable[..., Any],
    *args: Any,
    number: int = 1,
    workflow_id: str = "order-42",
    run_id: str = "run-1",
    activity_id: str = "1",
    activity_type: str = "charge",
) -> Any:
    """Run one attempt of the activity ``fn`` as a worker would receive it; its return value."""
    env = ActivityEnvironment()
    env.info = dataclasses.replace(
        env.info,
        attempt=number,
        workflow_id=workflow_id,
        workflow_run_id=run_id,
        activity_id=activity_id,
        activity_type=activity_type,
    )
    return env.run(fn, *args)


@dataclasses.dataclass
class Retries:
    """What driving an activity's retries came to: the output, or the error that stopped them."""

    output: Any = None
    error: ApplicationError | None = None
    #: One entry per attempt: ``"ok"``, or the ApplicationError's type (``"EffectOutcomeUnknown"``).
    attempts: list[str] = dataclasses.field(default_factory=list)
    #: The ``next_retry_delay`` each retryable error asked for, in seconds.
    delays: list[float] = dataclasses.field(default_factory=list)


def drive(fn: Callable[..., Any], *args: Any, maximum_attempts: int = 5, **info: Any) -> Retries:
    """Retry ``fn`` as Temporal's retry policy would: a rising attempt until it returns.

    A non-retryable ``ApplicationError`` stops the retries, as it stops the
    server's. The delays are recorded, not slept: the server does the waiting.
    """
    retries = Retries()
    for number in range(1, maximum_attempts + 1):
        try:
            retries.output = attempt(fn, *args, number=number, **info)
        except ApplicationError as exc:
            retries.attempts.append(str(exc.type))
            retries.error = exc
            if exc.non_retryable:
                return retries
            if exc.next_retry_delay is not None:
                retries.delays.append(exc.next_retry_delay.total_seconds())
            continue
        retries.attempts.append("ok")
        retries.error = None
        return retries
    return retries


class Shop:
    """A provider that counts captures, and activities whose captures are ``@effect`` tools.

    ``hold`` makes the first capture in ``directory`` write ``committed`` once
    the provider has committed and then wait, still inside the activity: for
    the test to kill the process (``"kill"``), or until the test creates the
    file ``gate`` (``"gate"``).
    """

    def __init__(
        self,
        ledger: str,
        directory: Path,
        *,
        faults: FaultPlan | None = None,
        lookup: Lookup = Lookup.STRONG,
        visible_after_reads: int = 0,
        hold: str | None = None,
    ) -> None:
        self.directory = directory
        self.payments = FakePaymentProvider(
            idempotency_guaranteed=False,
            lookup=lookup,
            visible_after_reads=visible_after_reads,
            faults=faults,
            path=directory / "payments.db",
            late_commit_after=30.0,
        )
        # wait_for_peer=0: a held lease is the activity's to report (a retryable error), not
        # something to wait out inside the attempt. A short deadline keeps re-probes in-call brief.
        self.executor = EffectExecutor(
            open_ledger(ledger), wait_for_peer=0, deadline=0.2, retry_wait_initial=0.01
        )
        self.hold = hold
        payments = self.payments

        def probe(invoice_id: str, amount_cents: int, *, idempotency_key: str) -> Any:
            return payments.probe({"invoice_id": invoice_id}, idempotency_key=idempotency_key)

        def capture(
            invoice_id: str, amount_cents: int, *, idempotency_key: str = INJECTED
        ) -> dict[str, Any]:
            output = payments.capture(invoice_id, amount_cents, idempotency_key=idempotency_key)
            self._hold_once()
            return output

        self.capture = effect(
            operation_id=call_scoped("capture"),
            probe=probe,
            unknown_outcome=UnknownOutcomePolicy.KEEP_UNKNOWN,
            name="shop.capture",
            executor=self.executor,
        )(capture)
        self.capture_unprobed = effect(
            operation_id=call_scoped("capture-unprobed"),
            name="shop.capture_unprobed",
            executor=self.executor,
        )(capture)

        @activity.defn(name="charge")
        @effect_activity
        def charge(invoice_id: str, amount_cents: int) -> dict[str, Any]:
            output: dict[str, Any] = self.capture(invoice_id=invoice_id, amount_cents=amount_cents)
            return output

        @activity.defn(name="charge_unprobed")
        @effect_activity
        def charge_unprobed(invoice_id: str, amount_cents: int) -> dict[str, Any]:
            output: dict[str, Any] = self.capture_unprobed(
                invoice_id=invoice_id, amount_cents=amount_cents
            )
            return output

        self.charge = charge
        self.charge_unprobed = charge_unprobed

    def _hold_once(self) -> None:
        if not self.hold:
            return
        marker = self.directory / "committed"
        if marker.exists():
            return
        marker.write_text(str(os.getpid()))
        gate = self.directory / "gate"
        # Killed here by the test ("kill"), or let go once the gate exists ("gate").
        while self.hold == "kill" or not gate.exists():
            time.sleep(0.05)

    def close(self) -> None:
        """Close the ledger and the provider."""
        self.executor.ledger.close()
        self.payments.close()
