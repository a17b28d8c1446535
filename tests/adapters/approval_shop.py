"""A refund that needs a person's approval above 100.00, for the adapters' approval tests.

The provider keeps its state in DIR/payments.db, so every process sees what
the others committed: ``provider.committed()`` is the ground truth each test
asserts on. The ledger is named by its target (a SQLite path or a
``postgresql://`` URL), so the same children run on both backends.

Children, one process each:

- ``python approval_shop.py mcp DIR LEDGER``: the refund served over MCP stdio;
- ``python approval_shop.py agents PHASE DIR LEDGER``: one phase of an OpenAI
  Agents run. ``pause`` runs until the SDK's approval interruption and writes
  the ``RunState`` to DIR/state.json; ``decide`` reads it back, approves (or,
  with ``deny``, rejects) through the SDK, records the decisions in the ledger
  and writes the state again; ``resume`` reads it and runs on. Each prints
  one JSON line.
"""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from effectguard import INJECTED, EffectExecutor, EffectLedger, effect, open_ledger
from effectguard.testkit import FakePaymentProvider, Lookup

#: Above this many cents a refund needs a person's approval.
LIMIT = 10_000
OPERATION = "refund:INV-9"
ARGUMENTS = {"invoice_id": "INV-9", "amount_cents": 25_000, "card_token": "tok_SECRET"}
AUDIT = {"actor": "alice", "reason": "the customer asked", "evidence_reference": "T-34"}


@dataclass
class Refunds:
    """One test's provider, ledger and the refund tool over them."""

    provider: FakePaymentProvider
    ledger: EffectLedger
    refund: Any
    #: The ledger as ``agent-effect-ops --db`` and the children take it.
    ledger_target: str

    def close(self) -> None:
        """Close the ledger (the provider's store is left to its threads; see effect_shop)."""
        self.ledger.close()


def open_refunds(directory: Path, ledger_target: str, *, kind: str = "sync") -> Refunds:
    """The refund tool over DIR/payments.db and the ledger ``ledger_target``: sync or async."""
    provider = FakePaymentProvider(
        idempotency_guaranteed=False, lookup=Lookup.NONE, path=directory / "payments.db"
    )
    ledger = open_ledger(ledger_target)
    guard = effect(
        operation_id="refund:{invoice_id}",
        idempotency_key="refund:{invoice_id}",
        requires_approval=lambda a: a["amount_cents"] > LIMIT,
        redact=("card_token",),
        executor=EffectExecutor(ledger),
    )
    make = _sync_refund if kind == "sync" else _async_refund
    return Refunds(provider, ledger, guard(make(provider)), ledger_target)


def _sync_refund(provider: FakePaymentProvider) -> Any:
    def refund(
        invoice_id: str, amount_cents: int, card_token: str, *, idempotency_key: str = INJECTED
    ) -> dict[str, Any]:
        """Refund an invoice to a card.

        Args:
            invoice_id: The invoice to refund, e.g. INV-9.
            amount_cents: How much to refund, in cents.
            card_token: The card to refund to.
            idempotency_key: Supplied by the executor, never by the model.
        """
        return provider.capture(invoice_id, -amount_cents, idempotency_key=idempotency_key)

    return refund


def _async_refund(provider: FakePaymentProvider) -> Any:
    async def refund(
        invoice_id: str, amount_cents: int, card_token: str, *, idempotency_key: str = INJECTED
    ) -> dict[str, Any]:
        """Refund an invoice to a card.

        Args:
            invoice_id: The invoice to refund, e.g. INV-9.
            amount_cents: How much to refund, in cents.
            card_token: The card to refund to.
            idempotency_key: Supplied by the executor, never by the model.
        """
        return provider.capture(invoice_id, -amount_cents, idempotency_key=idempotency_key)

    return refund


def _serve_mcp(directory: Path, ledger_target: str) -> None:
    from mcp.server.mcpserver import MCPServer  # noqa: PLC0415 - only this child needs mcp

    from effectguard.adapters.mcp import register  # noqa: PLC0415 - imports mcp

    refunds = open_refunds(directory, ledger_target)
    server = MCPServer("refunds")
    register(server, refunds.refund)
    try:
        server.run("stdio")
    finally:
        refunds.close()


async def _agents_phase(phase: str, directory: Path, ledger_target: str, *extra: str) -> None:
    from agents import Runner, RunState  # noqa: PLC0415 - only this child needs the SDK
    from openai_agents_support import (  # noqa: PLC0415 - imports the SDK
        OFFLINE,
        ScriptModel,
        say,
        shop_agent,
        tool_call,
    )

    from effectguard.adapters.openai_agents import (  # noqa: PLC0415 - imports the SDK
        approval_requests,
        record_decisions,
    )

    refunds = open_refunds(directory, ledger_target)
    state_file = directory / "state.json"
    turns = [[tool_call("refund", ARGUMENTS, "call-1")]] if phase == "pause" else []
    model = ScriptModel([*turns, [say("Refunded INV-9.")]])
    agent = shop_agent(model, refunds.refund)
    if phase == "pause":
        result = await Runner.run(agent, "Refund INV-9.", run_config=OFFLINE)
        state_file.write_text(result.to_state().to_string(), encoding="utf-8")
        report: dict[str, Any] = {
            "interruptions": len(result.interruptions),
            "approvals": [a.to_json() for a in approval_requests(result)],
        }
    elif phase == "decide":
        state = await RunState.from_string(agent, state_file.read_text("utf-8"))
        for item in state.get_interruptions():
            if extra == ("deny",):
                state.reject(item, rejection_message="Refused by a person.")
            else:
                state.approve(item)
        decisions = record_decisions(state, **AUDIT)
        state_file.write_text(state.to_string(), encoding="utf-8")
        report = {"decisions": [[d.operation_id, d.approved, d.status.value] for d in decisions]}
    else:
        state = await RunState.from_string(agent, state_file.read_text("utf-8"))
        result = await Runner.run(agent, state, run_config=OFFLINE)
        sent = model.tool_outputs() if model.inputs else {}
        report = {
            "final": result.final_output,
            "interruptions": len(result.interruptions),
            "sent": sent,
        }
    refunds.close()
    print(json.dumps(report))


def main() -> None:
    """Run the child the command line names (see the module)."""
    if sys.argv[1] == "mcp":
        _serve_mcp(Path(sys.argv[2]), sys.argv[3])
        return
    phase, directory, target, *extra = sys.argv[2:]
    asyncio.run(_agents_phase(phase, Path(directory), target, *extra))


if __name__ == "__main__":
    main()
