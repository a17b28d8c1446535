"""A Temporal activity captures a payment, the acknowledgement is lost, and Temporal retries.

Needs ``pip install 'effectguard[temporal]'``. Offline: no Temporal server
runs (``temporalio.testing.ActivityEnvironment`` runs the activity with the
SDK's own activity context), this script plays the server's retries, and a
fake provider stands in for your payment API.

What happens: attempt 1 of ``charge_invoice`` captures; the provider commits
but the answer is lost, and its lookup does not see the capture yet, so the
outcome is unknown. The activity raises a *retryable* ``ApplicationError``
with a ``next_retry_delay`` (it does not resend, and does not give up).
Attempt 2, same workflow id and activity id, reconciles the operation with the
provider's lookup, finds the capture and returns it without sending. Then
the workflow is reset (a new run id): its activity replays the stored capture.
The provider holds exactly one payment; the script exits non-zero otherwise.

To use it with your own stack:

- ``capture``: call your payment API, forwarding ``idempotency_key``, and
  give ``probe=`` its lookup.
- Register the activity on a real worker, with the interceptor if you prefer
  it to the decorator: ``Worker(client, task_queue="payments",
  activities=[charge_invoice], interceptors=[EffectInterceptor()],
  activity_executor=ThreadPoolExecutor(8))``.
- Give the workflow's ``execute_activity`` a retry policy that leaves room for
  a reconcile (see docs/engines.md): the non-retryable outcomes are marked so
  by the activity itself.

Run: ``python recipes/temporal_payments.py``.
"""

from __future__ import annotations

import dataclasses
import sys
import tempfile
from pathlib import Path
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from effectguard import (
    INJECTED,
    EffectExecutor,
    OutcomeProbeResult,
    SQLiteEffectLedger,
    UnknownOutcomePolicy,
    call_scoped,
    effect,
)
from effectguard.adapters.temporal import effect_activity
from effectguard.testkit import FakePaymentProvider, Fault, FaultPlan, Lookup


def run_attempt(fn: Any, *args: Any, attempt: int, run_id: str) -> Any:
    """One attempt of activity 1 of workflow ``order-1042``, as the server would start it."""
    env = ActivityEnvironment()
    env.info = dataclasses.replace(
        env.info,
        activity_id="1",
        activity_type="charge_invoice",
        attempt=attempt,
        workflow_id="order-1042",
        workflow_run_id=run_id,
    )
    return env.run(fn, *args)


def main(workdir: Path) -> int:
    """Play the retries; 0 when the provider holds exactly one capture."""
    # The answer to attempt 1 is lost, and the lookup sees a capture only from its second read.
    provider = FakePaymentProvider(
        idempotency_guaranteed=False,
        lookup=Lookup.EVENTUAL,
        visible_after_reads=1,
        faults=FaultPlan({1: Fault.LOSE_ACK}),
    )
    executor = EffectExecutor(SQLiteEffectLedger(workdir / "ledger.db"), wait_for_peer=0)

    def find_capture(
        invoice_id: str, amount_cents: int, *, idempotency_key: str
    ) -> OutcomeProbeResult:
        del amount_cents  # the lookup is by idempotency key
        return provider.probe({"invoice_id": invoice_id}, idempotency_key=idempotency_key)

    # call_scoped: the operation id is capture:temporal:<namespace>:<workflow id>:<activity id>.
    # KEEP_UNKNOWN: an outcome the lookup cannot settle yet is retried by Temporal, not
    # quarantined; a later attempt probes again.
    @effect(
        operation_id=call_scoped("capture"),
        probe=find_capture,
        unknown_outcome=UnknownOutcomePolicy.KEEP_UNKNOWN,
        executor=executor,
    )
    def capture(
        invoice_id: str, amount_cents: int, *, idempotency_key: str = INJECTED
    ) -> dict[str, Any]:
        return provider.capture(invoice_id, amount_cents, idempotency_key=idempotency_key)

    @activity.defn
    @effect_activity
    def charge_invoice(invoice_id: str, amount_cents: int) -> dict[str, Any]:
        output: dict[str, Any] = capture(invoice_id=invoice_id, amount_cents=amount_cents)
        return output

    result: dict[str, Any] | None = None
    for attempt in range(1, 6):
        try:
            result = run_attempt(charge_invoice, "INV-1042", 1999, attempt=attempt, run_id="run-1")
        except ApplicationError as exc:
            if exc.non_retryable:
                print(f"attempt {attempt}: failed for good ({exc.type}): {exc.message}")
                return 1
            delay = exc.next_retry_delay.total_seconds() if exc.next_retry_delay else 0.0
            print(f"attempt {attempt}: {exc.type}, Temporal retries in {delay:.1f} s")
            continue
        print(f"attempt {attempt}: captured {result['id']}")
        break
    if result is None:
        print("no attempt returned the capture")
        return 1

    # A reset starts a new run of the same workflow: activity 1 is the same operation.
    replayed = run_attempt(charge_invoice, "INV-1042", 1999, attempt=1, run_id="run-2")
    print(f"after a reset (run-2): {replayed['id']}, replayed from the ledger")

    captures = provider.committed()
    print(f"the provider holds {captures} capture(s); it received {provider.requests} request(s)")
    executor.ledger.close()
    return 0 if captures == 1 and replayed == result else 1


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as directory:
        sys.exit(main(Path(directory)))
