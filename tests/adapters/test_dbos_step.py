"""effect_step in one process, DBOS on a SQLite system database: scopes, retries, the wait."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from extras_support import import_extra

dbos = import_extra("dbos", "dbos")

import effectguard  # noqa: E402 - after the extra's check
from effectguard import (  # noqa: E402 - ditto
    INJECTED,
    CallScope,
    ConfigurationError,
    EffectRejected,
    EffectStatus,
    call_scoped,
    effect,
)
from effectguard.adapters.dbos import (  # noqa: E402 - ditto
    PENDING_EVENT,
    effect_step,
    pending_effect,
    retry_is_useful,
    wake,
)
from effectguard.errors import LedgerUnavailableError, OperationConflictError  # noqa: E402 - ditto
from effectguard.testkit import FakePaymentProvider, Lookup  # noqa: E402 - ditto

DBOS = dbos.DBOS


class World:
    """What the module's steps use; each test gets a fresh one."""

    payments = FakePaymentProvider()
    entries: list[tuple[str, int | None, list[str] | None]] = []  # noqa: RUF012 - replaced per test
    gate = threading.Event()


world = World()


def _scope() -> list[str] | None:
    scope = CallScope.current()
    return None if scope is None else [scope.run_id, scope.call_id]


def _enter(name: str) -> None:
    world.entries.append((name, DBOS.step_id, _scope()))


@effect(operation_id=call_scoped("capture"))
def capture(invoice_id: str, amount_cents: int, *, idempotency_key: str = INJECTED) -> Any:
    return world.payments.capture(invoice_id, amount_cents, idempotency_key=idempotency_key)


@effect(operation_id=call_scoped("capture-unprobed"))
def capture_unprobed(invoice_id: str, amount_cents: int, *, idempotency_key: str = INJECTED) -> Any:
    world.payments.capture(invoice_id, amount_cents, idempotency_key=idempotency_key)
    msg = "connection reset after the request was sent"
    raise ConnectionResetError(msg)


@effect(operation_id=call_scoped("decline"))
def decline(invoice_id: str, *, idempotency_key: str = INJECTED) -> Any:
    raise EffectRejected(f"card declined for {invoice_id}")


@effect_step()
def scope_of() -> list[str] | None:
    _enter("scope_of")
    return _scope()


@effect_step(retries_allowed=True, max_attempts=3, interval_seconds=0.01)
def charge_flaky(invoice_id: str, amount_cents: int) -> Any:
    """Captures, then fails once after the capture: DBOS retries the step."""
    _enter("charge_flaky")
    output = capture(invoice_id=invoice_id, amount_cents=amount_cents)
    if len(world.entries) == 1:
        msg = "the ledger went away after the capture"
        raise LedgerUnavailableError(msg)
    return output


@effect_step(retries_allowed=True, max_attempts=3, interval_seconds=0.01)
def charge_declined(invoice_id: str) -> Any:
    _enter("charge_declined")
    return decline(invoice_id=invoice_id)


@effect_step(wait_initial=0.2, wait_max=0.2)
def charge_unprobed(invoice_id: str, amount_cents: int) -> Any:
    _enter("charge_unprobed")
    return capture_unprobed(invoice_id=invoice_id, amount_cents=amount_cents)


@effect(operation_id=call_scoped("capture-async"))
async def capture_async(
    invoice_id: str, amount_cents: int, *, idempotency_key: str = INJECTED
) -> Any:
    return world.payments.capture(invoice_id, amount_cents, idempotency_key=idempotency_key)


@effect_step()
async def charge_async(invoice_id: str, amount_cents: int) -> Any:
    _enter("charge_async")
    return await capture_async(invoice_id=invoice_id, amount_cents=amount_cents)


@effect(operation_id=call_scoped("capture-unprobed"))
async def capture_unprobed_async(
    invoice_id: str, amount_cents: int, *, idempotency_key: str = INJECTED
) -> Any:
    world.payments.capture(invoice_id, amount_cents, idempotency_key=idempotency_key)
    msg = "connection reset after the request was sent"
    raise ConnectionResetError(msg)


