"""One phase of an OpenAI Agents run, in a process of its own.

``python openai_agents_child.py PHASE DIR``.

``pause``: the capture's acknowledgement is lost and the run stops; the model
then asks again, the ledger gate interrupts, and the run state is written to
DIR/state.json. ``resume``: a new process reads it back, approves, and runs
on; it prints the final output and what the model was sent, as JSON.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from agents import Runner, RunState
from effect_shop import open_shop
from openai_agents_support import OFFLINE, ScriptModel, say, shop_agent, tool_call

from effectguard.testkit import Fault

ARGUMENTS = {"invoice_id": "INV-7", "amount_cents": 700}


async def pause(directory: Path) -> None:
    shop = open_shop(directory, payment_faults=[Fault.LOSE_ACK])
    model = ScriptModel(
        [[tool_call("capture", ARGUMENTS, "call-1")], [tool_call("capture", ARGUMENTS, "call-2")]]
    )
    agent = shop_agent(model, shop.capture)
    first = await Runner.run(agent, "Capture INV-7.", run_config=OFFLINE)
    again = [*first.to_input_list(), {"role": "user", "content": "Try again."}]
    second = await Runner.run(agent, again, run_config=OFFLINE)
    (directory / "state.json").write_text(second.to_state().to_string(), encoding="utf-8")
    print(json.dumps({"first": first.final_output, "interruptions": len(second.interruptions)}))


async def resume(directory: Path) -> None:
    shop = open_shop(directory, payment_faults=[Fault.LOSE_ACK])
    model = ScriptModel([[say("Captured INV-7.")]])
    agent = shop_agent(model, shop.capture)
    state = await RunState.from_string(agent, (directory / "state.json").read_text("utf-8"))
    for item in state.get_interruptions():
        state.approve(item)
    result = await Runner.run(agent, state, run_config=OFFLINE)
    print(json.dumps({"final": result.final_output, "sent": model.tool_outputs()}))


def main() -> None:
    phase, directory = sys.argv[1], Path(sys.argv[2])
    asyncio.run({"pause": pause, "resume": resume}[phase](directory))


if __name__ == "__main__":
    main()
