"""One process of the OpenAI Agents fault tests: run until paused, or settle and run on.

``python openai_agents_fault_child.py start DIR FAULT [hang]`` runs the agent
until ``stop_on_unconfirmed`` ends it on a capture whose first attempt meets
FAULT (``lose_ack``, ``fail_before_commit``), keeps ``result.to_input_list()``
in DIR/items.json, prints one JSON line and, with ``hang``, then waits to be
killed. ``resume DIR [race]`` settles the kept items against the ledger and,
when nothing waits, runs on; with ``race`` it first prints ``ready`` and waits
for DIR/go. A second attempt (after an operator's authorize-retry) is held a
second before it commits, so a racing resume finds it in flight.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from agents import Runner
from effect_shop import open_shop
from fault_children import wait_for_go
from openai_agents_support import OFFLINE, ScriptModel, say, shop_agent, tool_call

from effectguard.adapters.openai_agents import pending_effects, settle_input
from effectguard.testkit import Fault

ARGUMENTS = {"invoice_id": "INV-7", "amount_cents": 700}


async def main(command: str, workdir: Path, options: list[str]) -> dict[str, Any]:
    """Run ``command`` in ``workdir``; return what the parent checks."""
    kept = workdir / "fault.txt"
    if command == "start":
        kept.write_text(options.pop(0), encoding="utf-8")
    faults = [Fault(kept.read_text(encoding="utf-8")), Fault.LATE_COMMIT]
    shop = open_shop(workdir, payment_faults=faults, late_commit_after=1.0)
    if command == "start":
        model = ScriptModel([[tool_call("capture", ARGUMENTS, "call-1")]])
        result = await Runner.run(
            shop_agent(model, shop.capture), "Capture INV-7.", run_config=OFFLINE
        )
        items = result.to_input_list()
        (workdir / "items.json").write_text(json.dumps(items), encoding="utf-8")
        pending = [p.to_json() for p in pending_effects(result)]
        return {"final": result.final_output, "pending": pending}
    if options == ["race"]:
        wait_for_go(workdir)
    items = json.loads((workdir / "items.json").read_text(encoding="utf-8"))
    settled, waiting = await asyncio.to_thread(settle_input, items, [shop.capture])
    if waiting:
        return {"waiting": [w.to_json() for w in waiting]}
    model = ScriptModel([[say("Captured INV-7.")]])
    result = await Runner.run(shop_agent(model, shop.capture), settled, run_config=OFFLINE)
    return {"final": result.final_output, "sent": model.tool_outputs()}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1], Path(sys.argv[2]), sys.argv[3:]))), flush=True)
    if sys.argv[4:] == ["hang"]:
        time.sleep(600)  # paused; the parent kills this process now
