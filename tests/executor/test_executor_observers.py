"""One observer hook: every transition and every result, per executor or per context."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
from typing import Any

import pytest
from support import ARGS, OPERATION, capture_contract, wait_until

from effectguard import (
    EffectExecutor,
    EffectStatus,
    EventType,
    OperationConflictError,
    Transition,
    effect,
    observe_effects,
    observing,
)
from effectguard._executor import observe_everywhere
from effectguard.testkit import FakePaymentProvider, Fault, FaultPlan, ManualClock

DRIVERS = ["sync", "async"]
CARD_NUMBER = "4242-4242-4242-4242"


def _execute(driver: str, executor: EffectExecutor, *args: Any) -> Any:
    if driver == "sync":
        return executor.execute(*args)
    return asyncio.run(executor.execute_async(*args))


@pytest.mark.parametrize("driver", DRIVERS)
def test_an_executor_observer_sees_every_transition_then_the_result(ledger, driver):
    """Each durable event is reported, in the ledger's order, then the call's final result."""
    provider = FakePaymentProvider(idempotency_guaranteed=False)
    seen: list[Transition] = []
    executor = EffectExecutor(ledger, clock=ManualClock(), observers=[seen.append])

    def handler(arguments, *, idempotency_key):
        provider.handler(arguments, idempotency_key=idempotency_key)
        msg = "connection reset after the request was written"
        raise ConnectionError(msg)

    result = _execute(driver, executor, capture_contract(provider), ARGS, handler)

    assert result.status is EffectStatus.CONFIRMED  # the probe found it
    events = ledger.events(OPERATION)
    *transitions, final = seen
    assert [t.event for t in transitions] == [e.type for e in events]
    assert [(t.from_status, t.to_status, t.attempt) for t in transitions] == [
        (e.from_status, e.to_status, e.attempt) for e in events
    ]
    assert all(t.operation_id == OPERATION and not t.final for t in transitions)
    assert {(t.contract, t.contract_version) for t in seen} == {("payments.capture", 1)}
    assert final.final
    assert final.event is None
    assert final.to_status is EffectStatus.CONFIRMED
    assert final.result == result
    assert not final.replayed
    assert provider.committed() == 1


@pytest.mark.parametrize("driver", DRIVERS)
def test_a_replay_is_reported_as_a_replayed_result_and_nothing_else(ledger, driver):
    """A CONFIRMED operation called again: one notice, replayed, and nothing sent."""
    provider = FakePaymentProvider()
    executor = EffectExecutor(ledger, clock=ManualClock())
    contract = capture_contract(provider)
    executor.execute(contract, ARGS, provider.handler)
    seen: list[Transition] = []
    executor.add_observer(seen.append)

    replay = _execute(driver, executor, contract, ARGS, provider.handler)

    assert [(t.final, t.replayed, t.to_status) for t in seen] == [
        (True, True, EffectStatus.CONFIRMED)
    ]
    assert seen[0].result == replay
    executor.remove_observer(seen.append)
    executor.execute(contract, ARGS, provider.handler)
    assert len(seen) == 1
    assert provider.requests == 1
    assert provider.committed() == 1


@pytest.mark.parametrize("driver", DRIVERS)
def test_a_context_observer_sees_a_tool_pinned_to_its_own_executor(ledger, driver):
    """observing() reaches every executor used in its context, and nested contexts stack."""
    provider = FakePaymentProvider()
    own = EffectExecutor(ledger, clock=ManualClock())

    @effect(operation_id="invoice:{invoice_id}:capture", executor=own, name="tests.pinned")
    def capture(invoice_id: str, amount_cents: int) -> dict[str, Any]:
        return provider.capture(invoice_id, amount_cents, idempotency_key=None)

    @effect(operation_id="invoice:{invoice_id}:capture", executor=own, name="tests.pinned")
    async def capture_async(invoice_id: str, amount_cents: int) -> dict[str, Any]:
        return provider.capture(invoice_id, amount_cents, idempotency_key=None)

    outer: list[Transition] = []
    results: list[Any] = []
    with observing(outer.append), observe_effects(results.append):
        if driver == "sync":
            capture("INV-1042", 1999)
        else:
            asyncio.run(capture_async("INV-1042", 1999))
    capture("INV-1042", 1999)  # outside the context: nobody hears of it

    assert [t.event for t in outer if not t.final] == [
        EventType.CLAIMED,
        EventType.CONFIRMED,
    ]
    assert [t.to_status for t in outer if t.final] == [EffectStatus.CONFIRMED]
    assert [(r.operation_id, r.status) for r in results] == [(OPERATION, EffectStatus.CONFIRMED)]
    assert provider.committed() == 1


@pytest.mark.parametrize("driver", DRIVERS)
def test_a_redacted_value_in_a_handlers_exception_never_reaches_an_observer(ledger, driver):
    """The secret is quoted by the handler's error: observers and the ledger see it masked."""
    provider = FakePaymentProvider(idempotency_guaranteed=False)
    seen: list[Transition] = []

    @effect(
        operation_id="invoice:{invoice_id}:capture",
        redact=["card_number"],
        executor=EffectExecutor(ledger, clock=ManualClock(), observers=[seen.append]),
        name="tests.card",
    )
    def charge(invoice_id: str, card_number: str) -> dict[str, Any]:
        provider.capture(invoice_id, 1999, idempotency_key=None)
        msg = f"gateway refused card {card_number} after accepting the charge"
        raise RuntimeError(msg)

    @effect(
        operation_id="invoice:{invoice_id}:capture",
        redact=["card_number"],
        executor=EffectExecutor(ledger, clock=ManualClock(), observers=[seen.append]),
        name="tests.card",
    )
    async def charge_async(invoice_id: str, card_number: str) -> dict[str, Any]:
        return charge.__wrapped__(invoice_id, card_number)

    with observing(seen.append):
        if driver == "sync":
            result = charge.execute("INV-1042", CARD_NUMBER)
        else:
            result = asyncio.run(charge_async.execute("INV-1042", CARD_NUMBER))

    assert result.status is EffectStatus.QUARANTINED
    assert len(seen) > 1
    for transition in seen:
        assert CARD_NUMBER not in repr(transition)
        assert transition.result is None or transition.result.handler_error is None
    assert "[redacted]" in (result.reason or "")
    assert CARD_NUMBER in str(result.handler_error)  # the caller's own exception is untouched
    record = ledger.get(OPERATION)
    stored = repr((record, ledger.events(OPERATION)))
    assert CARD_NUMBER not in stored
    assert provider.committed() == 1


