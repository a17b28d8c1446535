"""Exact-call approvals in one process, on every backend: counted at the fake provider.

A request that needs an approval is recorded, bound to its fingerprint, and
never sent until a person approves exactly it; then the next call sends it
once, and later calls replay it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest

from effectguard import (
    EffectAwaitingApproval,
    EffectContract,
    EffectExecutor,
    EffectLedger,
    EffectQuarantined,
    EffectRejected,
    EffectStatus,
    EventType,
    OperationConflictError,
    effect,
    use_executor,
)
from effectguard.errors import IllegalTransitionError, InvalidRequestError
from effectguard.testkit import FakePaymentProvider

OP = "refund:INV-9"
AUDIT = {"actor": "alice", "reason": "the customer asked", "evidence_reference": "T-1"}


class Refunds:
    """A refund tool that needs a person's approval above 100.00, over one fake provider."""

    def __init__(self) -> None:
        self.provider = FakePaymentProvider(idempotency_guaranteed=False)
        provider = self.provider

        @effect(
            name="billing.refund",
            operation_id="refund:{invoice_id}",
            idempotency_key="refund:{invoice_id}",
            requires_approval=lambda a: a["amount_cents"] > 10_000,
        )
        def refund(invoice_id: str, amount_cents: int, *, idempotency_key: str) -> dict[str, Any]:
            return provider.capture(invoice_id, -amount_cents, idempotency_key=idempotency_key)

        self.refund = refund


@pytest.fixture
def refunds() -> Refunds:
    """The refund tool over a fresh provider."""
    return Refunds()


def _awaiting(call: Callable[[], Any]) -> EffectAwaitingApproval:
    with pytest.raises(EffectAwaitingApproval) as caught:
        call()
    return caught.value


def test_nothing_is_sent_before_the_approval_and_once_after(
    ledger: EffectLedger, refunds: Refunds
) -> None:
    """Asked twice: recorded once, nothing sent. Approved: one send; later calls replay it."""
    with use_executor(EffectExecutor(ledger)):
        first = _awaiting(lambda: refunds.refund("INV-9", 25_000))
        again = _awaiting(lambda: refunds.refund("INV-9", 25_000))
        assert refunds.provider.committed() == 0
        record = ledger.get(OP)
        assert record is not None
        assert record.status is EffectStatus.AWAITING_APPROVAL
        assert (record.attempts, record.event_count) == (0, 1)  # asking again wrote nothing
        assert first.result.operation_id == OP
        assert again.result.replayed
        assert f"approve {OP}" in str(first)
        assert "nothing was sent" in str(first)

        ledger.approve(OP, **AUDIT)  # type: ignore[attr-defined]
        assert refunds.provider.committed() == 0  # an approval sends nothing by itself
        sent = refunds.refund("INV-9", 25_000)
        replayed = [refunds.refund("INV-9", 25_000) for _ in range(3)]

    assert refunds.provider.committed() == 1
    assert all(output == sent for output in replayed)
    kinds = [event.type for event in ledger.events(OP)]
    assert kinds == [
        EventType.APPROVAL_REQUESTED,
        EventType.OPERATOR_APPROVED,
        EventType.DISPATCHED,
        EventType.CONFIRMED,
    ]
    approved = ledger.events(OP)[1].evidence
    assert approved["approved_fingerprint"] == ledger.get(OP).fingerprint  # type: ignore[union-attr]
    assert (approved["actor"], approved["evidence_reference"]) == ("alice", "T-1")
    assert approved["os_user"]
    assert approved["host"]
    assert ledger.verify().ok


def test_a_request_the_predicate_lets_through_is_sent_at_once(
    ledger: EffectLedger, refunds: Refunds
) -> None:
    """Below the limit nobody is asked: one send, no approval event."""
    with use_executor(EffectExecutor(ledger)):
        refunds.refund("INV-1", 500)
    assert refunds.provider.committed() == 1
    assert ledger.events("refund:INV-1")[0].type is EventType.CLAIMED


