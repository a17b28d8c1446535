"""CrewAI approvals: a refund over the limit pauses unsent; the ledger's approval sends it once.

The approval comes from the operator's channel (``agent-effect-ops approve``),
never from the crew: kicking off again before it sends nothing, after it sends
the refund once; a denial is a final refusal the model reads. Every test
counts what the fake provider committed.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from approval_shop import ARGUMENTS, OPERATION, open_refunds
from extras_support import import_extra
from fault_children import AUDIT, ops

from effectguard import EffectStatus

crewai = import_extra("crewai", "crewai")

from crewai_support import ScriptLLM, action, final, shop_crew  # noqa: E402 - after the check

from effectguard.adapters.crewai import CrewPaused  # noqa: E402 - after the check


def _refunds(tmp_path: Path):
    return open_refunds(tmp_path, str(tmp_path / "ledger.db"))


def test_a_refund_over_the_limit_pauses_unsent_until_the_ledger_approves_it(tmp_path):
    """Pause with the ledger's (redacted) arguments; again before approval: unsent; after: once."""
    shop = _refunds(tmp_path)
    with pytest.raises(CrewPaused) as paused:
        shop_crew(ScriptLLM([action("refund", ARGUMENTS)]), shop.refund).kickoff()
    [request] = paused.value.approvals
    assert request.operation_id == OPERATION
    assert request.arguments == {**ARGUMENTS, "card_token": "[redacted]"}
    assert request.approve_command.startswith("agent-effect-ops --db ")
    assert shop.provider.attempts() == 0

    with pytest.raises(CrewPaused):
        shop_crew(ScriptLLM([action("refund", ARGUMENTS)]), shop.refund).kickoff()
    assert shop.provider.attempts() == 0

    command = shlex.split(request.approve_command)
    assert command[:4] == ["agent-effect-ops", "--db", shop.ledger_target, "approve"]
    ops(shop.ledger_target, "approve", OPERATION, *AUDIT)
    for _ in range(2):
        llm = ScriptLLM([action("refund", ARGUMENTS), final("Refunded INV-9.")])
        assert shop_crew(llm, shop.refund).kickoff().raw == "Refunded INV-9."
    assert (shop.provider.committed(), shop.provider.attempts()) == (1, 1)
    shop.close()


def test_a_denied_refund_is_a_final_refusal_the_model_reads_and_nothing_is_sent(tmp_path):
    """Deny in the ledger: the next call is REJECTED, the model is told not to retry; unsent."""
    shop = _refunds(tmp_path)
    with pytest.raises(CrewPaused):
        shop_crew(ScriptLLM([action("refund", ARGUMENTS)]), shop.refund).kickoff()
    ops(shop.ledger_target, "deny", OPERATION, *AUDIT)
    llm = ScriptLLM([action("refund", ARGUMENTS), final("Could not refund.")])
    assert shop_crew(llm, shop.refund).kickoff().raw == "Could not refund."
    [seen] = llm.observations()
    assert "rejected" in seen
    assert "do not retry it" in seen
    assert shop.provider.attempts() == 0
    assert shop.ledger.get(OPERATION).status is EffectStatus.REJECTED
    shop.close()
