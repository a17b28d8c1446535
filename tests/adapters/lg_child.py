"""One process of the LangGraph restart test: start a run until it pauses, or resume it.

``python lg_child.py start|resume WORKDIR sync|async`` prints one JSON line: the
pending payloads the run is paused on, the payment's tool message and the
model's last word. Ledger, providers and LangGraph's SQLite checkpoints are
files in WORKDIR, so a second process carries on where the first stopped.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
import sys
from pathlib import Path
from typing import Any

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from lg_world import calls, make_world, pay, start_message, tool_messages

from effectguard.adapters.langgraph import resume_command
from effectguard.testkit import Fault

CONFIG = {"configurable": {"thread_id": "thread-restart"}}


def summary(state: dict[str, Any]) -> dict[str, Any]:
    """What the parent checks: the pause, the payment's tool message, the final answer."""
    message = tool_messages(state).get("call_pay")
    return {
        "paused": [i.value for i in state.get("__interrupt__", ())],
        "payment": None if message is None else message.content,
        "final": state["messages"][-1].content,
    }


def main(command: str, workdir: Path, mode: str) -> dict[str, Any]:
    """Run the command; the model's script starts over in each process, so resume has no turns."""
    world = make_world(workdir, is_async=mode == "async", payment_faults=[Fault.LOSE_ACK])
    turns = [calls(pay())] if command == "start" else []
    checkpoints = str(workdir / "checkpoints.db")
    if mode == "async":

        async def go() -> dict[str, Any]:
            async with AsyncSqliteSaver.from_conn_string(checkpoints) as saver:
                graph = world.graph(turns, saver)
                value = start_message() if command == "start" else resume_command()
                return summary(await graph.ainvoke(value, CONFIG))

        return asyncio.run(go())
    with sqlite3.connect(checkpoints, check_same_thread=False) as connection:
        graph = world.graph(turns, SqliteSaver(connection))
        value = start_message() if command == "start" else resume_command(graph, CONFIG)
        return summary(graph.invoke(value, CONFIG))


if __name__ == "__main__":
    logging.disable(logging.WARNING)
    print(json.dumps(main(sys.argv[1], Path(sys.argv[2]), sys.argv[3])))
