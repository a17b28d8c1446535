"""CrewAI: schema, one dispatch for identical calls, pause on a lost ack, resume, restart.

Every test counts what the fake payment provider committed; the crews run on a
scripted LLM (crewai_support), offline.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from effect_shop import confirm_with_cli, open_shop
from extras_support import import_extra
from fault_children import report

from effectguard import INJECTED, EffectExecutor, EffectStatus, call_scoped, effect
from effectguard.errors import ConfigurationError
from effectguard.testkit import Fault

crewai = import_extra("crewai", "crewai")

from crewai.flow.flow import Flow, start  # noqa: E402 - after the extra's check
from crewai.flow.persistence import SQLiteFlowPersistence, persist  # noqa: E402 - after the extra's check
from crewai_support import ScriptLLM, action, final, shop_crew  # noqa: E402 - after the check

from effectguard.adapters.crewai import (  # noqa: E402 - imports crewai, after the check
    CrewPaused,
    as_crewai_tool,
    waiting,
)

CHILD = Path(__file__).with_name("crewai_child.py")
OPERATION = "invoice:INV-7:capture"
I7 = {"invoice_id": "INV-7", "amount_cents": 700}


def test_the_schema_is_exactly_the_business_parameters_with_their_descriptions(tmp_path):
    """args_schema: invoice_id and amount_cents, required, described; never idempotency_key."""
    shop = open_shop(tmp_path)
    tool = as_crewai_tool(shop.capture)
    schema = tool.args_schema.model_json_schema()
    assert sorted(schema["properties"]) == ["amount_cents", "invoice_id"]
    assert sorted(schema["required"]) == ["amount_cents", "invoice_id"]
    assert schema["properties"]["invoice_id"]["description"] == (
        "The invoice to capture, e.g. INV-1042."
    )
    assert schema["properties"]["amount_cents"]["type"] == "integer"
    assert tool.name == "capture"
    assert "idempotency_key" not in tool.description
    assert "Capture the payment of an invoice." in tool.description
    shop.close()


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_confirmed_capture_reaches_the_model_and_the_crew_finishes(tmp_path, kind):
    """One call (sync or async tool): one commit, the model reads the output, the crew answers."""
    shop = open_shop(tmp_path, kind=kind)
    llm = ScriptLLM([action("capture", I7), final("Captured INV-7.")])
    out = shop_crew(llm, shop.capture).kickoff()
    assert out.raw == "Captured INV-7."
    [seen] = llm.observations()
    assert json.loads(seen) == shop.payments.effects()[0]["response"]
    assert (shop.payments.committed(), shop.payments.attempts()) == (1, 1)
    shop.close()


def test_two_identical_calls_in_parallel_crews_dispatch_once(tmp_path):
    """Two crews in two threads make the same capture at once: one dispatch, both get its output.

    The provider holds the first request for a second (a late commit), so the
    second call finds it dispatching and waits for it rather than replaying.
    """
    shop = open_shop(tmp_path, payment_faults=[Fault.LATE_COMMIT], late_commit_after=1.0)
    llms = [ScriptLLM([action("capture", I7), final("Captured INV-7.")]) for _ in range(2)]
    crews = [shop_crew(llm, shop.capture, run_id="order-7") for llm in llms]
    outputs: list[str] = []
    gate = threading.Barrier(2)

    def run(crew: object) -> None:
        gate.wait()
        outputs.append(crew.kickoff().raw)  # type: ignore[attr-defined]

    threads = [threading.Thread(target=run, args=(crew,)) for crew in crews]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert outputs == ["Captured INV-7."] * 2
    assert llms[0].observations() == llms[1].observations()
    assert (shop.payments.committed(), shop.payments.attempts()) == (1, 1)
    shop.close()


def test_a_lost_ack_pauses_the_crew_before_the_model_reads_it_and_names_the_operation(tmp_path):
    """Lost ack: CrewPaused with the operation, QUARANTINED, the operator command; one commit."""
    shop = open_shop(tmp_path, payment_faults=[Fault.LOSE_ACK])
    llm = ScriptLLM([action("capture", I7), final("Captured INV-7.")])
    with pytest.raises(CrewPaused) as paused:
        shop_crew(llm, shop.capture).kickoff()
    [pending] = paused.value.pending
    assert (pending.operation_id, pending.status) == (OPERATION, EffectStatus.QUARANTINED)
    assert pending.operator_command.startswith(f"agent-effect-ops --db {shop.ledger_path} confirm")
    assert OPERATION in str(paused.value)
    assert len(llm.sent) == 1, "the model must not read the unconfirmed outcome"
    assert (shop.payments.committed(), shop.payments.attempts()) == (1, 1)
    shop.close()


def test_resume_before_the_operator_stays_paused_and_after_confirm_finishes_once(tmp_path):
    """Kickoff while QUARANTINED: paused, nothing sent. After confirm: replayed, one commit."""
    shop = open_shop(tmp_path, payment_faults=[Fault.LOSE_ACK])
    with pytest.raises(CrewPaused) as first:
        shop_crew(ScriptLLM([action("capture", I7)]), shop.capture).kickoff()
    with pytest.raises(CrewPaused) as again:
        shop_crew(ScriptLLM([action("capture", I7)]), shop.capture).kickoff()
    assert [p.status for p in again.value.pending] == [EffectStatus.QUARANTINED]
    assert [p.status for p in waiting(first.value, [shop.capture])] == [EffectStatus.QUARANTINED]
    assert (shop.payments.committed(), shop.payments.attempts()) == (1, 1)

    found = shop.payments.effects()[0]["response"]
    confirm_with_cli(shop.ledger_path, OPERATION, found)
    assert waiting(first.value, [shop.capture]) == []
    llm = ScriptLLM([action("capture", I7), final("Captured INV-7.")])
    assert shop_crew(llm, shop.capture).kickoff().raw == "Captured INV-7."
    assert [json.loads(seen) for seen in llm.observations()] == [found]
    assert (shop.payments.committed(), shop.payments.attempts()) == (1, 1)
    shop.close()


def test_a_restart_in_a_new_process_after_confirm_commits_once(tmp_path):
    """A process pauses on a lost ack and ends; a new one waits; after confirm, one commit."""
    started = report(CHILD, "run", str(tmp_path), "lose_ack")
    assert [(p["operation_id"], p["status"]) for p in started["pending"]] == [
        (OPERATION, "QUARANTINED")
    ]
    shop = open_shop(tmp_path)
    assert report(CHILD, "run", str(tmp_path))["pending"][0]["status"] == "QUARANTINED"
    assert (shop.payments.committed(), shop.payments.attempts()) == (1, 1)

    found = shop.payments.effects()[0]["response"]
    confirm_with_cli(shop.ledger_path, OPERATION, found)
    done = report(CHILD, "run", str(tmp_path))
    assert done["final"] == "Captured INV-7."
    assert done["observations"] == [json.dumps(found, sort_keys=True)]
    assert (shop.payments.committed(), shop.payments.attempts()) == (1, 1)
    shop.close()


def test_a_process_killed_after_the_commit_leaves_a_pause_that_a_new_process_honours(tmp_path):
    """SIGKILL between commit and record: the next process pauses, unsent; after confirm, once."""
    killed = subprocess.run(
        [sys.executable, str(CHILD), "run", str(tmp_path), "crash_after_commit"],
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    shop = open_shop(tmp_path)
    assert (shop.payments.committed(), shop.payments.attempts()) == (1, 1)
    assert shop.ledger.get(OPERATION).status is EffectStatus.DISPATCHED

    [pending] = report(CHILD, "run", str(tmp_path))["pending"]
    assert (pending["operation_id"], pending["status"]) == (OPERATION, "QUARANTINED")
    assert (shop.payments.committed(), shop.payments.attempts()) == (1, 1)

    confirm_with_cli(shop.ledger_path, OPERATION, shop.payments.effects()[0]["response"])
    assert report(CHILD, "run", str(tmp_path))["final"] == "Captured INV-7."
    assert (shop.payments.committed(), shop.payments.attempts()) == (1, 1)
    shop.close()


def test_a_conflicting_call_is_refused_to_the_model_without_inviting_a_retry(tmp_path):
    """call_scoped: another amount in the same task and run is a conflict; nothing more sent."""
    shop = open_shop(tmp_path)

    @effect(operation_id=call_scoped("refund"), executor=EffectExecutor(shop.ledger))
    def refund(invoice_id: str, amount_cents: int, *, idempotency_key: str = INJECTED) -> dict:
        """Refund an invoice.

        Args:
            invoice_id: The invoice to refund.
            amount_cents: The amount to refund, in cents.
            idempotency_key: Supplied by the executor.
        """
        return shop.payments.capture(invoice_id, amount_cents, idempotency_key=idempotency_key)

    other = {"invoice_id": "INV-7", "amount_cents": 900}
    llm = ScriptLLM([action("refund", I7), action("refund", other), final("Stopped.")])
    assert shop_crew(llm, refund, run_id="order-7").kickoff().raw == "Stopped."
    first, second = llm.observations()
    assert json.loads(first)["amount_cents"] == 700
    assert "do not retry it" in second
    assert "try again" not in second.lower()
    assert (shop.payments.committed(), shop.payments.attempts()) == (1, 1)
    [record] = shop.ledger.list_operations()
    assert record.operation_id.startswith("refund:order-7:")
    assert record.operation_id.endswith(":refund")
    shop.close()


def test_a_call_scoped_tool_without_a_run_id_fails_to_the_application_sending_nothing(tmp_path):
    """No run id, no flow: the scope-reading operation id is raised out of kickoff, unsent."""
    shop = open_shop(tmp_path)

    @effect(operation_id=call_scoped("refund"), executor=EffectExecutor(shop.ledger))
    def refund(invoice_id: str, *, idempotency_key: str = INJECTED) -> dict:
        """Refund an invoice.

        Args:
            invoice_id: The invoice to refund.
            idempotency_key: Supplied by the executor.
        """
        return shop.payments.capture(invoice_id, 1, idempotency_key=idempotency_key)

    llm = ScriptLLM([action("refund", {"invoice_id": "INV-7"})])
    with pytest.raises(ConfigurationError) as failed:
        shop_crew(llm, refund).kickoff()
    assert "call scope" in str(failed.value)
    assert shop.payments.attempts() == 0
    assert shop.ledger.list_operations() == []
    shop.close()


def test_a_crew_a_flow_created_is_scoped_by_the_flows_state_id(tmp_path):
    """No run_id=: a call-scoped operation id takes the run from the parent Flow's state id."""
    shop = open_shop(tmp_path)

    @effect(operation_id=call_scoped("refund"), executor=EffectExecutor(shop.ledger))
    def refund(invoice_id: str, *, idempotency_key: str = INJECTED) -> dict:
        """Refund an invoice.

        Args:
            invoice_id: The invoice to refund.
            idempotency_key: Supplied by the executor.
        """
        return shop.payments.capture(invoice_id, 1, idempotency_key=idempotency_key)

    class RefundFlow(Flow):
        @start()
        def refund_it(self) -> str:
            llm = ScriptLLM([action("refund", {"invoice_id": "INV-7"}), final("Refunded.")])
            return str(shop_crew(llm, refund).kickoff().raw)

    flow = RefundFlow()
    assert flow.kickoff() == "Refunded."
    [record] = shop.ledger.list_operations()
    assert record.operation_id.startswith(f"refund:{flow.state['id']}:")
    assert shop.payments.committed() == 1
    shop.close()


