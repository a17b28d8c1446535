"""One process of the LangGraph approval test: start a run, approve it, resume it, or ask again.

``python lg_approval_child.py start|approve|resume|again WORKDIR`` prints one
JSON line. Ledger, provider and LangGraph's SQLite checkpoints are files in
WORKDIR, so each process carries on where the one before stopped: ``start``
runs until the refund's approval interrupt; ``approve`` records the decision
with ``approve_pending`` and runs nothing; ``resume`` resumes with
``resume_command``; ``again`` asks for the same refund in a new thread.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from langgraph.checkpoint.sqlite import SqliteSaver
from lg_approval_world import REFUND, asked, make_refunds, start_message
from lg_world import tool_messages

from effectguard import SQLiteEffectLedger
from effectguard.adapters.langgraph import approve_pending, resume_command

CONFIG = {"configurable": {"thread_id": "thread-approval"}}
DECISION = {"actor": "alice", "reason": "checked the claim", "evidence_reference": "T-9"}


def main(command: str, workdir: Path) -> dict[str, Any]:
    """Run ``command`` in ``workdir``; return what the parent checks."""
    ledger = SQLiteEffectLedger(workdir / "ledger.db")
    refunds = make_refunds(ledger, is_async=False, provider_path=workdir / "payments.db")
    turns = asked() if command == "start" else asked("call_again") if command == "again" else []
    config = {"configurable": {"thread_id": "thread-again"}} if command == "again" else CONFIG
    with sqlite3.connect(workdir / "checkpoints.db", check_same_thread=False) as connection:
        graph = refunds.graph(turns, SqliteSaver(connection))
        if command == "approve":
            approve_pending(graph, CONFIG, ledger=ledger, **DECISION)
            record = ledger.get(REFUND)
            return {"status": None if record is None else record.status.value}
        value = start_message() if command in ("start", "again") else resume_command(graph, CONFIG)
        state = graph.invoke(value, config)
    messages = tool_messages(state)
    message = messages.get("call_again" if command == "again" else "call_refund")
    return {
        "paused": [i.value for i in state.get("__interrupt__", ())],
        "refund": None if message is None else message.content,
        "committed": refunds.provider.committed(),
    }


if __name__ == "__main__":
    logging.disable(logging.WARNING)
    print(json.dumps(main(sys.argv[1], Path(sys.argv[2]))))
