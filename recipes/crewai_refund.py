"""A CrewAI crew refunds an order; the acknowledgement is lost; the crew pauses, not lies.

To use this with your own provider and model, change four things:

- ``RefundAPI.refund``: call your provider's refund endpoint and forward
  ``idempotency_key`` (Stripe: the ``Idempotency-Key`` header).
- ``refund_order``'s ``@effect`` options: keep ``idempotency_guaranteed=False``
  unless your provider documents that a resend with the same key never refunds
  twice; add ``probe=`` when it has a lookup you trust.
- ``ScriptedLLM``: your model (``LLM(model="openai/gpt-5")``).
- ``run_id=``: the id your app keeps the conversation or order under, so a
  restarted process resumes the same operations (here the operation id is a
  business key, ``order:{order_id}:refund``, and needs none).

CrewAI is kept offline and out of the home directory: telemetry and tracing
off (``CREWAI_DISABLE_TELEMETRY``, ``CREWAI_DISABLE_TRACKING``,
``CREWAI_TRACING_ENABLED=false``, ``CREWAI_TESTING=true`` so no first-run
prompt), and its storage (``XDG_DATA_HOME``, ``HOME``: CrewAI 1.6 writes a
credentials key under ``~/.local/share/crewai``) in a temporary directory.

Run: ``python recipes/crewai_refund.py`` (offline: a scripted model and a fake
provider that counts what it committed). Each step runs in a new process, as
after a restart. It exits non-zero unless the provider holds exactly one refund.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

WORKDIR_VARIABLE = "EFFECTGUARD_RECIPE_WORKDIR"


def offline(workdir: Path) -> None:
    """Point CrewAI's telemetry, tracing and storage away from the network and from ``~``."""
    os.environ.update(
        {
            "CREWAI_DISABLE_TELEMETRY": "true",
            "CREWAI_DISABLE_TRACKING": "true",
            "CREWAI_TRACING_ENABLED": "false",
            "CREWAI_TESTING": "true",
            "CREWAI_STORAGE_DIR": "crewai-refund",
            "XDG_DATA_HOME": str(workdir / "data"),
            "HOME": str(workdir / "home"),
        }
    )


OPERATION = "order:ORD-7:refund"
ARGUMENTS = {"order_id": "ORD-7", "amount_cents": 2500}


def step(workdir: Path) -> dict[str, Any]:
    """One process's step: kick the crew off; report its answer or the effects it paused on."""
    offline(workdir)
    # CrewAI reads its settings when it is imported: the imports follow offline().
    from crewai import Agent, Crew, CrewOutput, Task  # noqa: PLC0415 - after offline()
    from crewai.llms.base_llm import BaseLLM  # noqa: PLC0415 - after offline()

    from effectguard import INJECTED, EffectExecutor, SQLiteEffectLedger, effect  # noqa: PLC0415 - after offline()
    from effectguard.adapters.crewai import (  # noqa: PLC0415 - after offline()
        CrewPaused,
        as_crewai_tool,
        stop_on_unconfirmed,
    )
    from effectguard.testkit import FakePaymentProvider, Fault, FaultPlan, Lookup  # noqa: PLC0415 - after offline()

    class RefundAPI(FakePaymentProvider):
        """Stands in for your provider's refund endpoint: a fake that counts what it committed."""

        def refund(
            self, order_id: str, amount_cents: int, *, idempotency_key: str
        ) -> dict[str, Any]:
            """Refund ``amount_cents`` of ``order_id``; returns the refund when acknowledged."""
            body = {"order_id": order_id, "amount_cents": amount_cents}

            def response(seq: int) -> dict[str, Any]:
                return {"id": f"re_{seq:06d}", "status": "succeeded", **body}

            return self._submit(
                idempotency_key, idempotency_key, body, deduplicate=False, make_response=response
            )

    class ScriptedLLM(BaseLLM):
        """The model: ask for the refund; once the tool answered, say what it returned."""

        def call(self, messages: Any, *args: Any, **kwargs: Any) -> str:  # noqa: ARG002 - CrewAI's signature
            last = str(messages[-1]["content"]) if isinstance(messages, list) else ""
            if "\nObservation: " in last:
                return "Thought: done\nFinal Answer: Refunded: " + last.split("Observation: ")[1]
            return (
                f"Thought: refund it\nAction: refund_order\nAction Input: {json.dumps(ARGUMENTS)}"
            )

        def supports_function_calling(self) -> bool:
            return False

    # The first process's provider commits the refund and loses its acknowledgement; it has
    # no lookup and no idempotency guarantee, so nobody but an operator can say it happened.
    faults = FaultPlan({1: Fault.LOSE_ACK}) if not (workdir / "api.db").exists() else None
    api = RefundAPI(
        idempotency_guaranteed=False, lookup=Lookup.NONE, faults=faults, path=workdir / "api.db"
    )
    ledger = SQLiteEffectLedger(workdir / "ledger.db")

    @effect(
        operation_id="order:{order_id}:refund",
        idempotency_key="refund:{order_id}",
        executor=EffectExecutor(ledger),
    )
    def refund_order(
        order_id: str, amount_cents: int, *, idempotency_key: str = INJECTED
    ) -> dict[str, Any]:
        """Refund a customer's order.

        Args:
            order_id: The order to refund, for example "ORD-7".
            amount_cents: How much to refund, in cents.
            idempotency_key: Supplied by the executor (never shown to the model).
        """
        return api.refund(order_id, amount_cents, idempotency_key=idempotency_key)

    agent = Agent(
        role="refund clerk",
        goal="Refund the order the customer asked about",
        backstory="Works the refunds desk.",
        llm=ScriptedLLM(model="scripted"),
        tools=[as_crewai_tool(refund_order, run_id="conversation-7")],
        step_callback=stop_on_unconfirmed,
        max_retry_limit=0,
    )
    task = Task(
        description="Refund order ORD-7 (25.00).",
        expected_output="One line saying what was refunded.",
        agent=agent,
    )
    try:
        done = Crew(agents=[agent], tasks=[task]).kickoff()
        # kickoff() gives a streaming output only to a crew made with stream=True.
        outcome: dict[str, Any] = {"final": done.raw if isinstance(done, CrewOutput) else None}
    except CrewPaused as paused:
        outcome = {"pending": [p.to_json() for p in paused.pending]}
    ledger.close()
    return {**outcome, "committed": api.committed()}


