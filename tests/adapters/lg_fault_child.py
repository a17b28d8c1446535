"""One process of the LangGraph fault tests: pause a run, or resume it, from shared files.

``python lg_fault_child.py start WORKDIR FAULT [hang]`` runs the graph until it
pauses on the capture, whose first attempt meets FAULT (``lose_ack``,
``fail_before_commit``), prints one JSON line and, with ``hang``, then waits
to be killed.
``python lg_fault_child.py resume WORKDIR [race]`` resumes the thread; with
``race`` it first prints ``ready`` and waits for WORKDIR/go, so two resumes
start together. Ledger, providers and LangGraph's SQLite checkpoints are files
in WORKDIR. A second attempt (after an operator's authorize-retry) is held a
second before it commits, so a racing resume finds it in flight.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

from fault_children import wait_for_go
from langgraph.checkpoint.sqlite import SqliteSaver
from lg_world import calls, make_world, pay, start_message, tool_messages

from effectguard.adapters.langgraph import resume_command
from effectguard.testkit import Fault

CONFIG = {"configurable": {"thread_id": "thread-faults"}}


def summary(state: dict[str, Any]) -> dict[str, Any]:
    """What the parent checks: the pause, the payment's tool message, the final answer."""
    message = tool_messages(state).get("call_pay")
    return {
        "paused": [i.value for i in state.get("__interrupt__", ())],
        "payment": None if message is None else message.content,
        "final": state["messages"][-1].content,
    }


def main(command: str, workdir: Path, options: list[str]) -> None:
    """Run ``command``; the model's script starts over in each process, so resume has no turns."""
    kept = workdir / "fault.txt"
    if command == "start":
        kept.write_text(options.pop(0), encoding="utf-8")
    faults = [Fault(kept.read_text(encoding="utf-8")), Fault.LATE_COMMIT]
    option = options[0] if options else None
    world = make_world(workdir, is_async=False, payment_faults=faults, late_commit_after=1.0)
    turns = [calls(pay())] if command == "start" else []
    with sqlite3.connect(workdir / "checkpoints.db", check_same_thread=False) as connection:
        graph = world.graph(turns, SqliteSaver(connection))
        if command == "start":
            state = graph.invoke(start_message(), CONFIG)
        else:
            if option == "race":
                wait_for_go(workdir)
            state = graph.invoke(resume_command(graph, CONFIG), CONFIG)
        print(json.dumps(summary(state)), flush=True)
        if option == "hang":
            time.sleep(600)  # paused, and still holding the checkpointer: the parent kills it


if __name__ == "__main__":
    logging.disable(logging.WARNING)
    main(sys.argv[1], Path(sys.argv[2]), sys.argv[3:])
