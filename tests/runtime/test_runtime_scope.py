"""The runtime runs every tool call in a call scope (run id, tool call id) that survives resume."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from effectguard import INJECTED, CallScope, EffectExecutor, EffectStatus, call_scoped, effect
from effectguard.runtime import (
    AgentRuntime,
    RunState,
    ScriptedModel,
    SQLiteCheckpointStore,
    ToolCall,
)
from effectguard.testkit import FakePaymentProvider, Fault, FaultPlan

RUN = "run-1"
OPERATION = "charge:run-1:call-1"
CHARGE = ToolCall("call-1", "charge", {"customer_id": "cus_1", "amount_cents": 500})


def charge_tool(provider: FakePaymentProvider) -> Any:
    """A charge whose arguments hold no business key: its operation id comes from the scope."""

    def find(customer_id: str, amount_cents: int, *, idempotency_key: str) -> Any:
        return provider.probe({"invoice_id": customer_id}, idempotency_key=idempotency_key)

    @effect(operation_id=call_scoped("charge"), probe=find, idempotency_guaranteed=True)
    def charge(customer_id: str, amount_cents: int, *, idempotency_key: str = INJECTED) -> Any:
        """Charge a customer.

        Args:
            customer_id: Who pays.
            amount_cents: How much, in cents.
            idempotency_key: Supplied by the executor.
        """
        return provider.capture(customer_id, amount_cents, idempotency_key=idempotency_key)

    return charge


def pending_provider() -> FakePaymentProvider:
    """A provider whose first capture is still pending at the first lookup."""
    return FakePaymentProvider(faults=FaultPlan({1: Fault.PENDING}, pending_probes=1))


def new_runtime(provider: FakePaymentProvider, executor: EffectExecutor, path: Any) -> AgentRuntime:
    """A fresh runtime (as after a restart) over the checkpoint file at ``path``."""
    model = ScriptedModel([CHARGE, "charged"])
    return AgentRuntime(
        model, [charge_tool(provider)], executor, checkpoints=SQLiteCheckpointStore(path)
    )


def test_a_resumed_run_reuses_the_scoped_operation_id_and_charges_once(executor, tmp_path):
    """WAITING on charge:run-1:call-1, resumed in a new runtime: same id, one committed charge."""
    provider = pending_provider()
    first = new_runtime(provider, executor, tmp_path / "runs.db")
    waiting = first.start(RUN, "charge cus_1")
    assert waiting.state is RunState.WAITING
    assert waiting.waiting_on == (OPERATION,)
    first.checkpoints.close()  # type: ignore[attr-defined]

    second = new_runtime(provider, executor, tmp_path / "runs.db")
    done = second.resume(RUN)
    assert done.state is RunState.COMPLETED
    assert done.effects == {OPERATION: EffectStatus.CONFIRMED}
    assert provider.committed() == 1
    assert provider.committed(OPERATION) == 1
    assert provider.requests == 1  # the resume reconciled, it did not send again
    second.checkpoints.close()  # type: ignore[attr-defined]


def test_an_async_resumed_run_reuses_the_scoped_operation_id(executor, tmp_path):
    """The same through start_async / resume_async."""
    provider = pending_provider()

    async def main() -> None:
        first = new_runtime(provider, executor, tmp_path / "runs.db")
        waiting = await first.start_async(RUN, "charge cus_1")
        assert waiting.waiting_on == (OPERATION,)
        first.checkpoints.close()  # type: ignore[attr-defined]
        second = new_runtime(provider, executor, tmp_path / "runs.db")
        done = await second.resume_async(RUN)
        assert done.effects == {OPERATION: EffectStatus.CONFIRMED}
        second.checkpoints.close()  # type: ignore[attr-defined]

    asyncio.run(main())
    assert provider.committed() == 1
    assert provider.requests == 1


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_every_tool_call_runs_in_its_scope_and_a_reused_call_id_is_told_apart(
    executor, provider, driver
):
    """A plain tool sees the scope; a call id the model reuses in a later turn gets "#2"."""
    seen: list[CallScope | None] = []

    def look(customer_id: str) -> str:
        """Look a customer up."""
        seen.append(CallScope.current())
        return customer_id

    model = ScriptedModel(
        [
            ToolCall("call-1", "look", {"customer_id": "cus_1"}),
            CHARGE,
            ToolCall("call-1", "charge", {"customer_id": "cus_1", "amount_cents": 500}),
            "charged twice",
        ]
    )
    runtime = AgentRuntime(model, [look, charge_tool(provider)], executor)
    if driver == "sync":
        result = runtime.start(RUN, "charge cus_1 twice")
    else:
        result = asyncio.run(runtime.start_async(RUN, "charge cus_1 twice"))
    assert result.state is RunState.COMPLETED
    assert seen == [CallScope(RUN, "call-1")]
    assert set(result.effects) == {"charge:run-1:call-1#2", "charge:run-1:call-1#3"}
    assert provider.committed() == 2  # two charges the model asked for, neither one replayed
    assert CallScope.current() is None