def run_step(workdir: Path) -> dict[str, Any]:
    """Run :func:`step` in a new process (a restart) and read its report."""
    done = subprocess.run(  # noqa: S603 - this very recipe, under this interpreter
        [sys.executable, __file__],
        env={**os.environ, WORKDIR_VARIABLE: str(workdir)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if done.returncode != 0:
        print(done.stderr[-3000:])
        raise SystemExit(1)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def operator_confirms(workdir: Path) -> None:
    """The operator finds the refund at the provider and confirms it in the ledger."""
    from effectguard import SQLiteEffectLedger  # noqa: PLC0415 - the parent needs no CrewAI
    from effectguard.testkit import FakePaymentProvider, Lookup  # noqa: PLC0415 - the parent needs no CrewAI

    api = FakePaymentProvider(
        idempotency_guaranteed=False, lookup=Lookup.NONE, path=workdir / "api.db"
    )
    found = api.find_capture("refund:ORD-7")
    if found is None:
        print("  the provider has no such refund: the operator would `reject` instead")
        return
    print(f"  the provider shows {json.dumps(found)}")
    ledger = SQLiteEffectLedger(workdir / "ledger.db")
    ledger.confirm(
        OPERATION,
        output=found,
        provider_operation_id=found["id"],
        actor="ops@example.com",
        reason="refund found in the provider's dashboard",
        evidence_reference="DASH-7",
    )
    ledger.close()


def main(workdir: Path) -> int:
    """Run the story, one process per step; return the exit status."""
    print("1. The crew refunds ORD-7; the acknowledgement is lost.")
    first = run_step(workdir)
    if "pending" not in first:
        print(f"FAIL: the crew completed with {first!r}")
        return 1
    [pending] = first["pending"]
    print(f"  the crew paused on {pending['operation_id']}: {pending['status']}")
    print(f"  operator: {pending['operator_command']}")
    print("2. A new process kicks the crew off before anyone checked: still paused.")
    if "pending" not in run_step(workdir):
        print("FAIL: a quarantined refund must not complete the crew")
        return 1
    print("3. The operator checks the provider and confirms the refund.")
    operator_confirms(workdir)
    print("4. A new process kicks the crew off again.")
    last = run_step(workdir)
    print(f"  the crew answered: {last.get('final')}")
    committed = last["committed"]
    print(f"5. The provider holds {committed} refund(s).")
    if last.get("final") is None or committed != 1:
        print("FAIL: expected a completed crew and exactly one refund")
        return 1
    print("OK: one refund, and the crew finished only once it was confirmed.")
    return 0


if __name__ == "__main__":
    # effectguard installs no log handler; this one prints each event it logs as one short line.
    logging.basicConfig(level=logging.WARNING, format="  log: %(levelname)s %(message).100s")
    logging.getLogger("effectguard").setLevel(logging.INFO)
    if WORKDIR_VARIABLE in os.environ:
        print(json.dumps(step(Path(os.environ[WORKDIR_VARIABLE]))))
        sys.stdout.flush()
        # CrewAI 1.6's console listener waits 5 s per task in a worker thread that interpreter
        # shutdown joins, for a crew that is not verbose; the step's report is written.
        os._exit(0)
    with tempfile.TemporaryDirectory(prefix="effectguard-crewai-") as directory:
        sys.exit(main(Path(directory)))
