"""``start_or_resume``: one call that starts a run or continues it, sync and async."""

from __future__ import annotations

import asyncio

from runtime_support import RUN, capture_tool, runtime, script

from effectguard import EffectExecutor, EffectLedger
from effectguard.runtime import InMemoryCheckpointStore, RunState
from effectguard.testkit import FakePaymentProvider, Fault, FaultPlan


def test_start_or_resume_continues_a_waiting_run_without_run_exists_error(
    ledger: EffectLedger,
) -> None:
    """A run left WAITING by one process is continued by the next one's same call."""
    provider = FakePaymentProvider(faults=FaultPlan([Fault.LOSE_ACK]), idempotency_guaranteed=True)
    store = InMemoryCheckpointStore()
    tools = [capture_tool(provider, probe=False)]
    # deadline=0: the lost acknowledgement is not retried within the first call.
    before = runtime(script(), tools, EffectExecutor(ledger, deadline=0), checkpoints=store)
    after = runtime(script(), tools, EffectExecutor(ledger), checkpoints=store)

    first = before.start_or_resume(RUN, "pay it")
    second = after.start_or_resume(RUN, "pay it")

    assert first.state is RunState.WAITING
    assert second.state is RunState.COMPLETED
    assert provider.committed() == 1


def test_start_or_resume_async_starts_then_returns_the_finished_run(ledger: EffectLedger) -> None:
    """Async: a new id starts and completes; calling again returns it, nothing resent."""
    provider = FakePaymentProvider()
    agent = runtime(
        script(),
        [capture_tool(provider)],
        EffectExecutor(ledger),
        checkpoints=InMemoryCheckpointStore(),
    )

    async def twice() -> tuple[RunState, RunState]:
        first = await agent.start_or_resume_async(RUN, "pay it")
        second = await agent.start_or_resume_async(RUN, "pay it")
        return first.state, second.state

    assert asyncio.run(twice()) == (RunState.COMPLETED, RunState.COMPLETED)
    assert provider.committed() == 1
