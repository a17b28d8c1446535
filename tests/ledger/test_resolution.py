"""Audited operator resolution: confirm, reject and authorize_retry on every backend."""

from __future__ import annotations

import os
import pwd
import secrets
import socket
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from effectguard import (
    EffectContract,
    EffectExecutor,
    EffectLedger,
    EffectRejected,
    EffectStatus,
    EventType,
    InvalidRequestError,
    UnknownOutcomePolicy,
)
from effectguard._fingerprint import request_fingerprint
from effectguard._model import LeaseOwner
from effectguard.errors import IllegalTransitionError, OperationNotFoundError
from effectguard.ledger import Lease, NewOperation
from effectguard.testkit import FakePaymentProvider, Fault, FaultPlan, Lookup

ARGS = {"invoice_id": "INV-1042", "amount_cents": 1250}
OP = "invoice:INV-1042:capture"
KEY = "capture:INV-1042"
AUDIT = {"actor": "alice", "reason": "checked the dashboard", "evidence_reference": "TICKET-7"}


def contract(**overrides: Any) -> EffectContract:
    """The capture contract these tests run: keyed, no probe, no guarantee unless overridden."""
    fields: dict[str, Any] = {
        "name": "capture",
        "operation_id": lambda a: f"invoice:{a['invoice_id']}:capture",
        "provider_idempotency_key": lambda a: f"capture:{a['invoice_id']}",
    }
    fields.update(overrides)
    return EffectContract(**fields)


class Recorder:
    """A handler that forwards to a fake provider and remembers each key it was given."""

    def __init__(self, provider: FakePaymentProvider) -> None:
        self.provider = provider
        self.keys: list[str | None] = []

    def __call__(self, arguments: Mapping[str, Any], *, idempotency_key: str | None) -> Any:
        """Capture through the provider with the key the executor passed."""
        self.keys.append(idempotency_key)
        return self.provider.handler(arguments, idempotency_key=idempotency_key)


def quarantine(
    ledger: EffectLedger, fault: Fault = Fault.FAIL_BEFORE_COMMIT, **overrides: Any
) -> tuple[FakePaymentProvider, Recorder]:
    """Run one capture whose first attempt meets ``fault`` until it is QUARANTINED."""
    provider = FakePaymentProvider(
        idempotency_guaranteed=False, lookup=Lookup.NONE, faults=FaultPlan([fault])
    )
    handler = Recorder(provider)
    result = EffectExecutor(ledger).execute(contract(**overrides), ARGS, handler)
    assert result.status is EffectStatus.QUARANTINED
    return provider, handler


def snapshot(ledger: EffectLedger) -> list[Any]:
    """Everything the ledger holds, through the protocol, to compare before and after."""
    return [
        (record, ledger.events(record.operation_id))
        for record in ledger.list_operations(limit=10_000)
    ]


@pytest.fixture
def confirmed(ledger: EffectLedger) -> FakePaymentProvider:
    """A ledger holding one CONFIRMED capture."""
    provider = FakePaymentProvider()
    assert EffectExecutor(ledger).execute(contract(), ARGS, provider.handler).confirmed
    return provider


@pytest.fixture
def rejected(ledger: EffectLedger) -> None:
    """A ledger holding one REJECTED capture."""

    def decline(arguments: Mapping[str, Any], *, idempotency_key: str | None) -> Any:
        raise EffectRejected("card declined", evidence={"code": "card_declined"})

    result = EffectExecutor(ledger).execute(contract(), ARGS, decline)
    assert result.status is EffectStatus.REJECTED


def resolve(ledger: EffectLedger, action: str, **audit: str) -> Any:
    """Call operator ``action`` on OP with the standard audit fields (overridable)."""
    fields = {**AUDIT, **audit}
    if action == "confirm":
        return ledger.confirm(OP, output={"id": "cap_1"}, provider_operation_id="cap_1", **fields)
    return getattr(ledger, action)(OP, **fields)


ACTIONS = ["confirm", "reject", "authorize_retry"]


# -- confirm ---------------------------------------------------------------------------


