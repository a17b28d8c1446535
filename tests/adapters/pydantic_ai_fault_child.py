"""One process of the Pydantic AI fault tests: pause a run, or settle and resume it.

``start DIR FAULT [hang]`` runs the agent until it defers a capture whose first
attempt meets FAULT (``lose_ack``, ``fail_before_commit``), keeps the message
history and the deferred requests as JSON in DIR, prints one JSON line and,
with ``hang``, then waits to be killed. ``resume DIR [race]`` settles the
deferred calls against the ledger and, when nothing waits, resumes the run;
with ``race`` it first prints ``ready`` and waits for DIR/go. A second attempt
(after an operator's authorize-retry) is held a second before it commits, so a
racing resume finds it in flight.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from fault_children import wait_for_go

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from pydantic import TypeAdapter
from pydantic_ai import DeferredToolRequests, ModelMessagesTypeAdapter
from pydantic_ai_support import ScriptedModel, agent, capture, capture_tool, run

from effectguard import EffectExecutor, SQLiteEffectLedger, call_scoped
from effectguard.adapters.pydantic_ai import as_tool, settle_deferred
from effectguard.testkit import FakePaymentProvider, Fault, FaultPlan, Lookup

REQUESTS = TypeAdapter(DeferredToolRequests)


def main(command: str, workdir: Path, options: list[str]) -> dict[str, Any]:
    """Run ``command`` in ``workdir``; return what the parent checks."""
    kept = workdir / "fault.txt"
    if command == "start":
        kept.write_text(options.pop(0), encoding="utf-8")
    provider = FakePaymentProvider(
        idempotency_guaranteed=False,
        lookup=Lookup.NONE,
        faults=FaultPlan({1: Fault(kept.read_text(encoding="utf-8")), 2: Fault.LATE_COMMIT}),
        path=workdir / "provider.db",
        late_commit_after=1.0,
    )
    executor = EffectExecutor(SQLiteEffectLedger(workdir / "ledger.db"))
    tool = capture_tool(provider, executor, "sync", operation_id=call_scoped("capture"))
    script = ScriptedModel([capture("INV-42", "call-1")])
    target = agent(script, [as_tool(tool)])
    if command == "start":
        result = run("sync", target, user_prompt="charge INV-42")
        (workdir / "history.json").write_bytes(
            ModelMessagesTypeAdapter.dump_json(result.all_messages())
        )
        (workdir / "requests.json").write_bytes(REQUESTS.dump_json(result.output))
        return {"metadata": result.output.metadata["call-1"]}
    if options == ["race"]:
        wait_for_go(workdir)
    history = ModelMessagesTypeAdapter.validate_json((workdir / "history.json").read_bytes())
    requests = REQUESTS.validate_json((workdir / "requests.json").read_bytes())
    results, waiting = settle_deferred(requests, [tool])
    if waiting:
        return {"waiting": [w.to_json() for w in waiting]}
    resumed = run("sync", target, message_history=history, deferred_tool_results=results)
    return {"output": resumed.output, "seen": [content for _, content, _ in script.seen]}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], Path(sys.argv[2]), sys.argv[3:])), flush=True)
    if sys.argv[4:] == ["hang"]:
        time.sleep(600)  # paused; the parent kills this process now
