"""One process of the approval fault tests: LangGraph, OpenAI Agents, Pydantic AI or MCP.

``python approval_fault_child.py FRAMEWORK PHASE DIR LEDGER [OPTION]``, with
FRAMEWORK ``lg``, ``agents``, ``pai`` or ``mcp``, prints one JSON line.
``pause`` runs until the refund's approval pause (for MCP: the client's call
comes back as the tool error carrying the approval); ``approve`` records a
person's approval (LangGraph's ``approve_pending``; the SDK's ``approve`` plus
``record_decisions``; Pydantic AI's ``record_approvals``; for MCP, which has no
approval of its own, the ledger's ``approve``) and runs nothing; ``resume``
runs on (for MCP: the client calls the tool again). With ``race``, resume prints ``ready`` and waits
for DIR/go, and the refund is held half a second after the provider commits,
so racing resumes find it in flight. With ``hold``, the refund, once the
provider has committed, prints ``{"held": ...}`` and waits to be killed.

The provider (DIR/payments.db) deduplicates nothing, so a second send is a
second effect; its lookup is strong, so a process that finds a dead one's
lease probes the provider instead of sending again.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fault_children import wait_for_go

from effectguard import INJECTED, EffectExecutor, EffectLedger, effect, open_ledger
from effectguard.testkit import FakePaymentProvider, Lookup

OPERATION = "refund:INV-9"
ARGUMENTS = {"invoice_id": "INV-9", "amount_cents": 25_000, "card_token": "tok_SECRET"}
AUDIT = {"actor": "alice", "reason": "the customer asked", "evidence_reference": "T-34"}
CONFIG = {"configurable": {"thread_id": "thread-approval-faults"}}
#: A dead process's lease lapses after this many seconds; a waiting peer then probes.
LEASE = 3.0


def make_refund(directory: Path, ledger: EffectLedger, option: str | None) -> Any:
    """The refund tool: approval above 100.00; held after the provider commits, per ``option``."""
    provider = FakePaymentProvider(
        idempotency_guaranteed=False, lookup=Lookup.STRONG, path=directory / "payments.db"
    )

    def probe(invoice_id: str, amount_cents: int, card_token: str, *, idempotency_key: str) -> Any:
        return provider.probe({"invoice_id": invoice_id}, idempotency_key=idempotency_key)

    @effect(
        name="tests.approval_faults.refund",
        operation_id="refund:{invoice_id}",
        idempotency_key="refund:{invoice_id}",
        requires_approval=lambda a: a["amount_cents"] > 10_000,
        redact=("card_token",),
        probe=probe,
        lease=LEASE,
        executor=EffectExecutor(ledger, poll_interval=0.02, wait_for_peer=60.0),
    )
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
        sent = provider.capture(invoice_id, -amount_cents, idempotency_key=idempotency_key)
        if option == "race":
            time.sleep(0.5)  # in flight while the other resumes arrive
        elif option == "hold":
            print(json.dumps({"held": idempotency_key}), flush=True)
            time.sleep(600)  # committed at the provider, not yet in the ledger: killed here
        return sent

    return refund


def langgraph(phase: str, directory: Path, ledger: EffectLedger, option: str | None) -> Any:
    """One LangGraph phase over the SQLite checkpoints in DIR."""
    from langgraph.checkpoint.sqlite import SqliteSaver  # noqa: PLC0415 - only lg needs it
    from lg_approval_world import Refunds, start_message  # noqa: PLC0415 - imports langgraph
    from lg_world import calls, tool_messages  # noqa: PLC0415 - imports langgraph

    from effectguard.adapters.langgraph import (  # noqa: PLC0415 - imports langgraph
        approve_pending,
        resume_command,
    )

    refund = make_refund(directory, ledger, option)
    provider = FakePaymentProvider(path=directory / "payments.db")
    refunds = Refunds(provider, None, refund, is_async=False)  # type: ignore[arg-type]
    turns = [calls(("refund", ARGUMENTS, "call_refund"))] if phase == "pause" else []
    with sqlite3.connect(directory / "checkpoints.db", check_same_thread=False) as connection:
        graph = refunds.graph(turns, SqliteSaver(connection))
        if phase == "approve":
            approve_pending(graph, CONFIG, ledger=ledger, **AUDIT)
            record = ledger.get(OPERATION)
            return {"status": None if record is None else record.status.value}
        if phase == "pause":
            state = graph.invoke(start_message(), CONFIG)
        else:
            if option == "race":
                wait_for_go(directory)
            state = graph.invoke(resume_command(graph, CONFIG), CONFIG)
    message = tool_messages(state).get("call_refund")
    return {
        "paused": [i.value for i in state.get("__interrupt__", ())],
        "refund": None if message is None else message.content,
        "final": state["messages"][-1].content,
    }


async def agents(phase: str, directory: Path, ledger: EffectLedger, option: str | None) -> Any:
    """One OpenAI Agents phase; the run's state is kept in DIR/state.json between them."""
    from agents import Runner, RunState  # noqa: PLC0415 - only this framework needs the SDK
    from openai_agents_support import (  # noqa: PLC0415 - imports the SDK
        OFFLINE,
        ScriptModel,
        say,
        shop_agent,
        tool_call,
    )

    from effectguard.adapters.openai_agents import (  # noqa: PLC0415 - imports the SDK
        record_decisions,
    )

    refund = make_refund(directory, ledger, option)
    state_file = directory / "state.json"
    turns = [[tool_call("refund", ARGUMENTS, "call-1")]] if phase == "pause" else []
    model = ScriptModel([*turns, [say("Refunded INV-9.")]])
    agent = shop_agent(model, refund)
    if phase == "pause":
        result = await Runner.run(agent, "Refund INV-9.", run_config=OFFLINE)
        state_file.write_text(result.to_state().to_string(), encoding="utf-8")
        return {"interruptions": len(result.interruptions)}
    state = await RunState.from_string(agent, state_file.read_text("utf-8"))
    if phase == "approve":
        for item in state.get_interruptions():
            state.approve(item)
        decisions = record_decisions(state, **AUDIT)
        state_file.write_text(state.to_string(), encoding="utf-8")
        return {"decisions": [[d.operation_id, d.status.value] for d in decisions]}
    if option == "race":
        await asyncio.to_thread(wait_for_go, directory)
    result = await Runner.run(agent, state, run_config=OFFLINE)
    return {
        "final": result.final_output,
        "interruptions": len(result.interruptions),
        "sent": model.tool_outputs() if model.inputs else {},
    }


