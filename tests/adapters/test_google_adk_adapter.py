"""Google ADK: the schema, one dispatch for identical calls, ADK's confirmation pause, resume.

ADK runs with a scripted ``BaseLlm`` and a real runner over an in-memory or
SQLite session service; every test counts what the fake payment provider
committed, never what the adapter reports.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
from effect_shop import CAPTURE_OPERATION, confirm_with_cli, open_shop
from extras_support import import_extra
from fault_children import kill_after_report, report

from effectguard import (
    INJECTED,
    EffectExecutor,
    EffectRejected,
    EffectStatus,
    SQLiteEffectLedger,
    effect,
)
from effectguard.testkit import Fault

import_extra("google.adk", "google-adk")

from google.adk.sessions import InMemorySessionService  # noqa: E402 - after the extra check
from google_adk_support import (  # noqa: E402 - imports google.adk, after the extra check
    APP,
    USER,
    ScriptedLlm,
    call,
    confirmation,
    run,
    say,
    session_of,
    shop_runner,
)

from effectguard.adapters.google_adk import (  # noqa: E402 - imports google.adk, after the check
    CONFIRMATION_CALL,
    EffectStillPending,
    as_tool,
    paused_calls,
    settle_confirmations,
)

OPERATION = CAPTURE_OPERATION.format(invoice_id="INV-7")
I7 = {"invoice_id": "INV-7", "amount_cents": 700}
CHILD = Path(__file__).with_name("google_adk_child.py")


@pytest.fixture(params=["sync", "async"])
def kind(request: pytest.FixtureRequest) -> str:
    """Each test runs with a sync and an async ``@effect`` tool."""
    return str(request.param)


async def _new_session(runner: Any) -> str:
    session = await runner.session_service.create_session(app_name=APP, user_id=USER)
    return str(session.id)


def _confirmation_calls(events: list[Any]) -> list[Any]:
    return [c for e in events for c in e.get_function_calls() if c.name == CONFIRMATION_CALL]


def test_the_declaration_holds_the_business_parameters_with_their_descriptions(tmp_path, kind):
    """The model is offered invoice_id and amount_cents, described; never the key or context."""
    shop = open_shop(tmp_path, kind=kind)
    model = ScriptedLlm(turns=[[say("hello")]])
    runner = shop_runner(model, [as_tool(shop.capture)], InMemorySessionService())

    async def scenario() -> None:
        await run(runner, await _new_session(runner), "hi")

    asyncio.run(scenario())
    [declaration] = model.requests[0].config.tools[0].function_declarations
    schema = declaration.parameters_json_schema
    assert declaration.name == "capture"
    assert declaration.description == "Capture the payment of an invoice."
    assert set(schema["properties"]) == {"invoice_id", "amount_cents"}
    assert schema["required"] == ["invoice_id", "amount_cents"]
    assert schema["properties"]["invoice_id"] == {
        "type": "string",
        "description": "The invoice to capture, e.g. INV-1042.",
    }
    assert schema["properties"]["amount_cents"]["type"] == "integer"
    shop.close()


def test_two_identical_calls_in_one_turn_capture_once(tmp_path, kind):
    """ADK runs both calls at once; the second shares the first's dispatch, both read its output."""
    shop = open_shop(tmp_path, kind=kind)
    model = ScriptedLlm(
        turns=[[call("capture", I7, "fc-1"), call("capture", I7, "fc-2")], [say("Captured.")]]
    )
    runner = shop_runner(model, [as_tool(shop.capture)], InMemorySessionService())

    async def scenario() -> list[Any]:
        return await run(runner, await _new_session(runner), "Capture INV-7.")

    events = asyncio.run(scenario())
    assert shop.payments.committed() == 1
    assert shop.payments.attempts() == 1
    first, second = model.read()
    assert first == second
    assert first["invoice_id"] == "INV-7"
    assert events[-1].content.parts[0].text == "Captured."
    shop.close()