def test_a_denied_request_is_never_sent(ledger: EffectLedger, refunds: Refunds) -> None:
    """Deny: REJECTED, every later call is refused, the provider never sees it."""
    with use_executor(EffectExecutor(ledger)):
        _awaiting(lambda: refunds.refund("INV-9", 25_000))
        ledger.deny(OP, **AUDIT)  # type: ignore[attr-defined]
        for _ in range(3):
            with pytest.raises(EffectRejected, match="denied by alice"):
                refunds.refund("INV-9", 25_000)
    assert refunds.provider.committed() == 0
    record = ledger.get(OP)
    assert record is not None
    assert record.status is EffectStatus.REJECTED
    assert ledger.events(OP)[-1].type is EventType.OPERATOR_DENIED
    assert ledger.verify().ok


def test_an_expired_approval_sends_nothing_and_a_new_one_sends_once(
    ledger: EffectLedger, refunds: Refunds
) -> None:
    """An approval unused when it runs out is void; the request waits again, unsent."""
    with use_executor(EffectExecutor(ledger)):
        _awaiting(lambda: refunds.refund("INV-9", 25_000))
        ledger.approve(OP, expires_in=0.05, **AUDIT)  # type: ignore[attr-defined]
        time.sleep(0.2)
        voided = _awaiting(lambda: refunds.refund("INV-9", 25_000))
        assert "ran out" in str(voided)
        assert refunds.provider.committed() == 0
        assert ledger.events(OP)[-1].type is EventType.APPROVAL_EXPIRED
        _awaiting(lambda: refunds.refund("INV-9", 25_000))  # and stays so

        ledger.approve(OP, expires_in=3600, **AUDIT)  # type: ignore[attr-defined]
        refunds.refund("INV-9", 25_000)
        refunds.refund("INV-9", 25_000)
    assert refunds.provider.committed() == 1
    assert ledger.verify().ok


def test_an_approval_is_never_spent_on_other_arguments(
    ledger: EffectLedger, refunds: Refunds
) -> None:
    """The same operation id with another amount is a conflict, before and after approval."""
    with use_executor(EffectExecutor(ledger)):
        _awaiting(lambda: refunds.refund("INV-9", 25_000))
        with pytest.raises(OperationConflictError):
            refunds.refund("INV-9", 99_000)
        ledger.approve(OP, **AUDIT)  # type: ignore[attr-defined]
        with pytest.raises(OperationConflictError):
            refunds.refund("INV-9", 99_000)
        assert refunds.provider.committed() == 0
        refunds.refund("INV-9", 25_000)
    effects = refunds.provider.effects()
    assert [effect["request"]["amount_cents"] for effect in effects] == [-25_000]


@pytest.mark.parametrize("action", ["approve", "deny"])
def test_only_a_request_awaiting_approval_can_be_approved_or_denied(
    ledger: EffectLedger, refunds: Refunds, action: str
) -> None:
    """On a sent, an approved or an unknown operation: refused, and nothing changes."""
    with use_executor(EffectExecutor(ledger)):
        refunds.refund("INV-1", 500)
        _awaiting(lambda: refunds.refund("INV-9", 25_000))
    ledger.approve(OP, **AUDIT)  # type: ignore[attr-defined]
    for operation_id in ("refund:INV-1", OP):
        before = (ledger.get(operation_id), ledger.events(operation_id))
        with pytest.raises(IllegalTransitionError, match=f"cannot {action} operation"):
            getattr(ledger, action)(operation_id, **AUDIT)
        assert (ledger.get(operation_id), ledger.events(operation_id)) == before
    with pytest.raises(LookupError):
        getattr(ledger, action)("refund:nope", **AUDIT)
    assert refunds.provider.committed() == 1


