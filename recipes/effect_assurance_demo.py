"""An agent pays an invoice, the acknowledgement is lost, and the run waits instead of lying.

To use this with your own provider, change four things:

- ``Payments.capture_payment``: call your payment API and forward
  ``idempotency_key`` to it (Stripe: the ``Idempotency-Key`` header).
- ``idempotency_guaranteed=True``: keep it only if your provider documents that
  a resend with the same key never charges twice, and set
  ``provider_key_retention`` to how long it remembers a key (Stripe: 24 h).
- ``Payments.find_capture``: look the capture up by key or metadata. Return
  ``not_committed`` only if the lookup is strongly consistent; ``pending`` while
  the provider is still processing; ``unknown`` when it cannot tell.
- ``ScriptedModel``: replace it with an adapter for your model API, any object
  with ``next_turn(messages, tools) -> ModelTurn``.

Keep the ledger and the checkpoint store on a local disk (or use a PostgreSQL
ledger across hosts). Run: ``python recipes/effect_assurance_demo.py``; it
exits non-zero unless the provider holds exactly one committed payment.
"""

from __future__ import annotations

import logging
import sys
import tempfile
from pathlib import Path
from typing import Any

from effectguard import (
    INJECTED,
    EffectExecutor,
    OutcomeProbeResult,
    SQLiteEffectLedger,
    effect,
)
from effectguard.runtime import (
    AgentRuntime,
    RunResult,
    RunState,
    ScriptedModel,
    SQLiteCheckpointStore,
    ToolCall,
    ToolRegistry,
)
from effectguard.testkit import FakePaymentProvider, Fault, FaultPlan

RUN_ID = "pay-INV-1042"
OPERATION = "invoice:INV-1042:capture"


class Payments:
    """The payment tools the agent may use, bound to one provider client."""

    def __init__(self, provider: FakePaymentProvider) -> None:
        self.provider = provider

    def find_capture(
        self, invoice_id: str, amount_cents: int, *, idempotency_key: str
    ) -> OutcomeProbeResult:
        """Ask the provider whether the capture sent with this key exists."""
        del amount_cents  # the key identifies the request
        return self.provider.probe({"invoice_id": invoice_id}, idempotency_key=idempotency_key)

    @effect(
        operation_id="invoice:{invoice_id}:capture",
        idempotency_key="capture:{invoice_id}",
        idempotency_guaranteed=True,
        probe=find_capture,
        name="payments.capture",
    )
    def capture_payment(
        self, invoice_id: str, amount_cents: int, *, idempotency_key: str = INJECTED
    ) -> dict[str, Any]:
        """Capture the payment of an invoice.

        Args:
            invoice_id: The invoice to charge, for example "INV-1042".
            amount_cents: The amount to capture, in cents.
            idempotency_key: Supplied by the executor, the same for every attempt
                (never shown to the model).
        """
        return self.provider.capture(invoice_id, amount_cents, idempotency_key=idempotency_key)


def script() -> ScriptedModel:
    """The model's side of the conversation: capture, then claim success."""
    return ScriptedModel(
        [
            ToolCall("call-1", "capture_payment", {"invoice_id": "INV-1042", "amount_cents": 1999}),
            "payment done",
        ]
    )


def open_runtime(workdir: Path, provider: FakePaymentProvider) -> tuple[AgentRuntime, Any]:
    """Build everything a process needs from the files in ``workdir``."""
    ledger = SQLiteEffectLedger(workdir / "ledger.db")
    checkpoints = SQLiteCheckpointStore(workdir / "runs.db")
    runtime = AgentRuntime(
        script(),
        ToolRegistry.discover(Payments(provider)),
        # deadline=0: a tool call never waits to re-probe, so "still processing" makes the
        # run wait (by default a call re-probes for a few seconds before it gives up).
        EffectExecutor(ledger, deadline=0),
        checkpoints=checkpoints,
    )

    def close() -> None:
        checkpoints.close()
        ledger.close()

    return runtime, close


def say(text: str) -> None:
    """Print one line of the narrative."""
    print(f"  {text}")


def describe(result: RunResult) -> str:
    """One line about a run result."""
    if result.state is RunState.WAITING:
        return f"WAITING on {', '.join(map(str, result.waiting_on))}"
    if result.state is RunState.COMPLETED:
        return f"COMPLETED with final answer {result.final!r}"
    return f"{result.state.value}: {result.error}"


def main(workdir: Path) -> int:
    """Run the story; return the exit status."""
    # The provider commits the first capture, loses its acknowledgement, and its
    # lookup reports the capture as still processing once before it is settled.
    faults = FaultPlan({1: Fault.PENDING}, pending_probes=1)
    provider = FakePaymentProvider(path=workdir / "provider.db", faults=faults)

    print("1. The agent asks to capture 19.99 for INV-1042.")
    runtime, close = open_runtime(workdir, provider)
    first = runtime.start(RUN_ID, "Please pay invoice INV-1042 (19.99).")
    say("the provider committed the capture, but the acknowledgement was lost;")
    say("the probe says the provider is still processing it.")
    say(f"run: {describe(first)}")
    say(f"model turns taken: {first.steps}; its scripted 'payment done' was not accepted")
    close()
    if first.state is not RunState.WAITING or first.final is not None:
        print("FAIL: a run with a capture in doubt must wait, not complete")
        return 1

    print("2. Later, fresh handles on the same files (as a restarted process) resume the run.")
    runtime, close = open_runtime(workdir, provider)
    second = runtime.resume(RUN_ID)
    events = [event.type.value for event in runtime.effect_executor.ledger.events(OPERATION)]
    say("the ledger re-issued the same operation and reconciled it with the probe;")
    say(f"ledger events: {' -> '.join(events)}")
    say(f"run: {describe(second)}")
    close()

    committed = provider.committed()
    print(f"3. The provider holds {committed} committed payment(s).")
    if second.state is not RunState.COMPLETED or committed != 1:
        print("FAIL: expected a completed run and exactly one committed payment")
        return 1
    print("OK: one payment, and the run completed only once it was confirmed.")
    return 0


if __name__ == "__main__":
    # effectguard installs no log handler; this one prints each event it logs as one short line.
    logging.basicConfig(level=logging.WARNING, format="  log: %(levelname)s %(message).100s")
    logging.getLogger("effectguard").setLevel(logging.INFO)
    with tempfile.TemporaryDirectory(prefix="effectguard-demo-") as directory:
        sys.exit(main(Path(directory)))