class _PeerSeenLedger(SQLiteEffectLedger):
    """A real SQLite ledger that notes when a reader finds an operation DISPATCHED."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.peer_read = threading.Event()

    def get(self, operation_id: str, *, now: float | None = None) -> Any:
        """See :meth:`EffectLedger.get`; sets :attr:`peer_read` on a DISPATCHED record."""
        record = super().get(operation_id, now=now)
        if record is not None and record.status is EffectStatus.DISPATCHED:
            self.peer_read.set()
        return record


def test_the_second_of_two_concurrent_calls_waits_for_the_first_and_shares_its_capture(tmp_path):
    """The capture is held until the twin call has found it in flight: still one capture."""
    shop = open_shop(tmp_path)
    ledger = _PeerSeenLedger(tmp_path / "gated.db")

    @effect(operation_id="invoice:{invoice_id}:capture", executor=EffectExecutor(ledger))
    def capture(invoice_id: str, amount_cents: int, *, idempotency_key: str = INJECTED) -> dict:
        """Capture the payment of an invoice.

        Args:
            invoice_id: The invoice to capture.
            amount_cents: The amount, in cents.
            idempotency_key: Supplied by the executor.
        """
        assert ledger.peer_read.wait(30), "the twin call never found the capture in flight"
        return shop.payments.capture(invoice_id, amount_cents, idempotency_key=idempotency_key)

    model = ScriptedLlm(
        turns=[[call("capture", I7, "fc-1"), call("capture", I7, "fc-2")], [say("Captured.")]]
    )
    runner = shop_runner(model, [as_tool(capture)], InMemorySessionService())

    async def scenario() -> None:
        await run(runner, await _new_session(runner), "Capture INV-7.")

    asyncio.run(scenario())
    assert ledger.peer_read.is_set()
    assert shop.payments.committed() == 1
    first, second = model.read()
    assert first == second
    ledger.close()
    shop.close()


def test_a_rejected_capture_reaches_the_model_as_an_error_that_invites_no_retry(tmp_path):
    """A declined card is REJECTED: the model reads an error saying not to retry; one attempt."""
    shop = open_shop(tmp_path)

    @effect(operation_id="invoice:{invoice_id}:capture", executor=EffectExecutor(shop.ledger))
    def capture(invoice_id: str, amount_cents: int, *, idempotency_key: str = INJECTED) -> dict:
        """Capture the payment of an invoice.

        Args:
            invoice_id: The invoice to capture.
            amount_cents: The amount, in cents.
            idempotency_key: Supplied by the executor.
        """
        del amount_cents, idempotency_key
        raise EffectRejected(reason=f"card declined for {invoice_id}")

    model = ScriptedLlm(turns=[[call("capture", I7, "fc-1")], [say("Declined.")]])
    runner = shop_runner(model, [as_tool(capture)], InMemorySessionService())

    async def scenario() -> None:
        await run(runner, await _new_session(runner), "Capture INV-7.")

    asyncio.run(scenario())
    [answer] = model.read()
    assert "do not retry" in answer["error"]
    assert "card declined" in answer["error"]
    assert shop.payments.attempts() == 0
    assert shop.ledger.get(OPERATION).status is EffectStatus.REJECTED
    shop.close()


def test_a_conflicting_request_is_an_error_that_invites_no_retry_and_sends_nothing(tmp_path):
    """The same invoice with another amount is a conflict: the model is told not to retry."""
    shop = open_shop(tmp_path)
    other = {"invoice_id": "INV-7", "amount_cents": 900}
    model = ScriptedLlm(
        turns=[[call("capture", I7, "fc-1")], [say("Captured.")], [call("capture", other, "fc-2")]]
    )
    runner = shop_runner(model, [as_tool(shop.capture)], InMemorySessionService())

    async def scenario() -> None:
        session_id = await _new_session(runner)
        await run(runner, session_id, "Capture INV-7.")
        await run(runner, session_id, "Capture INV-7 for 9.00 instead.")

    asyncio.run(scenario())
    conflict = model.read()[-1]["error"]
    assert "do not retry" in conflict
    assert OPERATION in conflict
    assert shop.payments.committed() == 1
    assert shop.payments.attempts() == 1
    shop.close()


def test_arguments_that_do_not_fit_the_schema_record_and_send_nothing(tmp_path):
    """A missing amount: the model reads the validation error; the ledger holds nothing."""
    shop = open_shop(tmp_path)
    model = ScriptedLlm(turns=[[call("capture", {"invoice_id": "INV-7"}, "fc-1")]])
    runner = shop_runner(model, [as_tool(shop.capture)], InMemorySessionService())

    async def scenario() -> None:
        await run(runner, await _new_session(runner), "Capture INV-7.")

    asyncio.run(scenario())
    assert "amount_cents" in model.read()[-1]["error"]
    assert shop.ledger.get(OPERATION) is None
    assert shop.payments.attempts() == 0
    shop.close()


def test_a_lost_ack_pauses_on_adk_confirmation_and_the_model_never_reads_it(tmp_path, kind):
    """The capture committed, its ack was lost: QUARANTINED, ADK's confirmation pause, no text."""
    shop = open_shop(tmp_path, kind=kind, payment_faults=[Fault.LOSE_ACK])
    model = ScriptedLlm(turns=[[call("capture", I7, "fc-1")], [say("Captured!")]])
    runner = shop_runner(model, [as_tool(shop.capture)], InMemorySessionService())

    async def scenario() -> tuple[list[Any], Any]:
        session_id = await _new_session(runner)
        events = await run(runner, session_id, "Capture INV-7.")
        return events, await session_of(runner, session_id)

    events, session = asyncio.run(scenario())
    [request] = _confirmation_calls(events)
    payload = request.args["toolConfirmation"]["payload"]
    assert payload["operation_id"] == OPERATION
    assert payload["status"] == "QUARANTINED"
    assert "agent-effect-ops" in payload["operator_command"]
    assert OPERATION in payload["operator_command"]
    assert len(model.requests) == 1  # the model was not asked to read the pending payload
    [paused] = paused_calls(session, [shop.capture])
    assert (paused.function_call_id, paused.operation_id) == ("fc-1", OPERATION)
    assert shop.payments.committed() == 1
    shop.close()


