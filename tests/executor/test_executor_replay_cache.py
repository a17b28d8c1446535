"""The replay cache: a terminal result replayed from memory, the fingerprint checked every call.

Each test counts the ledger's reads through the bench's counting ledger and
the effects the fake provider committed, which must stay one throughout.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import pytest
from support import ARGS, OPERATION, capture_contract

from benchmarks._counting import CountingLedger
from effectguard import (
    ConfigurationError,
    EffectExecutor,
    EffectLedger,
    EffectRejected,
    EffectStatus,
    LedgerIntegrityError,
    OperationConflictError,
    OutputNotStored,
)
from effectguard.errors import IllegalTransitionError
from effectguard.testkit import FakePaymentProvider, ManualClock
from effectguard.testkit._ledgers import DelegatingLedger

FORGED = '{"amount_cents":1999,"id":"cap_999999","invoice_id":"INV-1042","status":"succeeded"}'
DRIVERS = ["sync", "async"]


@pytest.fixture
def provider() -> FakePaymentProvider:
    """The fake provider whose committed count is the ground truth."""
    return FakePaymentProvider()


@pytest.fixture
def counting(ledger: EffectLedger) -> CountingLedger:
    """``ledger``, counting every primitive the executor calls on it."""
    return CountingLedger(ledger)


def run(driver: str, executor: EffectExecutor, provider: FakePaymentProvider, **args: Any) -> Any:
    """Execute the capture of ``ARGS`` (updated by ``args``) with ``driver``."""
    arguments = {**ARGS, **args}
    contract = capture_contract(provider)
    if driver == "sync":
        return executor.execute(contract, arguments, provider.handler)
    return asyncio.run(executor.execute_async(contract, arguments, provider.handler))


def confirmed_and_cached(
    counting: CountingLedger, provider: FakePaymentProvider, **options: Any
) -> EffectExecutor:
    """An executor that confirmed OPERATION once and replayed it once (so cached it)."""
    executor = EffectExecutor(counting, clock=ManualClock(), **options)
    assert run("sync", executor, provider).status is EffectStatus.CONFIRMED
    assert run("sync", executor, provider).replayed
    return executor


@pytest.mark.parametrize("driver", DRIVERS)
def test_a_cached_replay_reads_nothing_from_the_ledger(
    counting: CountingLedger,
    provider: FakePaymentProvider,
    driver: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """After the first replay, replays call no ledger primitive; still observed and logged."""
    heard: list[Any] = []
    executor = confirmed_and_cached(counting, provider, observers=[heard.append])
    before = dict(counting.calls)
    heard.clear()
    with caplog.at_level(logging.INFO, logger="effectguard"):
        replays = [run(driver, executor, provider) for _ in range(3)]
    assert dict(counting.calls) == before
    assert [(r.status, r.replayed, r.output["id"]) for r in replays] == [
        (EffectStatus.CONFIRMED, True, "cap_000001")
    ] * 3
    assert [(t.replayed, t.result) for t in heard] == [(True, r) for r in replays]
    assert sum("replayed" in record.getMessage() for record in caplog.records) == 3
    assert provider.committed() == 1


def test_each_cached_replay_gets_its_own_output_and_evidence(
    counting: CountingLedger, provider: FakePaymentProvider
) -> None:
    """A caller mutating what it was given changes nothing later callers see."""
    executor = confirmed_and_cached(counting, provider)
    reads = counting.reads
    first = run("sync", executor, provider)
    first.output["id"] = "mutated"
    first.evidence["mutated"] = True  # type: ignore[index]
    second = run("sync", executor, provider)
    assert second.output["id"] == "cap_000001"
    assert "mutated" not in second.evidence
    assert counting.reads == reads
    assert provider.committed() == 1


def test_a_conflicting_request_reads_the_ledger_and_names_its_differences(
    counting: CountingLedger, provider: FakePaymentProvider
) -> None:
    """A different request for a cached operation raises the conflict; the cache still serves."""
    executor = confirmed_and_cached(counting, provider)
    reads = counting.reads
    with pytest.raises(OperationConflictError, match="amount_cents") as conflict:
        run("sync", executor, provider, amount_cents=2500)
    assert OPERATION in str(conflict.value)
    assert counting.reads == reads + 1
    assert run("sync", executor, provider).replayed
    assert counting.reads == reads + 1
    assert provider.committed() == 1


def test_a_cache_of_size_zero_reads_the_ledger_on_every_replay(
    counting: CountingLedger, provider: FakePaymentProvider
) -> None:
    """replay_cache=0 disables the cache: one read per replay."""
    executor = confirmed_and_cached(counting, provider, replay_cache=0)
    reads = counting.reads
    for _ in range(3):
        assert run("sync", executor, provider).replayed
    assert counting.reads == reads + 3
    assert provider.committed() == 1


def test_the_least_recently_replayed_operation_is_dropped_first(
    counting: CountingLedger, provider: FakePaymentProvider
) -> None:
    """A cache of one keeps the last operation replayed; the other reads the ledger again."""
    executor = confirmed_and_cached(counting, provider, replay_cache=1)
    assert run("sync", executor, provider, invoice_id="INV-2").status is EffectStatus.CONFIRMED
    assert run("sync", executor, provider, invoice_id="INV-2").replayed  # now cached instead
    reads = counting.reads
    assert run("sync", executor, provider, invoice_id="INV-2").replayed
    assert counting.reads == reads
    assert run("sync", executor, provider).replayed
    assert counting.reads == reads + 1
    assert provider.committed() == 2


def test_forget_makes_the_next_replay_read_the_ledger(
    counting: CountingLedger, provider: FakePaymentProvider
) -> None:
    """forget(operation_id), the hook for pruning, drops the entry; unknown ids are a no-op."""
    executor = confirmed_and_cached(counting, provider)
    reads = counting.reads
    executor.forget(OPERATION)
    executor.forget("never-seen")
    assert run("sync", executor, provider).replayed
    assert counting.reads == reads + 1
    assert run("sync", executor, provider).replayed
    assert counting.reads == reads + 1
    assert provider.committed() == 1


def test_a_rejected_operation_is_replayed_from_the_cache(counting: CountingLedger) -> None:
    """REJECTED is terminal too: cached after its first replay, with its reason and evidence."""
    sent: list[str] = []

    def decline(arguments: dict[str, Any], *, idempotency_key: str) -> Any:
        sent.append(idempotency_key)
        raise EffectRejected("card declined", evidence={"code": "card_declined"})

    executor = EffectExecutor(counting, clock=ManualClock())
    contract = capture_contract(None, probe=False)
    for _ in range(2):
        executor.execute(contract, ARGS, decline)
    reads = counting.reads
    replay = executor.execute(contract, ARGS, decline)
    assert (replay.status, replay.replayed, replay.reason) == (
        EffectStatus.REJECTED,
        True,
        "card declined",
    )
    assert replay.evidence == {"code": "card_declined"}
    assert counting.reads == reads
    assert len(sent) == 1


def test_an_output_not_stored_is_never_cached(counting: CountingLedger) -> None:
    """Its replays read the ledger and raise OutputNotStored every time, as without a cache."""
    provider = FakePaymentProvider(idempotency_guaranteed=False)

    def handler(arguments: dict[str, Any], *, idempotency_key: str) -> Any:
        return {**provider.handler(arguments, idempotency_key=idempotency_key), "h": object()}

    executor = EffectExecutor(counting, clock=ManualClock())
    contract = capture_contract(provider, probe=False)
    with pytest.raises(OutputNotStored):
        executor.execute(contract, ARGS, handler)
    reads = counting.reads
    for _ in range(2):
        with pytest.raises(OutputNotStored) as replay:
            executor.execute(contract, ARGS, handler)
        assert replay.value.result.replayed
    assert counting.reads == reads + 2
    assert provider.committed() == 1


def test_an_output_forged_after_caching_is_served_as_verified_when_cached(
    counting: CountingLedger, provider: FakePaymentProvider, ledger_sql: Callable[..., None]
) -> None:
    """The cache serves what the integrity check passed when it was cached; a new reader refuses.

    An edit behind effectguard's back is not seen by a process that cached the
    operation before it: ``verify`` finds it, and every executor that reads the
    ledger (a fresh one, another process) refuses to replay it.
    """
    executor = confirmed_and_cached(counting, provider)
    ledger_sql("UPDATE operations SET output = ? WHERE operation_id = ?", FORGED, OPERATION)
    assert run("sync", executor, provider).output["id"] == "cap_000001"
    with pytest.raises(LedgerIntegrityError, match=OPERATION):
        run("sync", EffectExecutor(counting.inner, clock=ManualClock()), provider)
    assert provider.committed() == 1


@pytest.mark.parametrize("decline", [False, True])
def test_no_operator_action_changes_a_terminal_operation(
    make_ledger: Callable[..., EffectLedger], decline: bool
) -> None:
    """confirm, reject and authorize_retry refuse CONFIRMED and REJECTED: the cache cannot go stale.

    Made from another ledger handle, as another process's operator would; the
    cached replay then equals a fresh executor's read of the ledger.
    """
    provider = FakePaymentProvider()

    def handler(arguments: dict[str, Any], *, idempotency_key: str) -> Any:
        if decline:
            raise EffectRejected("card declined", evidence={"code": "card_declined"})
        return provider.handler(arguments, idempotency_key=idempotency_key)

    contract = capture_contract(provider)
    executor = EffectExecutor(make_ledger(), clock=ManualClock())
    for _ in range(2):
        cached = executor.execute(contract, ARGS, handler)
    operator = make_ledger()
    audit = {"actor": "ops", "reason": "try", "evidence_reference": "ticket-1"}
    actions: list[Callable[[], object]] = [
        lambda: operator.confirm(OPERATION, output={"id": "x"}, provider_operation_id="x", **audit),
        lambda: operator.reject(OPERATION, **audit),
        lambda: operator.authorize_retry(OPERATION, **audit),
    ]
    for action in actions:
        with pytest.raises(IllegalTransitionError, match="cannot"):
            action()
    fresh = EffectExecutor(make_ledger(), clock=ManualClock(), replay_cache=0)
    assert executor.execute(contract, ARGS, handler) == cached
    assert fresh.execute(contract, ARGS, handler) == cached
    assert provider.committed() == (0 if decline else 1)


@pytest.mark.parametrize("size", [-1, True, 1.5, "10"])
def test_a_replay_cache_that_is_not_a_count_is_refused(ledger: EffectLedger, size: Any) -> None:
    """replay_cache must be a whole number >= 0; the error names the option."""
    with pytest.raises(ConfigurationError, match="replay_cache"):
        EffectExecutor(ledger, replay_cache=size)


@pytest.mark.parametrize("outcome", ["confirmed", "rejected"])
def test_a_replay_read_without_its_record_is_the_replay_of_the_whole_record(
    ledger: EffectLedger, outcome: str
) -> None:
    """SQLite replays a settled operation from a narrow read: the result is the record path's.

    Executors replay the same operation: one reading the ledger's replay view
    (SQLite's), one reading the whole record (the ledger behind a wrapper that
    offers no view), the first again from its cache, which the view filled,
    and each from an event loop. All the results are equal, field by field.
    """
    sent: list[str] = []
    provider = FakePaymentProvider()

    def handler(arguments: dict[str, Any], *, idempotency_key: str) -> Any:
        sent.append(idempotency_key)
        if outcome == "rejected":
            raise EffectRejected("card declined", evidence={"code": "card_declined", "n": [1]})
        return provider.handler(arguments, idempotency_key=idempotency_key)

    contract = capture_contract(provider)
    first = EffectExecutor(ledger, clock=ManualClock()).execute(contract, ARGS, handler)
    assert not first.replayed
    viewing = EffectExecutor(ledger, clock=ManualClock())
    whole = EffectExecutor(DelegatingLedger(ledger), clock=ManualClock())
    assert whole._states.replay_view is None
    if getattr(ledger, "claims_first", False) is not True:
        assert viewing._states.replay_view is not None
        assert viewing._states.replay_view_async is not None
    from_view = viewing.execute(contract, ARGS, handler)
    from_record = whole.execute(contract, ARGS, handler)
    from_cache = viewing.execute(contract, ARGS, handler)
    on_loop = EffectExecutor(ledger, clock=ManualClock(), replay_cache=0)
    from_loop = asyncio.run(on_loop.execute_async(contract, ARGS, handler))
    from_loop_record = asyncio.run(whole.execute_async(contract, ARGS, handler))
    assert from_view.replayed
    assert from_view == from_record == from_cache == from_loop == from_loop_record
    assert from_view.status is (
        EffectStatus.CONFIRMED if outcome == "confirmed" else EffectStatus.REJECTED
    )
    assert from_view.evidence is not from_cache.evidence
    assert len(sent) == 1
    assert provider.committed() == (1 if outcome == "confirmed" else 0)