def test_a_persisted_flow_resumed_by_its_id_stays_paused_then_refunds_once(tmp_path):
    """@persist flow, lost ack: kicked off by its id, paused and unsent; after confirm, once."""
    shop = open_shop(tmp_path, payment_faults=[Fault.LOSE_ACK])
    flows = SQLiteFlowPersistence(db_path=str(tmp_path / "flows.db"))

    @effect(operation_id=call_scoped("refund"), executor=EffectExecutor(shop.ledger))
    def refund(invoice_id: str, *, idempotency_key: str = INJECTED) -> dict:
        """Refund an invoice.

        Args:
            invoice_id: The invoice to refund.
            idempotency_key: Supplied by the executor.
        """
        return shop.payments.capture(invoice_id, 1, idempotency_key=idempotency_key)

    @persist(flows)
    class RefundFlow(Flow):
        @start()
        def refund_it(self) -> str:
            llm = ScriptLLM([action("refund", {"invoice_id": "INV-7"}), final("Refunded.")])
            return str(shop_crew(llm, refund).kickoff().raw)

    first = RefundFlow()
    flow_id = first.state["id"]
    with pytest.raises(CrewPaused) as paused:
        first.kickoff()
    [pending] = paused.value.pending
    assert pending.operation_id.startswith(f"refund:{flow_id}:")
    with pytest.raises(CrewPaused):
        RefundFlow().kickoff(inputs={"id": flow_id})
    assert (shop.payments.committed(), shop.payments.attempts()) == (1, 1)

    confirm_with_cli(shop.ledger_path, pending.operation_id, shop.payments.effects()[0]["response"])
    assert RefundFlow().kickoff(inputs={"id": flow_id}) == "Refunded."
    assert (shop.payments.committed(), shop.payments.attempts()) == (1, 1)
    shop.close()