@pytest.mark.parametrize("expires_in", [0, -5, float("nan"), float("inf"), True, "1h"])
def test_a_bad_expiry_is_refused_and_writes_nothing(
    ledger: EffectLedger, refunds: Refunds, expires_in: Any
) -> None:
    """An expiry that is not a positive number of seconds: one clear error, ledger unchanged."""
    with use_executor(EffectExecutor(ledger)):
        _awaiting(lambda: refunds.refund("INV-9", 25_000))
    before = ledger.events(OP)
    with pytest.raises(InvalidRequestError, match="expires_in must be"):
        ledger.approve(OP, expires_in=expires_in, **AUDIT)  # type: ignore[attr-defined]
    assert ledger.events(OP) == before


def test_a_contract_without_requires_approval_is_unchanged(ledger: EffectLedger) -> None:
    """The default: no approval; a bad setting is refused where the contract is made."""
    provider = FakePaymentProvider(idempotency_guaranteed=False)
    contract = EffectContract(name="capture", operation_id=lambda a: f"c:{a['n']}")
    result = EffectExecutor(ledger).execute(
        contract,
        {"n": 1},
        lambda a, *, idempotency_key: provider.capture("c", 1, idempotency_key="k"),
    )
    assert result.confirmed
    from effectguard import ConfigurationError  # noqa: PLC0415 - only this test needs it

    with pytest.raises(ConfigurationError, match="requires_approval must be"):
        EffectContract(name="x", operation_id=lambda a: "x", requires_approval="yes")  # type: ignore[arg-type]


def test_a_predicate_that_raises_records_nothing(ledger: EffectLedger) -> None:
    """A broken predicate is the contract's error, named, with nothing recorded or sent."""
    provider = FakePaymentProvider(idempotency_guaranteed=False)

    @effect(operation_id="p:{n}", requires_approval=lambda a: a["missing"] > 1)
    def pay(n: int, *, idempotency_key: str) -> dict[str, Any]:
        return provider.capture(str(n), 1, idempotency_key=idempotency_key)

    from effectguard import ConfigurationError  # noqa: PLC0415 - only this test needs it

    with use_executor(EffectExecutor(ledger)), pytest.raises(ConfigurationError, match="KeyError"):
        pay(1)
    assert ledger.get("p:1") is None
    assert provider.committed() == 0


@pytest.mark.parametrize("flavour", ["sync", "async"])
@pytest.mark.parametrize("needed", [True, False])
def test_a_predicate_is_asked_once_per_fresh_call(
    ledger: EffectLedger, flavour: str, needed: bool
) -> None:
    """One answer routes and decides the call: a predicate that changes its mind cannot split them.

    This predicate says ``needed`` the first time it is asked of a request and the
    opposite after; asked twice, a call would be routed by one answer and decided
    by the other.
    """
    provider = FakePaymentProvider(idempotency_guaranteed=False)
    asked: list[dict[str, Any]] = []

    def fickle(arguments: dict[str, Any]) -> bool:
        asked.append(arguments)
        return needed if len(asked) == 1 else not needed

    def send(n: int, idempotency_key: str) -> dict[str, Any]:
        return provider.capture(str(n), 1, idempotency_key=idempotency_key)

    if flavour == "sync":

        @effect(operation_id="f:{n}", idempotency_key="f:{n}", requires_approval=fickle)
        def pay(n: int, *, idempotency_key: str) -> dict[str, Any]:
            return send(n, idempotency_key)

        call: Callable[[], Any] = lambda: pay(1)  # noqa: E731 - one line per flavour
    else:

        @effect(operation_id="f:{n}", idempotency_key="f:{n}", requires_approval=fickle)
        async def apay(n: int, *, idempotency_key: str) -> dict[str, Any]:
            return send(n, idempotency_key)

        call = lambda: asyncio.run(apay(1))  # noqa: E731 - one line per flavour

    with use_executor(EffectExecutor(ledger)):
        if needed:
            _awaiting(call)
        else:
            call()
    assert len(asked) == 1
    record = ledger.get("f:1")
    assert record is not None
    if needed:
        assert (record.status, provider.committed()) == (EffectStatus.AWAITING_APPROVAL, 0)
    else:
        assert (record.status, provider.committed()) == (EffectStatus.CONFIRMED, 1)