async def pydantic_ai(phase: str, directory: Path, ledger: EffectLedger, option: str | None) -> Any:
    """One Pydantic AI phase; the history and the deferred requests are kept in DIR."""
    from pydantic import TypeAdapter  # noqa: PLC0415 - only this framework needs it
    from pydantic_ai import (  # noqa: PLC0415 - only this framework needs it
        DeferredToolRequests,
        DeferredToolResults,
        ModelMessagesTypeAdapter,
    )
    from pydantic_ai.messages import ToolCallPart  # noqa: PLC0415 - only this framework
    from pydantic_ai_support import ScriptedModel, agent  # noqa: PLC0415 - imports pydantic_ai

    from effectguard.adapters.pydantic_ai import (  # noqa: PLC0415 - imports pydantic_ai
        as_tool,
        record_approvals,
        settle_deferred,
    )

    refund = make_refund(directory, ledger, option)
    script = ScriptedModel([ToolCallPart("refund", ARGUMENTS, tool_call_id="call-1")])
    target = agent(script, [as_tool(refund)])
    requests_type = TypeAdapter(DeferredToolRequests)
    if phase == "pause":
        paused = await target.run(user_prompt="Refund INV-9.")
        (directory / "history.json").write_bytes(
            ModelMessagesTypeAdapter.dump_json(paused.all_messages())
        )
        (directory / "requests.json").write_bytes(requests_type.dump_json(paused.output))
        return {"deferred": len(paused.output.approvals)}
    requests = requests_type.validate_json((directory / "requests.json").read_bytes())
    if phase == "approve":
        decision = DeferredToolResults(approvals={"call-1": True})
        await asyncio.to_thread(record_approvals, requests, decision, [refund], **AUDIT)
        record = ledger.get(OPERATION)
        return {"status": None if record is None else record.status.value}
    if option == "race":
        await asyncio.to_thread(wait_for_go, directory)
    results, waiting = await asyncio.to_thread(settle_deferred, requests, [refund])
    history = ModelMessagesTypeAdapter.validate_json((directory / "history.json").read_bytes())
    resumed = await target.run(message_history=history, deferred_tool_results=results)
    return {
        "final": resumed.output,
        "waiting": [w.operation_id for w in waiting],
        "sent": {call: content for call, content, _ in script.seen},
    }


async def mcp(phase: str, directory: Path, ledger: EffectLedger, option: str | None) -> Any:
    """One MCP phase: a fresh server in this process and the SDK's client calling it once."""
    from mcp import Client  # noqa: PLC0415 - only this framework needs the SDK
    from mcp.server.mcpserver import MCPServer  # noqa: PLC0415 - only this framework

    from effectguard.adapters.mcp import PENDING_META_KEY, register  # noqa: PLC0415 - imports mcp

    refund = make_refund(directory, ledger, option)
    if phase == "approve":
        await asyncio.to_thread(ledger.approve, OPERATION, **AUDIT)
        record = ledger.get(OPERATION)
        return {"status": None if record is None else record.status.value}
    server = MCPServer("refunds")
    register(server, refund)
    if option == "race":
        await asyncio.to_thread(wait_for_go, directory)
    async with Client(server) as client:
        answered = await client.call_tool("refund", ARGUMENTS)
    meta = answered.meta or {}
    return {
        "is_error": answered.is_error,
        "kind": (meta.get(PENDING_META_KEY) or {}).get("kind"),
        "output": answered.structured_content,
    }


def main(framework: str, phase: str, directory: Path, target: str, option: str | None) -> None:
    """Run the phase the command line names (see the module) and print its report."""
    ledger = open_ledger(target)
    try:
        if framework == "lg":
            reported = langgraph(phase, directory, ledger, option)
        else:
            phases = {"agents": agents, "pai": pydantic_ai, "mcp": mcp}
            reported = asyncio.run(phases[framework](phase, directory, ledger, option))
    finally:
        ledger.close()
    print(json.dumps(reported), flush=True)


if __name__ == "__main__":
    logging.disable(logging.WARNING)
    main(sys.argv[1], sys.argv[2], Path(sys.argv[3]), sys.argv[4], (sys.argv[5:] or [None])[0])
