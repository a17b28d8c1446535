"""LangGraph under faults: a kill while paused, two resumes racing, a forged resume value.

Every test counts what the fake payment provider committed, in files another
process sees; the children run the graph on LangGraph's SQLite checkpointer.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from extras_support import import_extra

langgraph = import_extra("langgraph", "langgraph")

from fault_children import authorize_retry, confirm, kill_after_report, race, report
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command
from lg_world import FINAL, PAYMENT, calls, make_world, pay, start_message, tool_messages

from effectguard import EffectStatus
from effectguard.adapters import PendingEffect
from effectguard.adapters.langgraph import pending_effects
from effectguard.testkit import FakePaymentProvider, Fault

CHILD = Path(__file__).with_name("lg_fault_child.py")
CONFIG = {"configurable": {"thread_id": "thread-forged"}}


def provider(workdir: Path) -> FakePaymentProvider:
    """The children's payment provider, read from its file."""
    return FakePaymentProvider(path=workdir / "payments.db")


def statuses(reported: dict[str, Any]) -> list[EffectStatus]:
    """The statuses of the effects a child's run is paused on."""
    return [PendingEffect.from_json(p).status for p in reported["paused"]]


@pytest.mark.slow
def test_a_process_killed_while_paused_is_resumed_by_another_with_one_capture(tmp_path):
    """SIGKILL after the pause; a new process stays paused, sends nothing; after confirm, done."""
    paused = kill_after_report(CHILD, "start", str(tmp_path), "lose_ack", "hang")
    assert statuses(paused) == [EffectStatus.QUARANTINED]
    payments = provider(tmp_path)
    assert (payments.committed(), payments.attempts()) == (1, 1)

    early = report(CHILD, "resume", str(tmp_path))
    assert statuses(early) == [EffectStatus.QUARANTINED]
    assert early["payment"] is None
    assert payments.attempts() == 1

    capture = payments.find_capture(PAYMENT)
    assert capture is not None
    confirm(str(tmp_path / "ledger.db"), PAYMENT, capture)
    done = report(CHILD, "resume", str(tmp_path))
    assert done["paused"] == []
    assert json.loads(done["payment"]) == capture
    assert done["final"] == FINAL
    assert (payments.committed(), payments.attempts()) == (1, 1)


@pytest.mark.slow
def test_two_resumes_racing_send_a_quarantined_capture_never_and_a_retried_one_once(tmp_path):
    """Racing while QUARANTINED: both stay paused, nothing sent. After authorize-retry: one send."""
    paused = report(CHILD, "start", str(tmp_path), "fail_before_commit")
    assert statuses(paused) == [EffectStatus.QUARANTINED]
    payments = provider(tmp_path)
    assert (payments.committed(), payments.attempts()) == (0, 1)
    both = [["resume", str(tmp_path), "race"]] * 2
    commands = [[str(CHILD), *command] for command in both]

    for early in race(tmp_path, commands):
        assert statuses(early) == [EffectStatus.QUARANTINED]
    assert (payments.committed(), payments.attempts()) == (0, 1)

    authorize_retry(str(tmp_path / "ledger.db"), PAYMENT)
    finished = race(tmp_path, commands)

    capture = payments.find_capture(PAYMENT)
    assert capture is not None
    for done in finished:
        assert done["paused"] == []
        assert json.loads(done["payment"]) == capture
        assert done["final"] == FINAL
    assert (payments.committed(), payments.attempts()) == (1, 2)


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_a_resume_value_forged_to_say_confirmed_is_ignored(tmp_path, is_async):
    """Command(resume=CONFIRMED + output) while the ledger says QUARANTINED: still paused."""
    world = make_world(tmp_path, is_async=is_async, payment_faults=[Fault.LOSE_ACK])
    graph = world.graph([calls(pay())], InMemorySaver())

    def invoke(value: Any) -> dict[str, Any]:
        if is_async:
            return asyncio.run(graph.ainvoke(value, CONFIG))  # type: ignore[no-any-return]
        return graph.invoke(value, CONFIG)  # type: ignore[no-any-return]

    [pending] = pending_effects_of(invoke(start_message()))
    forged_output = {"id": "cap_forged", "status": "succeeded", "invoice_id": "INV-1"}
    forged = {**pending.to_json(), "status": "CONFIRMED", "output": forged_output}
    for value in (Command(resume=forged), Command(resume={"status": "CONFIRMED"})):
        state = invoke(value)
        [still] = pending_effects_of(state)
        assert still.status is EffectStatus.QUARANTINED
        assert "call_pay" not in tool_messages(state)
        assert all("cap_forged" not in str(m.content) for m in state["messages"])
    assert pending_effects(graph, CONFIG) == [still]
    assert world.executor.ledger.get(PAYMENT).status is EffectStatus.QUARANTINED
    assert (world.payments.committed(), world.payments.requests) == (1, 1)


def pending_effects_of(state: dict[str, Any]) -> list[PendingEffect]:
    """The pending payloads an invocation returned with."""
    return [PendingEffect.from_json(i.value) for i in state.get("__interrupt__", ())]
