"""One side of the Pydantic AI restart test, in a process of its own.

``start DIR FLAVOUR`` runs the agent until it pauses on a capture whose
acknowledgement is lost, and keeps the run's message history and deferred
requests as JSON files in DIR. ``resume DIR FLAVOUR`` is a new process with
the same ledger and provider files: it settles the deferred calls against the
ledger and resumes the run. Each prints a JSON report on stdout.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from pydantic import TypeAdapter
from pydantic_ai import DeferredToolRequests, ModelMessagesTypeAdapter
from pydantic_ai_support import ScriptedModel, agent, capture, capture_tool, run

from effectguard import EffectExecutor, SQLiteEffectLedger, call_scoped
from effectguard.adapters.pydantic_ai import (
    as_tool,
    asettle_deferred,
    settle_deferred,
)
from effectguard.testkit import FakePaymentProvider, Fault, FaultPlan, Lookup

REQUESTS = TypeAdapter(DeferredToolRequests)


def main(command: str, workdir: Path, flavour: str) -> dict[str, Any]:
    """Run ``command`` in ``workdir``; return what the parent checks."""
    provider = FakePaymentProvider(
        idempotency_guaranteed=False,
        lookup=Lookup.NONE,
        faults=FaultPlan({1: Fault.LOSE_ACK}),
        path=workdir / "provider.db",
    )
    executor = EffectExecutor(SQLiteEffectLedger(workdir / "ledger.db"))
    tool = capture_tool(provider, executor, flavour, operation_id=call_scoped("capture"))
    script = ScriptedModel([capture("INV-42", "call-1")])
    target = agent(script, [as_tool(tool)])
    if command == "start":
        result = run(flavour, target, user_prompt="charge INV-42")
        (workdir / "history.json").write_bytes(
            ModelMessagesTypeAdapter.dump_json(result.all_messages())
        )
        (workdir / "requests.json").write_bytes(REQUESTS.dump_json(result.output))
        if not isinstance(result.output, DeferredToolRequests):
            return {"paused": False, "output": result.output}
        return {"paused": True, "conversation_id": result.all_messages()[-1].conversation_id}
    history = ModelMessagesTypeAdapter.validate_json((workdir / "history.json").read_bytes())
    requests = REQUESTS.validate_json((workdir / "requests.json").read_bytes())
    if flavour == "async":
        results, waiting = asyncio.run(asettle_deferred(requests, [tool]))
    else:
        results, waiting = settle_deferred(requests, [tool])
    if waiting:
        return {"waiting": [w.to_json() for w in waiting]}
    resumed = run(flavour, target, message_history=history, deferred_tool_results=results)
    return {"output": resumed.output, "seen": [content for _, content, _ in script.seen]}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], Path(sys.argv[2]), sys.argv[3])))
