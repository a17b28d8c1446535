"""call_scope / call_scoped: operation ids from the calling context, checked before any send."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

import effectguard
from effectguard import (
    INJECTED,
    CallScope,
    ConfigurationError,
    EffectExecutor,
    call_scope,
    call_scoped,
    effect,
)
from effectguard.testkit import FakePaymentProvider


@pytest.fixture
def executor(ledger, clock) -> EffectExecutor:
    """An executor over this test's ledger, on the hand-moved clock."""
    return EffectExecutor(ledger, clock=clock)


@pytest.fixture
def provider() -> FakePaymentProvider:
    """A payment provider with Stripe-like keys."""
    return FakePaymentProvider()


def charge_tool(provider: FakePaymentProvider, executor: EffectExecutor, operation_id: Any) -> Any:
    """A charge with no business key among its arguments."""

    @effect(operation_id=operation_id, executor=executor)
    def charge(
        customer_id: str, amount_cents: int, currency: str, *, idempotency_key: str = INJECTED
    ) -> dict[str, Any]:
        return provider.capture(customer_id, amount_cents, idempotency_key=idempotency_key)

    return charge


def test_the_names_are_public():
    """call_scope and call_scoped are in effectguard's __all__; CallScope imports from it too."""
    assert {"call_scope", "call_scoped"} <= set(effectguard.__all__)
    assert effectguard.CallScope is CallScope


def test_scopes_nest_and_restore_on_exit_even_on_error():
    """An inner scope replaces the outer one and gives it back when it exits, however it exits."""
    assert CallScope.current() is None
    inner: list[CallScope | None] = []

    def fail_inside() -> None:
        with call_scope(run_id="r1", call_id="c2"):
            inner.append(CallScope.current())
            raise RuntimeError

    with call_scope(run_id="r1", call_id="c1") as outer:
        assert CallScope.current() == outer == CallScope("r1", "c1")
        with pytest.raises(RuntimeError):
            fail_inside()
        assert inner == [CallScope("r1", "c2")]
        assert CallScope.current() is outer
    assert CallScope.current() is None


def test_a_scope_needs_non_empty_ids():
    """An empty or non-string run or call id is a ConfigurationError."""
    for run_id, call_id in (("", "c"), ("r", ""), ("r", 7)):
        with pytest.raises(ConfigurationError, match="must be a non-empty string"):
            call_scope(run_id=run_id, call_id=call_id).__enter__()  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="non-empty string prefix"):
        call_scoped("")


def test_call_scoped_derives_the_operation_id_and_commits_once_per_call(provider, executor):
    """charge:<run>:<call>; the same call again replays, another call id is a new charge."""
    charge = charge_tool(provider, executor, call_scoped("charge"))
    with call_scope(run_id="run-7", call_id="call-1"):
        result = charge.execute("cus_1", 500, "EUR")
        again = charge.execute("cus_1", 500, "EUR")
    assert result.operation_id == "charge:run-7:call-1"
    assert again.replayed
    assert provider.committed("charge:run-7:call-1") == 1
    with call_scope(run_id="run-7", call_id="call-2"):
        assert charge.execute("cus_1", 500, "EUR").operation_id == "charge:run-7:call-2"
    assert provider.committed() == 2


@pytest.mark.parametrize(
    "operation_id", [call_scoped("charge"), "charge:{run_id}:{call_id}"], ids=["callable", "tmpl"]
)
def test_outside_a_scope_nothing_is_recorded_or_sent(provider, executor, ledger, operation_id):
    """Without a scope the call fails with a ConfigurationError saying how to give one."""
    charge = charge_tool(provider, executor, operation_id)
    with pytest.raises(ConfigurationError, match=r"call_scope\(run_id=\.\.\., call_id=\.\.\.\)"):
        charge("cus_1", 500, "EUR")
    assert provider.requests == 0
    assert ledger.list_operations() == []


def test_templates_name_the_scope_and_a_parameter_of_that_name_wins(provider, executor):
    """{run_id}/{call_id} come from the scope, unless the tool has a parameter so named."""
    charge = charge_tool(provider, executor, "charge:{customer_id}:{run_id}:{call_id}")
    with call_scope(run_id="run-1", call_id="call-9"):
        assert charge.execute("cus_1", 5, "EUR").operation_id == "charge:cus_1:run-1:call-9"

    @effect(operation_id="job:{run_id}:{call_id}", executor=executor)
    def job(run_id: str) -> str:
        return run_id

    with call_scope(run_id="scope-run", call_id="c1"):
        assert job.execute("param-run").operation_id == "job:param-run:c1"


def test_a_template_naming_neither_a_parameter_nor_a_scope_field_is_still_refused():
    """{run} is a typo, refused at decoration, and the message lists the scope fields."""
    with pytest.raises(ConfigurationError, match=r"nor a call-scope field \(run_id, call_id\)"):
        effect(operation_id="charge:{run}")(lambda customer_id: None)


def test_the_scope_reaches_threads_the_library_starts_and_asyncio_tasks(executor):
    """A timed handler runs in the library's thread; tasks and to_thread copy the scope."""
    seen: list[CallScope | None] = []
    threads: list[threading.Thread] = []

    @effect(operation_id=call_scoped("timed"), executor=executor, timeout=30)
    def timed(n: int) -> int:
        seen.append(CallScope.current())
        threads.append(threading.current_thread())
        return n

    @effect(operation_id=call_scoped("async"), executor=executor)
    async def later(n: int) -> int:
        seen.append(CallScope.current())
        return n

    async def main() -> list[str]:
        async def one(call_id: str) -> str:
            with call_scope(run_id="run-a", call_id=call_id):
                result = await later.execute(1)
                await asyncio.to_thread(lambda: seen.append(CallScope.current()))
                return result.operation_id

        return list(await asyncio.gather(one("c1"), one("c2")))

    with call_scope(run_id="run-t", call_id="c0"):
        assert timed.execute(1).operation_id == "timed:run-t:c0"
    assert asyncio.run(main()) == ["async:run-a:c1", "async:run-a:c2"]
    assert seen[0] == CallScope("run-t", "c0")
    assert threads != [threading.current_thread()]
    assert sorted((s.run_id, s.call_id) for s in seen[1:] if s is not None) == [
        ("run-a", "c1"),
        ("run-a", "c1"),
        ("run-a", "c2"),
        ("run-a", "c2"),
    ]