def test_an_observer_that_raises_changes_no_outcome(ledger, caplog):
    """A broken observer is logged and skipped; the effect is confirmed once all the same."""
    provider = FakePaymentProvider()

    def broken(transition: Transition) -> None:
        msg = "telemetry backend down"
        raise OSError(msg)

    executor = EffectExecutor(ledger, clock=ManualClock(), observers=[broken])
    result = executor.execute(capture_contract(provider), ARGS, provider.handler)
    assert result.status is EffectStatus.CONFIRMED
    failures = [r for r in caplog.records if r.name == "effectguard.observe"]
    assert len(failures) == 3  # claimed, confirmed, the result
    assert all(isinstance(r.exc_info[1], OSError) for r in failures)
    assert {r.operation_id for r in failures} == {OPERATION}
    assert provider.committed() == 1


def test_a_late_result_reaches_the_observers_of_its_call(ledger):
    """A handler past its deadline returns later, in its own thread: its call's observers hear."""
    provider = FakePaymentProvider(idempotency_guaranteed=False)
    gate = threading.Event()
    seen: list[Transition] = []

    def handler(arguments, *, idempotency_key):
        gate.wait(30)
        return provider.handler(arguments, idempotency_key=idempotency_key)

    executor = EffectExecutor(ledger, clock=ManualClock())
    contract = capture_contract(provider, probe=False, handler_timeout=0.05)
    with observing(seen.append):
        result = executor.execute(contract, ARGS, handler)
    assert result.status is EffectStatus.QUARANTINED
    gate.set()

    wait_until(lambda: any(t.event is EventType.LATE_RESULT for t in seen))
    [late] = [t for t in seen if t.event is EventType.LATE_RESULT]
    assert (late.from_status, late.to_status) == (
        EffectStatus.QUARANTINED,
        EffectStatus.CONFIRMED,
    )
    assert provider.committed() == 1