def test_resume_before_the_operator_stays_paused_and_confirm_then_resume_captures_once(
    tmp_path, kind
):
    """Settle waits; a forced resume raises and sends nothing; after confirm, one capture."""
    shop = open_shop(tmp_path, kind=kind, payment_faults=[Fault.LOSE_ACK])
    model = ScriptedLlm(turns=[[call("capture", I7, "fc-1")], [say("Captured INV-7.")]])
    tool = as_tool(shop.capture)
    runner = shop_runner(model, [tool], InMemorySessionService())

    async def scenario() -> None:
        session_id = await _new_session(runner)
        events = await run(runner, session_id, "Capture INV-7.")
        [request] = _confirmation_calls(events)
        session = await session_of(runner, session_id)

        message, waiting = settle_confirmations(session, [tool])
        assert message is None
        assert [(w.operation_id, w.status) for w in waiting] == [
            (OPERATION, EffectStatus.QUARANTINED)
        ]
        # A host that resumes anyway: the tool re-reads the ledger, sends nothing, and the
        # pause stays open (ADK recorded no response for the call).
        with pytest.raises(EffectStillPending) as raised:
            await run(runner, session_id, confirmation(request.id, confirmed=True))
        assert raised.value.effect.operation_id == OPERATION
        assert OPERATION in str(raised.value)
        assert shop.payments.attempts() == 1
        assert [
            p.operation_id for p in paused_calls(await session_of(runner, session_id), [tool])
        ] == [OPERATION]

        found = shop.payments.effects()[0]["response"]
        await asyncio.to_thread(confirm_with_cli, shop.ledger_path, OPERATION, found)
        message, waiting = settle_confirmations(await session_of(runner, session_id), [tool])
        assert waiting == []
        assert message is not None
        events = await run(runner, session_id, message)
        assert events[-1].content.parts[0].text == "Captured INV-7."
        assert paused_calls(await session_of(runner, session_id), [tool]) == []

    asyncio.run(scenario())
    assert shop.payments.committed() == 1
    assert shop.payments.attempts() == 1
    assert model.read()[-1] == shop.payments.effects()[0]["response"]
    shop.close()


def test_a_confirmation_that_says_no_sends_nothing(tmp_path):
    """A host answering confirmed=False: the model reads that nothing was resumed; one attempt."""
    shop = open_shop(tmp_path, payment_faults=[Fault.LOSE_ACK])
    model = ScriptedLlm(turns=[[call("capture", I7, "fc-1")], [say("Not resumed.")]])
    tool = as_tool(shop.capture)
    runner = shop_runner(model, [tool], InMemorySessionService())

    async def scenario() -> None:
        session_id = await _new_session(runner)
        [request] = _confirmation_calls(await run(runner, session_id, "Capture INV-7."))
        await run(runner, session_id, confirmation(request.id, confirmed=False))

    asyncio.run(scenario())
    assert "not resumed" in model.read()[-1]["error"]
    assert shop.payments.attempts() == 1
    assert shop.ledger.get(OPERATION).status is EffectStatus.QUARANTINED
    shop.close()


