"""One process of the Google ADK restart test: run until paused, or settle and resume.

``python google_adk_child.py start DIR [hang]`` runs the shop agent on a session kept
in DIR/sessions.db (ADK's SqliteSessionService) until the capture, whose
acknowledgement is lost, pauses on ADK's confirmation (and, with ``hang``,
then waits to be killed). ``resume DIR`` reads
that session back in a new process, settles its paused calls against the
ledger and, when none waits, resumes them. Each prints one JSON line.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from effect_shop import open_shop
from google.adk.sessions.sqlite_session_service import SqliteSessionService
from google_adk_support import APP, USER, ScriptedLlm, call, run, say, session_of, shop_runner

from effectguard.adapters.google_adk import as_tool, settle_confirmations
from effectguard.testkit import Fault

SESSION = "s-restart"


async def main(command: str, workdir: Path) -> dict[str, Any]:
    """Run ``command`` in ``workdir``; return what the parent checks."""
    faults = [Fault.LOSE_ACK] if command == "start" else []
    shop = open_shop(workdir, payment_faults=faults)
    tool = as_tool(shop.capture)
    sessions = SqliteSessionService(str(workdir / "sessions.db"))
    arguments = {"invoice_id": "INV-7", "amount_cents": 700}
    model = ScriptedLlm(turns=[[call("capture", arguments, "fc-1")], [say("Captured INV-7.")]])
    if command == "resume":
        model.turns.pop(0)
    runner = shop_runner(model, [tool], sessions)
    if command == "start":
        await sessions.create_session(app_name=APP, user_id=USER, session_id=SESSION)
        await run(runner, SESSION, "Capture INV-7.")
    message, waiting = settle_confirmations(await session_of(runner, SESSION), [tool])
    if waiting or message is None:
        return {"waiting": [w.to_json() for w in waiting]}
    events = await run(runner, SESSION, message)
    return {"final": events[-1].content.parts[0].text, "read": model.read()}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1], Path(sys.argv[2])))), flush=True)
    if sys.argv[3:] == ["hang"]:
        time.sleep(600)  # paused; the parent kills this process now
