"""Scenarios about one business operation met twice: conflict, replay, concurrency."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from effectguard._model import EffectResult, EffectStatus
from effectguard.errors import OperationConflictError
from effectguard.testkit.fakes.base import Lookup
from effectguard.testkit.faults import FaultPlan
from effectguard.testkit.scenarios._base import ScenarioEnv, scenario
from effectguard.testkit.scenarios._report import ScenarioReport

__all__: list[str] = []

_CONCURRENT_CALLERS = 4
_WAIT = 30.0


@scenario("conflict")
def conflict(env: ScenarioEnv) -> ScenarioReport:
    """The same operation id comes back with a different amount.

    Invariant: the second request raises OperationConflictError before any
    dispatch; the ledger is unchanged, the operation stays CONFIRMED with the
    first amount, and the provider holds exactly one capture.
    """
    provider, contract, arguments = env.payments(
        guaranteed=True, lookup=Lookup.STRONG, faults=FaultPlan()
    )
    ledger = env.open_ledger()
    operation_id = contract.identity(arguments)[0]
    env.require_fresh(ledger, operation_id)
    executor = env.executor(ledger)
    first = executor.execute(contract, arguments, provider.handler)
    before = ledger.get(operation_id)
    first_amount = int(arguments["amount_cents"])
    changed = {**arguments, "amount_cents": first_amount + 1}
    raised = None
    try:
        executor.execute(contract, changed, provider.handler)
    except OperationConflictError as exc:
        raised = exc
    after = ledger.get(operation_id)
    unchanged = (
        before is not None
        and after is not None
        and (before.event_count, before.event_head) == (after.event_count, after.event_head)
    )
    effects = provider.effects()
    amounts = [effect["request"]["amount_cents"] for effect in effects]
    return env.report(
        ledger=ledger,
        provider=provider,
        operation_id=operation_id,
        checks=[
            ("the first request is CONFIRMED", first.status is EffectStatus.CONFIRMED),
            ("the changed request raises OperationConflictError", raised is not None),
            ("nothing was dispatched for it", provider.requests == 1),
            ("the ledger is unchanged", unchanged),
            ("the provider holds one capture, of the first amount", amounts == [first_amount]),
        ],
        details={"error": str(raised) if raised else None, "amounts": amounts},
    )


@scenario("replay-after-reopen")
def replay_after_reopen(env: ScenarioEnv) -> ScenarioReport:
    """A confirmed capture is asked for again after the process restarts.

    Invariant: a new ledger handle and executor on the same file replay the
    stored output (marked replayed, the same capture) without contacting the
    provider, which holds exactly one capture.
    """
    provider, contract, arguments = env.payments(
        guaranteed=True, lookup=Lookup.STRONG, faults=FaultPlan()
    )
    ledger = env.open_ledger()
    operation_id = contract.identity(arguments)[0]
    env.require_fresh(ledger, operation_id)
    first = env.executor(ledger).execute(contract, arguments, provider.handler)
    ledger.close()
    reopened = env.open_ledger()
    again = env.executor(reopened).execute(contract, arguments, provider.handler)
    return env.report(
        ledger=reopened,
        provider=provider,
        operation_id=operation_id,
        checks=[
            ("the first call is CONFIRMED", first.status is EffectStatus.CONFIRMED),
            ("the call after reopening is a replay", again.replayed and again.confirmed),
            ("it replays the same output", again.output == first.output),
            ("the provider was contacted once", provider.requests == 1),
            ("the provider holds exactly one capture", provider.committed() == 1),
        ],
        details={"capture_id": (first.output or {}).get("id")},
    )


@scenario("concurrent-duplicate")
def concurrent_duplicate(env: ScenarioEnv) -> ScenarioReport:
    """Four workers execute the same operation at the same moment.

    The provider has no idempotency: only the ledger's claim stands between
    four callers and four charges. The winner's handler waits until every
    other caller has returned, so they all meet it in flight.

    Invariant: exactly one caller dispatches; the three others are told another
    worker holds it (DISPATCHED) without a request; the winner confirms, a
    later call replays its output, and the provider holds exactly one capture.
    """
    provider, contract, arguments = env.payments(
        guaranteed=False, lookup=Lookup.STRONG, faults=FaultPlan()
    )
    ledger = env.open_ledger()
    operation_id = contract.identity(arguments)[0]
    env.require_fresh(ledger, operation_id)
    executor = env.executor(ledger)
    returned = threading.Semaphore(0)
    start = threading.Barrier(_CONCURRENT_CALLERS)
    results: list[EffectResult[Any]] = []
    lock = threading.Lock()
    waited_for_all = []

    def handler(args: Mapping[str, Any], *, idempotency_key: str | None) -> Any:
        waited_for_all.append(
            all(returned.acquire(timeout=_WAIT) for _ in range(_CONCURRENT_CALLERS - 1))
        )
        return provider.handler(args, idempotency_key=idempotency_key)

    errors: list[str] = []

    def caller() -> None:
        try:
            start.wait(_WAIT)
            result = executor.execute(contract, arguments, handler)
        except Exception as exc:  # noqa: BLE001 - a failed caller is reported, never hidden
            with lock:
                errors.append(f"{type(exc).__name__}: {exc}")
            returned.release()
            return
        with lock:
            results.append(result)
        if result.status is not EffectStatus.CONFIRMED:
            returned.release()

    threads = [threading.Thread(target=caller) for _ in range(_CONCURRENT_CALLERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(_WAIT)
    finished = not any(thread.is_alive() for thread in threads)
    later = executor.execute(contract, arguments, provider.handler)
    statuses = sorted(result.status.value for result in results)
    winners = [result for result in results if result.status is EffectStatus.CONFIRMED]
    in_progress = [result for result in results if result.status is EffectStatus.DISPATCHED]
    return env.report(
        ledger=ledger,
        provider=provider,
        operation_id=operation_id,
        checks=[
            ("every caller returned without error", finished and not errors),
            ("exactly one handler ran", len(waited_for_all) == 1 and provider.requests == 1),
            ("the other callers met it in flight", waited_for_all == [True]),
            ("one caller confirmed it", len(winners) == 1),
            ("the others were told it is in progress", len(in_progress) == _CONCURRENT_CALLERS - 1),
            (
                "a later call replays the winner's output",
                later.replayed and bool(winners) and later.output == winners[0].output,
            ),
            ("the provider holds exactly one capture", provider.committed() == 1),
        ],
        details={"caller_statuses": statuses, "caller_errors": errors},
    )
