"""The agent runtime under an approval: the run WAITS on the request, and resumes once approved."""

from __future__ import annotations

from typing import Any

from effectguard import INJECTED, EffectExecutor, EffectLedger, EffectStatus, effect
from effectguard.runtime import (
    AgentRuntime,
    InMemoryCheckpointStore,
    RunState,
    ScriptedModel,
    ToolCall,
    describe_run,
)
from effectguard.testkit import FakePaymentProvider

OP = "refund:INV-9"
AUDIT = {"actor": "alice", "reason": "the customer asked", "evidence_reference": "T-1"}


def _refund_tool(provider: FakePaymentProvider) -> Any:
    @effect(
        name="billing.refund",
        operation_id="refund:{invoice_id}",
        idempotency_key="refund:{invoice_id}",
        requires_approval=True,
    )
    def refund(invoice_id: str, amount_cents: int, *, idempotency_key: str = INJECTED) -> dict:
        """Refund an invoice.

        Args:
            invoice_id: The invoice to refund.
            amount_cents: How much, in cents.
            idempotency_key: Supplied by the executor, the same for every attempt.
        """
        return provider.capture(invoice_id, -amount_cents, idempotency_key=idempotency_key)

    return refund


def _runtime(ledger: EffectLedger, provider: FakePaymentProvider, store: Any) -> AgentRuntime:
    model = ScriptedModel(
        [ToolCall("call-1", "refund", {"invoice_id": "INV-9", "amount_cents": 25_000}), "refunded"]
    )
    return AgentRuntime(model, [_refund_tool(provider)], EffectExecutor(ledger), checkpoints=store)


def test_a_run_waits_on_the_approval_and_resumes_with_one_send(ledger: EffectLedger) -> None:
    """WAITING on the operation; a resume before the approval still waits; after it, one send."""
    provider = FakePaymentProvider(idempotency_guaranteed=False)
    store = InMemoryCheckpointStore()
    runtime = _runtime(ledger, provider, store)

    first = runtime.start("run-1", "refund INV-9")
    assert first.state is RunState.WAITING
    assert first.waiting_on == (OP,)
    assert provider.committed() == 0
    view = describe_run(store, "run-1", ledger)
    assert [(op.operation_id, op.status, op.blocks) for op in view.operations] == [
        (OP, EffectStatus.AWAITING_APPROVAL, True)
    ]
    early = runtime.resume("run-1")
    assert early.state is RunState.WAITING
    assert provider.committed() == 0

    ledger.approve(OP, **AUDIT)  # type: ignore[attr-defined]
    done = runtime.resume("run-1")

    assert done.state is RunState.COMPLETED
    assert done.final == "refunded"
    assert provider.committed() == 1
    again = runtime.resume("run-1")
    assert again.state is RunState.COMPLETED
    assert provider.committed() == 1


def test_a_denied_request_completes_the_run_with_the_refusal_and_no_send(
    ledger: EffectLedger,
) -> None:
    """Denied: the model is told the call was rejected; nothing reaches the provider."""
    provider = FakePaymentProvider(idempotency_guaranteed=False)
    store = InMemoryCheckpointStore()
    runtime = _runtime(ledger, provider, store)
    assert runtime.start("run-1", "refund INV-9").state is RunState.WAITING

    ledger.deny(OP, **AUDIT)  # type: ignore[attr-defined]
    done = runtime.resume("run-1")

    assert done.state is RunState.COMPLETED
    tool_answers = [m for m in store.load("run-1").messages if m.get("role") == "tool"]
    assert "denied by alice" in str(tool_answers[-1]["content"])
    assert provider.committed() == 0
