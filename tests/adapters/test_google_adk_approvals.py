"""Google ADK approvals: a refund over the limit pauses on ADK's confirmation, unsent.

Only the ledger's decision lets it go: nothing reaches the provider before a
person approves in the ledger, exactly one refund after; a denial is never
sent and the model reads that it must not retry. Every test counts at the
fake provider.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from approval_shop import ARGUMENTS, AUDIT, OPERATION, Refunds, open_refunds
from extras_support import import_extra

from effectguard import EffectStatus

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
    approval_requests,
    as_tool,
    decide_approval,
    settle_confirmations,
)


@pytest.fixture(params=["sync", "async"])
def refunds(request: pytest.FixtureRequest, tmp_path: Path, ledger_target: str) -> Any:
    """The refund tool, sync and async, over each ledger backend (SQLite, PostgreSQL)."""
    made = open_refunds(tmp_path, ledger_target, kind=str(request.param))
    yield made
    made.close()


async def _pause(refunds: Refunds, model: ScriptedLlm) -> tuple[Any, str, list[Any]]:
    runner = shop_runner(model, [as_tool(refunds.refund)], InMemorySessionService())
    session = await runner.session_service.create_session(app_name=APP, user_id=USER)
    events = await run(runner, session.id, "Refund INV-9.")
    return runner, session.id, events


def test_nothing_is_sent_before_the_approval_and_exactly_once_after(refunds: Refunds) -> None:
    """Paused unsent; a resume without the ledger's approval sends nothing; approve: one refund."""
    model = ScriptedLlm(turns=[[call("refund", ARGUMENTS, "fc-1")], [say("Refunded.")]])
    tool = as_tool(refunds.refund)

    async def scenario() -> None:
        runner, session_id, events = await _pause(refunds, model)
        [request] = [
            c for e in events for c in e.get_function_calls() if c.name == CONFIRMATION_CALL
        ]
        payload = request.args["toolConfirmation"]["payload"]
        assert payload["status"] == "AWAITING_APPROVAL"
        assert payload["arguments"]["card_token"] == "[redacted]"  # noqa: S105 - the mask
        assert refunds.provider.attempts() == 0

        session = await session_of(runner, session_id)
        message, waiting = settle_confirmations(session, [tool])
        assert message is None
        assert [w.status for w in waiting] == [EffectStatus.AWAITING_APPROVAL]
        # ADK's own confirmation is not an approval: the tool asks the ledger, sends nothing.
        with pytest.raises(EffectStillPending):
            await run(runner, session_id, confirmation(request.id, confirmed=True))
        assert refunds.provider.attempts() == 0

        [shown] = approval_requests(await session_of(runner, session_id), [tool])
        assert shown.operation_id == OPERATION
        assert shown.arguments["card_token"] == "[redacted]"  # noqa: S105 - the mask
        await asyncio.to_thread(decide_approval, tool, shown, approve=True, **AUDIT)
        message, waiting = settle_confirmations(await session_of(runner, session_id), [tool])
        assert waiting == []
        events = await run(runner, session_id, message)
        assert events[-1].content.parts[0].text == "Refunded."
        # The same confirmation answered again: already consumed by ADK; nothing more is sent.
        await run(runner, session_id, message)

    asyncio.run(scenario())
    assert refunds.provider.committed() == 1
    assert refunds.provider.attempts() == 1
    assert refunds.ledger.get(OPERATION).status is EffectStatus.CONFIRMED


def test_a_denial_is_never_sent_and_the_model_is_told_not_to_retry(refunds: Refunds) -> None:
    """Denied in the ledger: the resumed call reads REJECTED and sends nothing, ever."""
    model = ScriptedLlm(turns=[[call("refund", ARGUMENTS, "fc-1")], [say("Not refunded.")]])
    tool = as_tool(refunds.refund)

    async def scenario() -> None:
        runner, session_id, _ = await _pause(refunds, model)
        [shown] = approval_requests(await session_of(runner, session_id), [tool])
        await asyncio.to_thread(decide_approval, tool, shown, approve=False, **AUDIT)
        message, waiting = settle_confirmations(await session_of(runner, session_id), [tool])
        assert waiting == []
        await run(runner, session_id, message)

    asyncio.run(scenario())
    answer = model.read()[-1]["error"]
    assert "a person denied" in answer
    assert "do not retry" in answer
    assert refunds.provider.attempts() == 0
    assert refunds.ledger.get(OPERATION).status is EffectStatus.REJECTED


def test_adk_keeps_the_models_arguments_in_the_session_unredacted(refunds: Refunds) -> None:
    """What the docs warn of: redact= masks the ledger's copy, not the session event's."""
    model = ScriptedLlm(turns=[[call("refund", ARGUMENTS, "fc-1")]])

    async def scenario() -> Any:
        runner, session_id, _ = await _pause(refunds, model)
        return await session_of(runner, session_id)

    session = asyncio.run(scenario())
    [original] = [c for e in session.events for c in e.get_function_calls() if c.name == "refund"]
    assert original.args["card_token"] == ARGUMENTS["card_token"]
    assert refunds.ledger.get(OPERATION).arguments["card_token"] == "[redacted]"  # noqa: S105 - the mask
