"""One phase of a LlamaIndex agent run, in a process of its own.

``python llama_index_child.py PHASE DIR``. ``pause``: the capture's
acknowledgement is lost, the workflow pauses, its Context is written to
DIR/context.json, and the process kills itself (SIGKILL: nothing is shut down
cleanly, the run is still waiting). ``resume``: a new process reads it back, resumes every
paused call, and prints either the pauses it is still at (the Context is
written again) or the final answer and what the model was sent, as JSON.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

from effect_shop import open_shop
from llama_index_support import Script, keep, restore, shop_agent, until_paused
from workflows.context.serializers import PickleSerializer

from effectguard.adapters.llama_index import EffectPaused, paused_calls, resume_event
from effectguard.testkit import Fault

ARGUMENTS = {"invoice_id": "INV-7", "amount_cents": 700}


async def pause(directory: Path) -> None:
    shop = open_shop(directory, payment_faults=[Fault.LOSE_ACK])
    agent = shop_agent(Script([[("capture", ARGUMENTS, "call-1")]]), shop.capture)
    handler = agent.run(user_msg="Capture INV-7.")
    paused = await until_paused(handler, 1)
    data = handler.ctx.to_dict(serializer=PickleSerializer())
    (directory / "context.json").write_text(json.dumps(data), encoding="utf-8")
    print(json.dumps({"paused": [p.operation_id for p in paused]}), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


async def resume(directory: Path) -> None:
    shop = open_shop(directory)
    script = Script(["Captured INV-7."])
    agent = shop_agent(script, shop.capture)
    ctx = restore(agent, (directory / "context.json").read_text("utf-8"))
    handler = agent.run(ctx=ctx)
    for pause in await paused_calls(ctx):
        handler.ctx.send_event(resume_event(pause))
    async for event in handler.stream_events():
        if isinstance(event, EffectPaused):
            (directory / "context.json").write_text(await keep(handler), encoding="utf-8")
            print(json.dumps({"paused": [event.operation_id]}))
            return
    final = await handler
    print(json.dumps({"final": str(final), "sent": script.results()}))


def main() -> None:
    phase, directory = sys.argv[1], Path(sys.argv[2])
    asyncio.run({"pause": pause, "resume": resume}[phase](directory))


if __name__ == "__main__":
    main()