@effect_step(wait_initial=0.2, wait_max=0.2)
async def charge_unprobed_async(invoice_id: str, amount_cents: int) -> Any:
    _enter("charge_unprobed_async")
    return await capture_unprobed_async(invoice_id=invoice_id, amount_cents=amount_cents)


@effect(operation_id=call_scoped("capture-held"), wait_for_peer=0)
def capture_held(invoice_id: str, amount_cents: int, *, idempotency_key: str = INJECTED) -> Any:
    """Captures, then holds the lease until the test opens the gate."""
    output = world.payments.capture(invoice_id, amount_cents, idempotency_key=idempotency_key)
    world.gate.wait(20)
    return output


@effect_step(wait_initial=0.2, wait_max=0.2)
def charge_held(invoice_id: str, amount_cents: int) -> Any:
    _enter("charge_held")
    return capture_held(invoice_id=invoice_id, amount_cents=amount_cents)


@effect_step()
def charge_twice(invoice_id: str) -> Any:
    """The same scope and tool with another amount: a conflict, nothing sent the second time."""
    capture(invoice_id=invoice_id, amount_cents=100)
    return capture(invoice_id=invoice_id, amount_cents=200)


@DBOS.step()
def outer_step() -> Any:
    return scope_of()


@DBOS.workflow()
def two_scopes() -> list[Any]:
    return [scope_of(), scope_of()]


@DBOS.workflow()
def flaky(invoice_id: str) -> Any:
    return charge_flaky(invoice_id, 500)


@DBOS.workflow()
def declined(invoice_id: str) -> Any:
    return charge_declined(invoice_id)


@DBOS.workflow()
def unprobed(invoice_id: str) -> Any:
    return charge_unprobed(invoice_id, 900)


@DBOS.workflow()
def conflicting(invoice_id: str) -> Any:
    return charge_twice(invoice_id)


@DBOS.workflow()
async def pay_async(invoice_id: str) -> Any:
    return await charge_async(invoice_id, 300)


@DBOS.workflow()
async def unprobed_async(invoice_id: str) -> Any:
    return await charge_unprobed_async(invoice_id, 900)


@DBOS.workflow()
async def sync_in_async(invoice_id: str) -> Any:
    return charge_flaky(invoice_id, 100)


@DBOS.workflow()
def held(invoice_id: str) -> Any:
    return charge_held(invoice_id, 700)


@DBOS.workflow()
def nested() -> Any:
    return outer_step()


@pytest.fixture
def app(tmp_path):
    world.payments = FakePaymentProvider(idempotency_guaranteed=False, lookup=Lookup.STRONG)
    world.entries = []
    world.gate = threading.Event()
    with effectguard.configure(tmp_path / "ledger.db") as configuration:
        DBOS(
            config={
                "name": "effectguard-step-tests",
                "system_database_url": f"sqlite:///{tmp_path / 'dbos.sqlite'}",
                "notification_listener_polling_interval_sec": 0.05,
            }
        )
        DBOS.launch()
        try:
            yield configuration.executor.ledger
        finally:
            DBOS.destroy()


def _run(workflow, workflow_id: str, *args: object) -> Any:
    with dbos.SetWorkflowID(workflow_id):
        return DBOS.start_workflow(workflow, *args)


def test_each_step_is_scoped_by_the_workflow_id_and_its_own_step_id(app):
    """Two effect steps in one workflow: scopes (dbos:<workflow id>, 1) and (…, 2)."""
    scopes = _run(two_scopes, "wf-scopes").get_result()
    assert scopes == [["dbos:wf-scopes", "1"], ["dbos:wf-scopes", "2"]]
    assert [entry[1] for entry in world.entries] == [1, 2]
    assert CallScope.current() is None


def test_outside_a_workflow_the_step_is_the_plain_function(app):
    """Called directly, the function runs with no call scope, as DBOS runs a step outside one."""
    assert scope_of() is None
    assert world.entries == [("scope_of", None, None)]


