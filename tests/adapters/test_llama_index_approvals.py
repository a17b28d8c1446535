"""Approvals through LlamaIndex's human-in-the-loop pause: the ledger decides, once."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from approval_shop import ARGUMENTS, AUDIT, OPERATION, Refunds, open_refunds
from extras_support import import_extra

from effectguard import EffectStatus

import_extra("llama_index.core", "llama-index")

from llama_index_support import Script, shop_agent, until_paused  # noqa: E402 - after the check

from effectguard.adapters.llama_index import record_approval, resume_event  # noqa: E402 - after the check


@pytest.fixture(params=["sync", "async"])
def refunds(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Refunds]:
    opened = open_refunds(tmp_path, str(tmp_path / "ledger.db"), kind=str(request.param))
    yield opened
    opened.close()


def test_an_approval_pauses_shows_the_ledger_request_and_sends_once(refunds):
    """Over the limit: paused with the ledger's (masked) request; approved, sent once."""
    script = Script([[("refund", ARGUMENTS, "call-1")], "Refunded."])
    agent = shop_agent(script, refunds.refund)

    async def story():
        handler = agent.run(user_msg="Refund INV-9.")
        (paused,) = await until_paused(handler, 1)
        assert paused.status == EffectStatus.AWAITING_APPROVAL.value
        assert paused.payload["kind"] == "effectguard.approval"
        assert paused.payload["arguments"] == {**ARGUMENTS, "card_token": "[redacted]"}
        assert "approve refund:INV-9" in paused.payload["approve_command"]
        assert refunds.provider.attempts() == 0
        handler.ctx.send_event(resume_event(paused))  # no approval yet: waits again
        (again,) = await until_paused(handler, 1)
        assert again.status == EffectStatus.AWAITING_APPROVAL.value
        assert refunds.provider.attempts() == 0
        resume = await asyncio.to_thread(
            record_approval, refunds.refund, again, approve=True, **AUDIT
        )
        handler.ctx.send_event(resume)
        return await handler

    assert str(asyncio.run(story())) == "Refunded."
    assert refunds.provider.committed() == 1
    assert refunds.ledger.get(OPERATION).status is EffectStatus.CONFIRMED


def test_a_denial_reaches_the_model_as_final_and_nothing_is_sent(refunds):
    """Denied: REJECTED, never sent; the model reads a refusal that invites no retry."""
    script = Script([[("refund", ARGUMENTS, "call-1")], "Not refunded."])
    agent = shop_agent(script, refunds.refund)

    async def story():
        handler = agent.run(user_msg="Refund INV-9.")
        (paused,) = await until_paused(handler, 1)
        resume = await asyncio.to_thread(
            record_approval, refunds.refund, paused, approve=False, **AUDIT
        )
        handler.ctx.send_event(resume)
        return await handler

    assert str(asyncio.run(story())) == "Not refunded."
    text = script.results()["call-1"]
    assert "a person denied operation 'refund:INV-9'" in text
    assert "do not retry" in text
    assert refunds.provider.attempts() == 0
    assert refunds.ledger.get(OPERATION).status is EffectStatus.REJECTED


def test_below_the_limit_nobody_is_asked(refunds):
    """A refund under the limit is sent at once, without a pause."""
    small = {**ARGUMENTS, "amount_cents": 500}
    script = Script([[("refund", small, "call-1")], "Refunded."])
    agent = shop_agent(script, refunds.refund)

    async def story():
        return await agent.run(user_msg="Refund INV-9.")

    result = asyncio.run(story())
    assert str(result) == "Refunded."
    assert refunds.provider.committed() == 1