def test_the_async_path_waits_for_approval_too(ledger: EffectLedger) -> None:
    """An async tool: recorded and unsent, then one send after the approval."""
    provider = FakePaymentProvider(idempotency_guaranteed=False)

    @effect(operation_id="a:{n}", idempotency_key="a:{n}", requires_approval=True)
    async def pay(n: int, *, idempotency_key: str) -> dict[str, Any]:
        return provider.capture(str(n), 1, idempotency_key=idempotency_key)

    async def scenario() -> None:
        with pytest.raises(EffectAwaitingApproval):
            await pay(1)
        assert provider.committed() == 0
        ledger.approve("a:1", **AUDIT)  # type: ignore[attr-defined]
        await pay(1)
        await pay(1)

    with use_executor(EffectExecutor(ledger)):
        asyncio.run(scenario())
    assert provider.committed() == 1


def test_one_approval_covers_a_retry_after_a_send_that_provably_failed(
    ledger: EffectLedger,
) -> None:
    """Approved, the first attempt is refused at connect (not sent): the retry needs no new one."""
    provider = FakePaymentProvider(idempotency_guaranteed=False)
    attempts: list[int] = []

    @effect(
        operation_id="r:{n}",
        idempotency_key="r:{n}",
        requires_approval=True,
        not_sent_on=ConnectionRefusedError,
        retry_wait_initial=0,
        retry_wait_max=0,
    )
    def pay(n: int, *, idempotency_key: str) -> dict[str, Any]:
        attempts.append(n)
        if len(attempts) == 1:
            msg = "connection refused"
            raise ConnectionRefusedError(msg)
        return provider.capture(str(n), 1, idempotency_key=idempotency_key)

    with use_executor(EffectExecutor(ledger)):
        _awaiting(lambda: pay(1))
        ledger.approve("r:1", **AUDIT)  # type: ignore[attr-defined]
        pay(1)
    assert len(attempts) == 2
    assert provider.committed() == 1
    kinds = [event.type for event in ledger.events("r:1")]
    assert kinds.count(EventType.OPERATOR_APPROVED) == 1
    assert EventType.NOT_SENT in kinds


def test_one_approval_covers_an_operators_retry_after_an_uncertain_send(
    ledger: EffectLedger,
) -> None:
    """Approved, the send fails in doubt: quarantined; authorize-retry sends it, no new approval."""
    from effectguard.testkit import Fault, FaultPlan, Lookup  # noqa: PLC0415 - only this test

    provider = FakePaymentProvider(
        idempotency_guaranteed=False,
        lookup=Lookup.NONE,
        faults=FaultPlan([Fault.FAIL_BEFORE_COMMIT]),
    )

    @effect(operation_id="u:{n}", idempotency_key="u:{n}", requires_approval=True)
    def pay(n: int, *, idempotency_key: str) -> dict[str, Any]:
        return provider.capture(str(n), 1, idempotency_key=idempotency_key)

    with use_executor(EffectExecutor(ledger)):
        _awaiting(lambda: pay(1))
        ledger.approve("u:1", **AUDIT)  # type: ignore[attr-defined]
        with pytest.raises(EffectQuarantined):
            pay(1)
        assert provider.committed() == 0
        # The operator finds no refund at the provider, and allows one more send.
        ledger.authorize_retry("u:1", **AUDIT)  # type: ignore[attr-defined]
        pay(1)
        pay(1)
    assert provider.committed() == 1
    kinds = [event.type for event in ledger.events("u:1")]
    assert kinds.count(EventType.OPERATOR_APPROVED) == 1
    assert kinds[-1] is EventType.CONFIRMED