def test_confirm_records_output_and_audit_and_is_replayed(ledger: EffectLedger) -> None:
    """Confirm stores the operator's output, and the next execute replays it without dispatch."""
    provider, handler = quarantine(ledger, Fault.LOSE_ACK)
    assert provider.committed() == 1
    output = provider.effects()[0]["response"]
    record = ledger.confirm(OP, output=output, provider_operation_id=output["id"], **AUDIT)
    assert record.status is EffectStatus.CONFIRMED
    assert record.output == output
    assert record.provider_operation_id == output["id"]
    assert "alice" in (record.reason or "")

    result = EffectExecutor(ledger).execute(contract(), ARGS, handler)
    assert result.confirmed
    assert result.replayed
    assert result.output == output
    assert result.provider_operation_id == output["id"]
    assert handler.keys == [KEY]
    assert provider.committed() == 1


def test_every_resolution_appends_an_audited_chained_event(ledger: EffectLedger) -> None:
    """Each operator write appends one event naming actor, reason, evidence, OS user and host."""
    quarantine(ledger)
    before = ledger.events(OP)
    ledger.authorize_retry(OP, **AUDIT)
    ledger.reject(OP, actor="bob", reason="customer cancelled", evidence_reference="CASE-9")
    events = ledger.events(OP)
    assert events[: len(before)] == before
    retry, reject = events[len(before) :]
    assert retry.type is EventType.OPERATOR_RETRY_AUTHORIZED
    assert (retry.from_status, retry.to_status) == (
        EffectStatus.QUARANTINED,
        EffectStatus.PREPARED,
    )
    assert reject.type is EventType.OPERATOR_REJECTED
    assert (reject.from_status, reject.to_status) == (
        EffectStatus.PREPARED,
        EffectStatus.REJECTED,
    )
    assert reject.evidence["actor"] == "bob"
    assert reject.evidence["reason"] == "customer cancelled"
    assert reject.evidence["evidence_reference"] == "CASE-9"
    for event in (retry, reject):
        assert event.evidence["os_user"] == os_account()
        assert event.evidence["host"] == socket.gethostname()
    report = ledger.verify()
    assert report.ok, report.problems
    assert report.events_checked == len(events)


def os_account() -> str:
    """This process's account as the ledger records it: name and uid from the passwd database."""
    uid = os.getuid()
    return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"