def test_an_authorized_retry_is_sent_once_by_the_resumed_call(tmp_path):
    """The provider lost the request: the operator authorizes a retry; resume sends it once."""
    shop = open_shop(tmp_path, payment_faults=[Fault.FAIL_BEFORE_COMMIT])
    model = ScriptedLlm(turns=[[call("capture", I7, "fc-1")], [say("Captured.")]])
    tool = as_tool(shop.capture)
    runner = shop_runner(model, [tool], InMemorySessionService())

    async def scenario() -> None:
        session_id = await _new_session(runner)
        await run(runner, session_id, "Capture INV-7.")
        assert shop.ledger.get(OPERATION).status is EffectStatus.QUARANTINED
        shop.ledger.authorize_retry(
            OPERATION, actor="oncall", reason="not at the provider", evidence_reference="T-2"
        )
        message, waiting = settle_confirmations(await session_of(runner, session_id), [tool])
        assert waiting == []
        await run(runner, session_id, message)

    asyncio.run(scenario())
    assert shop.payments.committed() == 1
    assert shop.payments.attempts() == 2
    assert model.read()[-1]["invoice_id"] == "INV-7"
    shop.close()


@pytest.mark.slow
def test_a_restart_in_a_new_process_resumes_the_paused_call_with_one_capture(tmp_path):
    """Pause in one process; confirm; a new process on the same SQLite sessions: one capture."""
    started = _child("start", tmp_path)
    assert [(p["operation_id"], p["status"]) for p in started["waiting"]] == [
        (OPERATION, "QUARANTINED")
    ]
    shop = open_shop(tmp_path)
    assert shop.payments.committed() == 1

    still = _child("resume", tmp_path)
    assert [p["status"] for p in still["waiting"]] == ["QUARANTINED"]
    assert shop.payments.attempts() == 1

    confirm_with_cli(shop.ledger_path, OPERATION, shop.payments.effects()[0]["response"])
    done = _child("resume", tmp_path)
    assert done["final"] == "Captured INV-7."
    assert done["read"][-1] == shop.payments.effects()[0]["response"]
    assert shop.payments.committed() == 1
    assert shop.payments.attempts() == 1
    shop.close()


@pytest.mark.slow
def test_a_process_killed_while_paused_is_resumed_by_another_with_one_capture(tmp_path):
    """SIGKILL the paused process; the next one still waits; after confirm, one capture."""
    started = kill_after_report(CHILD, "start", str(tmp_path), "hang")
    assert [p["status"] for p in started["waiting"]] == ["QUARANTINED"]
    shop = open_shop(tmp_path)
    assert [p["status"] for p in _child("resume", tmp_path)["waiting"]] == ["QUARANTINED"]
    assert shop.payments.attempts() == 1

    confirm_with_cli(shop.ledger_path, OPERATION, shop.payments.effects()[0]["response"])
    assert _child("resume", tmp_path)["final"] == "Captured INV-7."
    assert _child("resume", tmp_path) == {"waiting": []}  # resumed once: nothing left paused
    assert shop.payments.committed() == 1
    assert shop.payments.attempts() == 1
    shop.close()


def test_an_authorized_retry_that_loses_its_ack_again_stays_paused_and_says_it_sent(tmp_path):
    """The retry is sent once and its ack lost too: still paused, and the error says it sent."""
    shop = open_shop(tmp_path, payment_faults=[Fault.FAIL_BEFORE_COMMIT, Fault.LOSE_ACK])
    model = ScriptedLlm(turns=[[call("capture", I7, "fc-1")], [say("Captured.")]])
    tool = as_tool(shop.capture)
    runner = shop_runner(model, [tool], InMemorySessionService())

    async def scenario() -> None:
        session_id = await _new_session(runner)
        [request] = _confirmation_calls(await run(runner, session_id, "Capture INV-7."))
        shop.ledger.authorize_retry(
            OPERATION, actor="oncall", reason="not at the provider", evidence_reference="T-2"
        )
        with pytest.raises(EffectStillPending) as raised:
            await run(runner, session_id, confirmation(request.id, confirmed=True))
        assert raised.value.sent
        assert "sent the authorized retry" in str(raised.value)
        # Answering again before the operator acts sends nothing more.
        with pytest.raises(EffectStillPending) as again:
            await run(runner, session_id, confirmation(request.id, confirmed=True))
        assert not again.value.sent

    asyncio.run(scenario())
    assert shop.payments.committed() == 1
    assert shop.payments.attempts() == 2
    shop.close()


def _child(command: str, directory: Path) -> dict[str, Any]:
    return report(CHILD, command, str(directory))