class _Watcher:
    """An observer that also watches whole calls: what it saw, and where the handler ran."""

    def __init__(self, *, broken: bool = False) -> None:
        self.broken = broken
        self.log: list[str] = []
        self.inside = threading.local()

    def __call__(self, transition: Transition) -> None:
        self.log.append("result" if transition.final else f"event {transition.event}")

    def watch_call(self, start):
        if self.broken:
            msg = "tracing backend down"
            raise OSError(msg)
        watcher = self

        class Watch:
            def __enter__(self):
                watcher.log.append(f"start {start.operation_id} {dict(start.arguments)}")
                watcher.token = _WATCHED.set(start.operation_id)
                return self

            def paused(self, seconds):
                watcher.log.append(f"pause {seconds:g}")

            def __exit__(self, kind, error, trace):
                _WATCHED.reset(watcher.token)
                watcher.log.append(f"end {type(error).__name__ if error else None}")

        return Watch()


_WATCHED: contextvars.ContextVar[str | None] = contextvars.ContextVar("watched", default=None)


@pytest.mark.parametrize("driver", DRIVERS)
def test_a_call_watcher_spans_the_whole_call_and_its_context_reaches_the_handler(ledger, driver):
    """Start before the first read, the handler inside the watch's context, end after the result.

    Redacted arguments reach the watcher masked; a backoff wait is reported as a pause.
    """
    provider = FakePaymentProvider(
        idempotency_guaranteed=False, faults=FaultPlan([Fault.FAIL_BEFORE_COMMIT])
    )
    watcher = _Watcher()
    seen_by_handler: list[str | None] = []

    def handler(arguments, *, idempotency_key):
        seen_by_handler.append(_WATCHED.get())
        return provider.handler(arguments, idempotency_key=idempotency_key)

    executor = EffectExecutor(
        ledger, clock=ManualClock(), observers=[watcher], jitter=lambda ceiling: ceiling
    )
    contract = capture_contract(provider, redact=frozenset({"amount_cents"}))
    result = _execute(driver, executor, contract, ARGS, handler)

    assert result.status is EffectStatus.CONFIRMED
    assert result.attempts == 2
    assert seen_by_handler == [OPERATION, OPERATION]
    assert watcher.log[0] == (
        f"start {OPERATION} {{'invoice_id': 'INV-1042', 'amount_cents': '[redacted]'}}"
    )
    assert watcher.log[-2:] == ["result", "end None"]
    retry = watcher.log.index("event retry")
    # The wait comes between the probe's NOT_COMMITTED and the retry it allows.
    assert watcher.log[retry - 1 : retry + 2] == ["pause 0.1", "event retry", "event dispatched"]
    assert "1999" not in " ".join(watcher.log)
    assert _WATCHED.get() is None  # the watch's context does not outlive the call
    assert provider.committed() == 1


