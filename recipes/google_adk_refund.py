"""A Google ADK agent refunds an order; the acknowledgement is lost; ADK pauses, it does not lie.

To use this with your own provider and model, change four things:

- ``RefundAPI.refund``: call your provider's refund endpoint and forward
  ``idempotency_key`` (Stripe: the ``Idempotency-Key`` header).
- ``refund_order``'s ``@effect`` options: keep ``idempotency_guaranteed=False``
  unless your provider documents that a resend with the same key never refunds
  twice; add ``probe=`` when it has a lookup you trust.
- ``ScriptedModel``: your model (``LlmAgent(model="gemini-2.5-flash", ...)``).
- The session service: any durable one (here ADK's ``SqliteSessionService``).
  The paused call lives in the session's events; the ledger holds the truth.

Run: ``python recipes/google_adk_refund.py`` (offline: a scripted model, no
Google API or credentials, and a fake provider that counts what it committed).
It exits non-zero unless the provider holds exactly one refund.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import tempfile
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.sessions.sqlite_session_service import SqliteSessionService
from google.genai import types

from effectguard import INJECTED, EffectExecutor, SQLiteEffectLedger, effect
from effectguard.adapters.google_adk import EffectTool, as_tool, settle_confirmations
from effectguard.testkit import FakePaymentProvider, Fault, FaultPlan, Lookup

OPERATION = "order:ORD-7:refund"
APP, USER, SESSION = "shop", "customer-42", "conversation-7"


class RefundAPI(FakePaymentProvider):
    """Stands in for your provider's refund endpoint: a fake that counts what it committed."""

    def refund(self, order_id: str, amount_cents: int, *, idempotency_key: str) -> dict[str, Any]:
        """Refund ``amount_cents`` of ``order_id``; returns the refund when acknowledged."""
        body = {"order_id": order_id, "amount_cents": amount_cents}

        def response(seq: int) -> dict[str, Any]:
            return {"id": f"re_{seq:06d}", "status": "succeeded", **body}

        return self._submit(
            idempotency_key, idempotency_key, body, deduplicate=False, make_response=response
        )


def refund_tool(api: RefundAPI, executor: EffectExecutor) -> Any:
    """The ``@effect`` tool the agent is given, on ``api`` and ``executor``."""

    @effect(
        operation_id="order:{order_id}:refund",
        idempotency_key="refund:{order_id}",
        name="shop.refund_order",
        executor=executor,
    )
    def refund_order(
        order_id: str, amount_cents: int, *, idempotency_key: str = INJECTED
    ) -> dict[str, Any]:
        """Refund a customer's order.

        Args:
            order_id: The order to refund, for example "ORD-7".
            amount_cents: How much to refund, in cents.
            idempotency_key: Supplied by the executor (never shown to the model).
        """
        return api.refund(order_id, amount_cents, idempotency_key=idempotency_key)

    return refund_order


class ScriptedModel(BaseLlm):
    """The model: ask for the refund; once the tool answered, say what it returned."""

    model: str = "scripted"

    async def generate_content_async(
        self,
        llm_request: LlmRequest,
        stream: bool = False,  # noqa: ARG002 - ADK's signature
    ) -> AsyncGenerator[LlmResponse, None]:
        """Answer one request: a function call, or the text of the tool's answer."""
        last = llm_request.contents[-1].parts or []
        returned = [p.function_response for p in last if p.function_response is not None]
        if returned:
            text = f"Refunded: {json.dumps(returned[0].response, sort_keys=True)}"
            part = types.Part(text=text)
        else:
            arguments = {"order_id": "ORD-7", "amount_cents": 2500}
            call = types.FunctionCall(name="refund_order", args=arguments, id="call-1")
            part = types.Part(function_call=call)
        yield LlmResponse(content=types.Content(role="model", parts=[part]))


def open_runner(workdir: Path, api: RefundAPI) -> tuple[EffectTool, Runner, SQLiteEffectLedger]:
    """Everything a process needs, opened from the files in ``workdir``."""
    ledger = SQLiteEffectLedger(workdir / "ledger.db")
    tool = as_tool(refund_tool(api, EffectExecutor(ledger)))
    agent = LlmAgent(name="shop", model=ScriptedModel(), instruction="Help.", tools=[tool])
    sessions = SqliteSessionService(str(workdir / "sessions.db"))
    return tool, Runner(agent=agent, app_name=APP, session_service=sessions), ledger