def test_os_user_comes_from_the_uid_not_the_environment(
    ledger: EffectLedger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """$USER and $LOGNAME cannot change the OS account recorded beside the claimed actor."""
    quarantine(ledger)
    for name in ("USER", "LOGNAME", "LNAME", "USERNAME"):
        monkeypatch.setenv(name, "mallory")
    ledger.reject(OP, **AUDIT)
    assert ledger.events(OP)[-1].evidence["os_user"] == os_account()
    assert "mallory" not in ledger.events(OP)[-1].evidence["os_user"]


def test_confirm_evidence_holds_the_output_and_provider_id(ledger: EffectLedger) -> None:
    """The confirm event carries the output and provider id it asserted, inside the chain."""
    quarantine(ledger)
    ledger.confirm(OP, output={"id": "cap_9"}, provider_operation_id="cap_9", **AUDIT)
    event = ledger.events(OP)[-1]
    assert event.type is EventType.OPERATOR_CONFIRMED
    assert event.evidence["output"] == {"id": "cap_9"}
    assert event.evidence["provider_operation_id"] == "cap_9"
    assert event.evidence["actor"] == "alice"


def test_audit_fields_are_stored_trimmed(ledger: EffectLedger) -> None:
    """Surrounding whitespace in audit fields is not part of the record."""
    quarantine(ledger)
    ledger.reject(OP, actor="  alice ", reason=" gone\t", evidence_reference=" T-1 ")
    evidence = ledger.events(OP)[-1].evidence
    assert (evidence["actor"], evidence["reason"], evidence["evidence_reference"]) == (
        "alice",
        "gone",
        "T-1",
    )


# -- reject ----------------------------------------------------------------------------


def test_reject_is_terminal_and_replayed_without_dispatch(ledger: EffectLedger) -> None:
    """After reject, execute replays REJECTED and never calls the handler again."""
    provider, handler = quarantine(ledger)
    record = ledger.reject(OP, **AUDIT)
    assert record.status is EffectStatus.REJECTED
    assert record.output_json is None

    result = EffectExecutor(ledger).execute(contract(), ARGS, handler)
    assert result.status is EffectStatus.REJECTED
    assert result.replayed
    assert handler.keys == [KEY]
    assert provider.committed() == 0


# -- authorize_retry -------------------------------------------------------------------


def test_authorize_retry_dispatches_once_more_with_the_same_key(ledger: EffectLedger) -> None:
    """After authorize_retry, execute dispatches once, with the same key, and then replays."""
    provider, handler = quarantine(ledger)
    assert provider.committed() == 0
    record = ledger.authorize_retry(OP, **AUDIT)
    assert record.status is EffectStatus.PREPARED
    assert record.attempt_budget == record.attempts + 1

    executor = EffectExecutor(ledger)
    result = executor.execute(contract(), ARGS, handler)
    assert result.confirmed
    assert not result.replayed
    assert result.attempts == 2
    assert handler.keys == [KEY, KEY]
    assert provider.committed() == 1

    again = executor.execute(contract(), ARGS, handler)
    assert again.replayed
    assert again.output == result.output
    assert handler.keys == [KEY, KEY]
    assert provider.committed() == 1


def test_authorize_retry_grants_exactly_one_attempt(ledger: EffectLedger) -> None:
    """Even under a provider guarantee, an authorized retry that fails is not retried again."""
    provider = FakePaymentProvider(
        faults=FaultPlan([Fault.FAIL_BEFORE_COMMIT] * 4), lookup=Lookup.NONE
    )
    handler = Recorder(provider)
    guaranteed = contract(provider_idempotency_guaranteed=True, max_attempts=3)
    executor = EffectExecutor(ledger)
    first = executor.execute(guaranteed, ARGS, handler)
    assert first.status is EffectStatus.QUARANTINED
    assert len(handler.keys) == 3

    ledger.authorize_retry(OP, **AUDIT)
    second = executor.execute(guaranteed, ARGS, handler)
    assert second.status is EffectStatus.QUARANTINED
    assert second.attempts == 4
    third = executor.execute(guaranteed, ARGS, handler)
    assert third.status is EffectStatus.QUARANTINED
    assert handler.keys == [KEY] * 4
    assert provider.committed() == 0


def test_authorize_retry_from_outcome_unknown_leaves_one_attempt(ledger: EffectLedger) -> None:
    """An OUTCOME_UNKNOWN operation with budget left still gets exactly one authorized attempt."""
    provider = FakePaymentProvider(
        idempotency_guaranteed=False,
        lookup=Lookup.NONE,
        faults=FaultPlan([Fault.FAIL_BEFORE_COMMIT] * 3),
    )
    handler = Recorder(provider)
    keep = contract(unknown_outcome=UnknownOutcomePolicy.KEEP_UNKNOWN, max_attempts=3)
    executor = EffectExecutor(ledger)
    assert executor.execute(keep, ARGS, handler).status is EffectStatus.OUTCOME_UNKNOWN

    record = ledger.authorize_retry(OP, **AUDIT)
    assert (record.attempts, record.attempt_budget) == (1, 2)
    assert executor.execute(keep, ARGS, handler).status is EffectStatus.OUTCOME_UNKNOWN
    assert executor.execute(keep, ARGS, handler).status is EffectStatus.OUTCOME_UNKNOWN
    assert handler.keys == [KEY, KEY]
    assert provider.committed() == 0


def test_authorize_retry_clears_overlap_and_records_it(ledger: EffectLedger) -> None:
    """A retry authorization clears overlap risk and says in its evidence how much it cleared."""
    release = threading.Event()
    entered = threading.Event()
    provider = FakePaymentProvider(idempotency_guaranteed=False, lookup=Lookup.NONE)
    calls: list[str | None] = []

    def handler(arguments: Mapping[str, Any], *, idempotency_key: str | None) -> Any:
        calls.append(idempotency_key)
        if len(calls) == 1:
            entered.set()
            release.wait()
            raise TimeoutError("this first request never reached the provider")
        return provider.handler(arguments, idempotency_key=idempotency_key)

    timed = contract(handler_timeout=0.01)
    executor = EffectExecutor(ledger)
    try:
        first = executor.execute(timed, ARGS, handler)
        assert entered.is_set()
        assert first.status is EffectStatus.QUARANTINED
        assert ledger.get(OP).overlap_risk  # type: ignore[union-attr]

        record = ledger.authorize_retry(OP, **AUDIT)
        assert not record.overlap_risk
        assert ledger.events(OP)[-1].evidence["cleared_overlap"] == 1

        second = executor.execute(timed, ARGS, handler)
        assert second.confirmed
        assert calls == [KEY, KEY]
        assert provider.committed() == 1
    finally:
        release.set()
        join_handler_threads()
    assert provider.committed() == 1


def join_handler_threads() -> None:
    """Wait for handler threads that outlived their deadline to finish recording."""
    for thread in threading.enumerate():
        if thread.name.startswith("effectguard-handler-"):
            thread.join(timeout=10)


# -- refusals --------------------------------------------------------------------------


@pytest.mark.parametrize("action", ACTIONS)
@pytest.mark.parametrize("field", ["actor", "reason", "evidence_reference"])
@pytest.mark.parametrize("value", ["", "   "])
def test_missing_audit_field_is_refused(
    ledger: EffectLedger, action: str, field: str, value: str
) -> None:
    """Every operator write needs actor, reason and evidence reference; nothing is written."""
    quarantine(ledger)
    before = snapshot(ledger)
    with pytest.raises(InvalidRequestError, match=field.replace("_", " ")):
        resolve(ledger, action, **{field: value})
    assert snapshot(ledger) == before


@pytest.mark.parametrize(
    ("state", "action"),
    [
        ("confirmed", "confirm"),
        ("confirmed", "reject"),
        ("confirmed", "authorize_retry"),
        ("rejected", "confirm"),
        ("rejected", "reject"),
        ("rejected", "authorize_retry"),
    ],
)
def test_terminal_operations_cannot_be_resolved(
    request: pytest.FixtureRequest, ledger: EffectLedger, state: str, action: str
) -> None:
    """CONFIRMED and REJECTED never change: every resolution is refused, nothing written."""
    request.getfixturevalue(state)
    before = snapshot(ledger)
    with pytest.raises(IllegalTransitionError, match=state.upper()):
        resolve(ledger, action)
    assert snapshot(ledger) == before


def test_retry_of_an_already_authorized_operation_is_refused(ledger: EffectLedger) -> None:
    """A PREPARED operation already has its retry; authorizing another is refused."""
    quarantine(ledger)
    ledger.authorize_retry(OP, **AUDIT)
    before = snapshot(ledger)
    with pytest.raises(IllegalTransitionError, match="PREPARED"):
        ledger.authorize_retry(OP, **AUDIT)
    assert snapshot(ledger) == before


@pytest.mark.parametrize("action", ACTIONS)
def test_unknown_operation_is_not_found(ledger: EffectLedger, action: str) -> None:
    """Resolving an id the ledger does not hold raises OperationNotFoundError."""
    quarantine(ledger)
    before = snapshot(ledger)
    with pytest.raises(OperationNotFoundError, match="INV-9999"):
        getattr(ledger, action)(
            "invoice:INV-9999:capture",
            **AUDIT,
            **({"output": {}, "provider_operation_id": None} if action == "confirm" else {}),
        )
    assert snapshot(ledger) == before


@pytest.mark.parametrize("output", [{"at": object()}, float("nan"), {1: "integer key"}], ids=repr)
def test_confirm_refuses_output_that_is_not_json(ledger: EffectLedger, output: Any) -> None:
    """An output that has no canonical JSON form is refused before anything is written."""
    quarantine(ledger)
    before = snapshot(ledger)
    with pytest.raises(InvalidRequestError, match="JSON"):
        ledger.confirm(OP, output=output, provider_operation_id="cap_1", **AUDIT)
    assert snapshot(ledger) == before


@pytest.mark.parametrize("provider_operation_id", ["", "  ", 17])
def test_confirm_refuses_a_blank_provider_operation_id(
    ledger: EffectLedger, provider_operation_id: Any
) -> None:
    """A provider operation id is a non-empty string or None; anything else is refused."""
    quarantine(ledger)
    before = snapshot(ledger)
    with pytest.raises(InvalidRequestError, match="provider operation id"):
        ledger.confirm(OP, output={}, provider_operation_id=provider_operation_id, **AUDIT)
    assert snapshot(ledger) == before


@pytest.mark.parametrize("action", ACTIONS)
def test_live_lease_refuses_resolution(ledger: EffectLedger, action: str) -> None:
    """While a worker holds a live lease, every operator write is refused and nothing changes."""
    provider = FakePaymentProvider()
    entered, release = threading.Event(), threading.Event()

    def handler(arguments: Mapping[str, Any], *, idempotency_key: str | None) -> Any:
        entered.set()
        release.wait()
        return provider.handler(arguments, idempotency_key=idempotency_key)

    results: list[Any] = []
    worker = threading.Thread(
        target=lambda: results.append(EffectExecutor(ledger).execute(contract(), ARGS, handler))
    )
    worker.start()
    try:
        assert entered.wait(10)
        assert ledger.get(OP).lease_live  # type: ignore[union-attr]
        before = snapshot(ledger)
        with pytest.raises(IllegalTransitionError, match="live lease"):
            resolve(ledger, action)
        assert snapshot(ledger) == before
    finally:
        release.set()
        worker.join(10)
    assert results[0].confirmed
    assert provider.committed() == 1


# -- an abandoned dispatch -------------------------------------------------------------


@pytest.fixture
def abandoned(ledger: EffectLedger) -> LeaseOwner:
    """A DISPATCHED operation whose worker vanished an hour ago: its lease has expired."""
    owner = LeaseOwner("elsewhere", "boot", "ns", 4242, "1")
    operation = NewOperation(
        operation_id=OP,
        contract="capture",
        contract_version=1,
        fingerprint=request_fingerprint("capture", 1, ARGS, KEY),
        provider_key=KEY,
        arguments=ARGS,
        attempt_budget=3,
        lease=Lease(secrets.token_hex(16), owner, 30.0),
    )
    _, created = ledger.claim(operation, now=time.time() - 3600)
    assert created
    assert not ledger.get(OP).lease_live  # type: ignore[union-attr]
    return owner


@pytest.mark.parametrize("action", ACTIONS)
def test_expired_lease_can_be_resolved_and_names_its_holder(
    ledger: EffectLedger, abandoned: LeaseOwner, action: str
) -> None:
    """An expired lease does not block resolution; the event records whose lease it was."""
    record = resolve(ledger, action)
    assert record.lease_token is None
    event = ledger.events(OP)[-1]
    assert event.from_status is EffectStatus.DISPATCHED
    assert event.evidence["previous_lease_owner"] == abandoned.to_json()


def test_retry_of_an_abandoned_dispatch_sends_once_with_its_key(
    ledger: EffectLedger, abandoned: LeaseOwner
) -> None:
    """An authorized retry of a vanished worker's dispatch sends once, with the stored key."""
    ledger.authorize_retry(OP, **AUDIT)
    provider = FakePaymentProvider(idempotency_guaranteed=False)
    handler = Recorder(provider)
    result = EffectExecutor(ledger).execute(contract(), ARGS, handler)
    assert result.confirmed
    assert result.attempts == 2
    assert handler.keys == [KEY]
    assert provider.committed() == 1


def test_resolution_works_from_a_second_handle(
    make_ledger: Callable[..., EffectLedger],
) -> None:
    """An operator's handle sees and resolves what a worker's handle quarantined."""
    worker = make_ledger()
    provider, handler = quarantine(worker)
    operator = make_ledger()
    operator.authorize_retry(OP, **AUDIT)
    assert EffectExecutor(worker).execute(contract(), ARGS, handler).confirmed
    assert provider.committed() == 1