def test_a_call_watcher_hears_the_exception_that_ends_a_call(ledger):
    """A conflicting request ends the call with an exception: the watch's exit is told of it."""
    provider = FakePaymentProvider()
    watcher = _Watcher()
    executor = EffectExecutor(ledger, clock=ManualClock(), observers=[watcher])
    executor.execute(capture_contract(provider), ARGS, provider.handler)
    with pytest.raises(OperationConflictError):
        executor.execute(capture_contract(provider), {**ARGS, "amount_cents": 1}, provider.handler)
    assert watcher.log[-1] == "end OperationConflictError"
    assert provider.committed() == 1


def test_a_watcher_that_raises_changes_no_outcome(ledger, caplog):
    """A watcher whose watch_call raises is logged and left out; the effect confirms once."""
    provider = FakePaymentProvider()
    watcher = _Watcher(broken=True)
    executor = EffectExecutor(ledger, clock=ManualClock(), observers=[watcher])
    result = executor.execute(capture_contract(provider), ARGS, provider.handler)
    assert result.status is EffectStatus.CONFIRMED
    assert watcher.log == ["event claimed", "event confirmed", "result"]
    failures = [r for r in caplog.records if r.name == "effectguard.observe"]
    assert [type(r.exc_info[1]) for r in failures] == [OSError]
    assert provider.committed() == 1


def test_an_observer_everywhere_sees_every_executor_until_withdrawn(ledger):
    """observe_everywhere reaches an executor made before and after it; withdrawing stops it."""
    provider = FakePaymentProvider()
    seen: list[Transition] = []
    before = EffectExecutor(ledger, clock=ManualClock())
    withdraw = observe_everywhere(seen.append)
    try:
        before.execute(capture_contract(provider), ARGS, provider.handler)
        after = EffectExecutor(ledger, clock=ManualClock())
        after.execute(capture_contract(provider), ARGS, provider.handler)
    finally:
        withdraw()
    before.execute(capture_contract(provider), ARGS, provider.handler)
    withdraw()  # twice: nothing more
    assert [t.replayed for t in seen if t.final] == [False, True]
    assert provider.committed() == 1


def test_a_result_names_the_type_of_the_handlers_exception_not_its_message(ledger):
    """A handler that raised: the final notice carries its qualified type name, no message."""
    provider = FakePaymentProvider(idempotency_guaranteed=False)
    seen: list[Transition] = []

    def handler(arguments, *, idempotency_key):
        provider.handler(arguments, idempotency_key=idempotency_key)
        msg = f"card {CARD_NUMBER} declined after commit"
        raise ConnectionError(msg)

    executor = EffectExecutor(ledger, clock=ManualClock(), observers=[seen.append])
    result = executor.execute(capture_contract(provider, probe=False), ARGS, handler)
    assert result.status is EffectStatus.QUARANTINED
    assert seen[-1].error_type == "ConnectionError"
    assert provider.committed() == 1


@pytest.mark.parametrize(
    ("level", "expected"),
    [
        (
            logging.DEBUG,
            [
                "claimed: new -> DISPATCHED",
                "confirmed: DISPATCHED -> CONFIRMED",
                "result CONFIRMED",
            ],
        ),
        (logging.INFO, ["confirmed: DISPATCHED -> CONFIRMED"]),
        (logging.WARNING, []),
    ],
)
def test_the_log_writes_each_transition_at_its_level_and_no_other(ledger, caplog, level, expected):
    """Left out only when its level is off: the same lines with or without another observer."""
    for invoice, observers in (("INV-1", []), ("INV-2", [lambda transition: None])):
        provider = FakePaymentProvider()
        caplog.clear()
        executor = EffectExecutor(ledger, clock=ManualClock(), observers=observers)
        with caplog.at_level(level, logger="effectguard"):
            executor.execute(
                capture_contract(provider), {**ARGS, "invoice_id": invoice}, provider.handler
            )
        lines = [r.getMessage() for r in caplog.records if r.name == "effectguard.executor"]
        prefix = f"invoice:{invoice}:capture "
        assert [line.removeprefix(prefix).split(" (attempt")[0] for line in lines] == expected
        assert provider.committed() == 1