async def turn(runner: Runner, message: types.Content) -> str | None:
    """Run one turn of the conversation; the model's last text, if it said anything."""
    text = None
    async for event in runner.run_async(user_id=USER, session_id=SESSION, new_message=message):
        for part in (event.content.parts if event.content else None) or []:
            text = part.text or text
    return text


async def start(workdir: Path, api: RefundAPI) -> bool:
    """Step 1: run until the refund is in doubt; True if ADK paused the call."""
    tool, runner, ledger = open_runner(workdir, api)
    await runner.session_service.create_session(app_name=APP, user_id=USER, session_id=SESSION)
    ask = types.Content(role="user", parts=[types.Part(text="Please refund ORD-7 (25.00).")])
    said = await turn(runner, ask)
    session = await runner.session_service.get_session(
        app_name=APP, user_id=USER, session_id=SESSION
    )
    if said is not None or session is None:
        print(f"FAIL: the turn ended with the model saying {said!r}")
        ledger.close()
        return False
    _, [waiting] = settle_confirmations(session, [tool])
    ledger.close()
    print(f"  ADK paused the call on {waiting.operation_id}: {waiting.status.value}")
    print(f"  why: {waiting.reason}")
    print(f"  operator: {waiting.operator_command}")
    return True


async def resume(workdir: Path, api: RefundAPI) -> str | None:
    """Step 2 or 4, in a fresh process's handles: settle against the ledger, resume if settled."""
    tool, runner, ledger = open_runner(workdir, api)
    session = await runner.session_service.get_session(
        app_name=APP, user_id=USER, session_id=SESSION
    )
    if session is None:
        print("FAIL: the session was lost")
        ledger.close()
        return None
    message, waiting = settle_confirmations(session, [tool])
    final = None
    if waiting or message is None:
        still = ", ".join(f"{w.operation_id} is {w.status.value}" for w in waiting)
        print(f"  still waiting: {still} (nothing was sent)")
    else:
        final = await turn(runner, message)
        print(f"  the turn completed: {final}")
    ledger.close()
    return final


def operator_confirms(workdir: Path, api: RefundAPI) -> None:
    """Step 3: the operator finds the refund at the provider and confirms it in the ledger."""
    found = api.find_capture("refund:ORD-7")
    if found is None:
        print("  the provider has no such refund: the operator would `reject` instead")
        return
    print(f"  the provider shows {json.dumps(found)}")
    ledger = SQLiteEffectLedger(workdir / "ledger.db")
    ledger.confirm(
        OPERATION,
        output=found,
        provider_operation_id=found["id"],
        actor="ops@example.com",
        reason="refund found in the provider's dashboard",
        evidence_reference="DASH-7",
    )
    ledger.close()


async def main(workdir: Path) -> int:
    """Run the story; return the exit status."""
    # The provider commits the refund and loses its acknowledgement; it has no lookup
    # and no idempotency guarantee, so nobody but an operator can say it happened.
    api = RefundAPI(
        idempotency_guaranteed=False,
        lookup=Lookup.NONE,
        faults=FaultPlan({1: Fault.LOSE_ACK}),
        path=workdir / "api.db",
    )
    print("1. The agent refunds ORD-7; the acknowledgement is lost.")
    if not await start(workdir, api):
        return 1
    print("2. Resuming before anyone checked: the ledger still says QUARANTINED.")
    if await resume(workdir, api) is not None:
        print("FAIL: a quarantined refund must not complete the turn")
        return 1
    print("3. The operator checks the provider and confirms the refund.")
    operator_confirms(workdir, api)
    print("4. Resuming again (fresh handles, as after a restart).")
    final = await resume(workdir, api)
    committed = api.committed()
    print(f"5. The provider holds {committed} refund(s).")
    if final is None or committed != 1:
        print("FAIL: expected a completed turn and exactly one refund")
        return 1
    print("OK: one refund, and the turn completed only once it was confirmed.")
    return 0


if __name__ == "__main__":
    # effectguard installs no log handler; this one prints each event it logs as one short line.
    logging.basicConfig(level=logging.WARNING, format="  log: %(levelname)s %(message).100s")
    logging.getLogger("effectguard").setLevel(logging.INFO)
    logging.getLogger("google_adk").setLevel(logging.ERROR)  # ADK notes a scripted model's usage
    with tempfile.TemporaryDirectory(prefix="effectguard-google-adk-") as directory:
        sys.exit(asyncio.run(main(Path(directory))))