def test_a_dbos_step_retry_re_enters_the_body_under_the_same_scope(app):
    """retries_allowed: DBOS runs the body again with the same step id; the capture replays."""
    output = _run(flaky, "wf-flaky", "INV-1").get_result()
    assert output["invoice_id"] == "INV-1"
    assert world.entries == [
        ("charge_flaky", 1, ["dbos:wf-flaky", "1"]),
        ("charge_flaky", 1, ["dbos:wf-flaky", "1"]),
    ]
    assert world.payments.committed() == 1
    assert app.get("capture:dbos:wf-flaky:1").status is EffectStatus.CONFIRMED


def test_a_rejected_effect_fails_the_step_without_a_retry(app):
    """EffectRejected can only be rejected again: retry_is_useful stops DBOS's retries."""
    with pytest.raises(EffectRejected, match="card declined for INV-2"):
        _run(declined, "wf-declined", "INV-2").get_result()
    assert len(world.entries) == 1
    assert app.get("decline:dbos:wf-declined:1").status is EffectStatus.REJECTED


@pytest.mark.parametrize(
    ("error", "useful"),
    [
        (EffectRejected("no"), False),
        (OperationConflictError("op-1", "aaa", "bbb"), False),
        (ConfigurationError("bad"), False),
        (LedgerUnavailableError("down"), True),
        (RuntimeError("the step's own bug"), True),
    ],
)
def test_retry_is_useful_says_which_errors_a_retry_can_change(error, useful):
    """A retry is for what may change: never a rejection, a conflict or a bad configuration."""
    assert retry_is_useful(error) is useful


def test_an_effect_step_inside_another_step_is_refused(app):
    """Nested in a plain DBOS step, the effect step would be replayed by the outer checkpoint."""
    with pytest.raises(ConfigurationError, match="call it from the workflow function"):
        _run(nested, "wf-nested").get_result()
    assert world.entries == []


def _wait_for_quarantine(ledger, operation: str) -> None:
    deadline = time.monotonic() + 20
    while (
        record := ledger.get(operation)
    ) is None or record.status is not EffectStatus.QUARANTINED:
        assert time.monotonic() < deadline, f"{operation} was never quarantined"
        time.sleep(0.05)


def test_a_quarantined_effect_waits_and_an_operators_confirm_and_wake_finish_it(app):
    """The workflow waits on DBOS.recv; confirm in the ledger, wake(): the confirmed output."""
    operation = "capture-unprobed:dbos:wf-confirm:1"
    handle = _run(unprobed, "wf-confirm", "INV-3")
    _wait_for_quarantine(app, operation)
    time.sleep(0.5)  # two waits of 0.2 s: re-checked, still waiting, nothing sent again
    assert handle.get_status().status == "PENDING"
    assert world.payments.committed() == 1
    assert len(world.entries) >= 2
    assert {entry[2][1] for entry in world.entries} == {"1"}, "every re-check keeps step 1's scope"
    pending = pending_effect(DBOS.get_event("wf-confirm", PENDING_EVENT, timeout_seconds=0))
    assert pending is not None
    assert pending.operation_id == operation
    capture_id = "cap_000001"
    output = {"id": capture_id, "status": "succeeded", "invoice_id": "INV-3", "amount_cents": 900}
    app.confirm(
        operation,
        output=output,
        provider_operation_id=capture_id,
        actor="ops@example.com",
        reason="capture seen in the dashboard",
        evidence_reference=f"dashboard:{capture_id}",
    )
    wake("wf-confirm", operation)
    assert handle.get_result() == output
    assert world.payments.committed() == 1
    assert DBOS.get_event("wf-confirm", PENDING_EVENT, timeout_seconds=0) is None


