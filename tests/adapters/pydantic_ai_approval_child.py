"""One process of the Pydantic AI approval test: start a run, approve it, or settle and resume.

``python pydantic_ai_approval_child.py start|approve|resume DIR`` prints one
JSON line. ``start`` runs the agent until the capture's approval is deferred
and keeps the message history and the deferred requests as JSON in DIR;
``approve`` records the application's approval with ``record_approvals`` and
runs nothing; ``resume`` settles the requests against the ledger and, when
nothing waits, resumes the run. Ledger and provider are files in DIR.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from pydantic import TypeAdapter
from pydantic_ai import DeferredToolRequests, DeferredToolResults, ModelMessagesTypeAdapter
from pydantic_ai_support import ScriptedModel, agent, capture, capture_tool, run

from effectguard import EffectExecutor, SQLiteEffectLedger
from effectguard.adapters.pydantic_ai import as_tool, record_approvals, settle_deferred
from effectguard.testkit import FakePaymentProvider

REQUESTS = TypeAdapter(DeferredToolRequests)
DECISION = {"actor": "alice", "reason": "the order checks out", "evidence_reference": "T-7"}


def main(command: str, workdir: Path) -> dict[str, Any]:
    """Run ``command`` in ``workdir``; return what the parent checks."""
    provider = FakePaymentProvider(idempotency_guaranteed=False, path=workdir / "provider.db")
    ledger = SQLiteEffectLedger(workdir / "ledger.db")
    fn = capture_tool(provider, EffectExecutor(ledger), "sync", requires_approval=True)
    script = ScriptedModel([capture("INV-1", "call-1")])
    target = agent(script, [as_tool(fn)])
    if command == "start":
        result = run("sync", target, user_prompt="charge INV-1")
        (workdir / "history.json").write_bytes(
            ModelMessagesTypeAdapter.dump_json(result.all_messages())
        )
        (workdir / "requests.json").write_bytes(REQUESTS.dump_json(result.output))
        return {"metadata": result.output.metadata["call-1"], "committed": provider.committed()}
    requests = REQUESTS.validate_json((workdir / "requests.json").read_bytes())
    if command == "approve":
        decision = DeferredToolResults(approvals={"call-1": True})
        record_approvals(requests, decision, [fn], **DECISION)
        record = ledger.get("invoice:INV-1:capture")
        return {"status": None if record is None else record.status.value}
    results, waiting = settle_deferred(requests, [fn])
    if waiting:
        return {"waiting": [w.to_json() for w in waiting], "committed": provider.committed()}
    history = ModelMessagesTypeAdapter.validate_json((workdir / "history.json").read_bytes())
    resumed = run("sync", target, message_history=history, deferred_tool_results=results)
    return {"output": resumed.output, "committed": provider.committed()}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], Path(sys.argv[2]))), flush=True)