def test_a_peer_holding_the_lease_makes_the_workflow_wait_then_share_its_outcome(app):
    """EffectInProgress (a worker elsewhere is in the handler): wait, then replay; one effect."""
    operation = "capture-held:dbos:wf-held:1"

    def peer() -> None:
        # Another worker running the same step of the same workflow (a zombie of it, say).
        with effectguard.call_scope(run_id="dbos:wf-held", call_id="1"):
            capture_held(invoice_id="INV-9", amount_cents=700)

    worker = threading.Thread(target=peer)
    worker.start()
    try:
        deadline = time.monotonic() + 10
        while world.payments.committed() == 0:
            assert time.monotonic() < deadline, "the peer never captured"
            time.sleep(0.02)
        handle = _run(held, "wf-held", "INV-9")
        deadline = time.monotonic() + 10
        while (event := DBOS.get_event("wf-held", PENDING_EVENT, timeout_seconds=0)) is None:
            assert time.monotonic() < deadline, "the workflow never reported its wait"
            time.sleep(0.05)
        waiting = pending_effect(event)
        assert waiting is not None
        assert (waiting.operation_id, waiting.status) == (operation, EffectStatus.DISPATCHED)
        assert handle.get_status().status == "PENDING"
    finally:
        world.gate.set()
        worker.join(10)
    assert handle.get_result()["invoice_id"] == "INV-9"
    assert world.payments.committed() == 1
    assert app.get(operation).status is EffectStatus.CONFIRMED


def test_an_operators_reject_ends_the_wait_with_effect_rejected(app):
    """Rejected by the operator: the re-check raises EffectRejected and the workflow fails."""
    operation = "capture-unprobed:dbos:wf-reject:1"
    handle = _run(unprobed, "wf-reject", "INV-4")
    _wait_for_quarantine(app, operation)
    app.reject(
        operation,
        actor="ops@example.com",
        reason="no such capture at the provider",
        evidence_reference="dashboard:none",
    )
    with pytest.raises(EffectRejected):
        handle.get_result()
    assert DBOS.get_event("wf-reject", PENDING_EVENT, timeout_seconds=0) is None


def test_bad_waits_are_refused_when_decorated():
    """A wait that is not positive, or a longest wait below the first, is one clear error."""
    with pytest.raises(ConfigurationError, match="wait_initial"):
        effect_step(wait_initial=0)
    with pytest.raises(ConfigurationError, match="wait_max at least wait_initial"):
        effect_step(wait_initial=5, wait_max=1)


def test_an_async_step_is_scoped_and_waits_like_a_sync_one(app):
    """An async step: the same scope; quarantined, it waits on recv_async until confirm and wake."""
    assert _run(pay_async, "wf-async", "INV-6").get_result()["invoice_id"] == "INV-6"
    assert world.entries[0] == ("charge_async", 1, ["dbos:wf-async", "1"])
    assert app.get("capture-async:dbos:wf-async:1").status is EffectStatus.CONFIRMED
    operation = "capture-unprobed:dbos:wf-async-wait:1"
    handle = _run(unprobed_async, "wf-async-wait", "INV-7")
    _wait_for_quarantine(app, operation)
    time.sleep(0.5)
    assert handle.get_status().status == "PENDING"
    output = {"id": "cap_000002", "status": "succeeded", "invoice_id": "INV-7", "amount_cents": 900}
    app.confirm(
        operation,
        output=output,
        provider_operation_id="cap_000002",
        actor="ops@example.com",
        reason="capture seen in the dashboard",
        evidence_reference="dashboard:cap_000002",
    )
    wake("wf-async-wait", operation)
    assert handle.get_result() == output
    assert world.payments.committed() == 2  # one per invoice


def test_a_sync_step_in_an_async_workflow_is_refused_before_sending(app):
    """DBOS's synchronous wait cannot run in an async workflow: refused, nothing sent."""
    with pytest.raises(ConfigurationError, match="make the step's function async"):
        _run(sync_in_async, "wf-mixed", "INV-8").get_result()
    assert world.entries == []
    assert world.payments.committed() == 0


def test_a_recorded_conflict_is_read_back_from_the_system_database(app, tmp_path):
    """DBOS pickles a failed step's error; another process reading it gets the same exception."""
    with pytest.raises(OperationConflictError):
        _run(conflicting, "wf-conflict", "INV-5").get_result()
    client = dbos.DBOSClient(system_database_url=f"sqlite:///{tmp_path / 'dbos.sqlite'}")
    try:
        with pytest.raises(OperationConflictError) as raised:
            client.retrieve_workflow("wf-conflict").get_result()
    finally:
        client.destroy()
    assert raised.value.operation_id == "capture:dbos:wf-conflict:1"
    assert world.payments.committed() == 1
